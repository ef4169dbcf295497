"""De novo peptide sequencing from tandem mass spectra (Casanovo / depthcharge layout).

A spectrum is a set of (m/z, intensity) peaks, zero-padded to the largest
spectrum of the batch. The SpectrumEncoder prepends a learned latent spectrum
token and encodes the peaks with sinusoidal m/z features; the PeptideDecoder
starts from the precursor (mass and charge) and predicts amino acids and a stop
token autoregressively. Decoding is greedy, re-running the decoder on the
growing peptide as depthcharge does.

Source: pytorch/pytorch#29546 (conventions.md §3 item 9); conventions.md §1 (nn.Transformer row, generate_square_subsequent_mask); seed self_attention_mask_guide.txt §3
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

AA_MASSES = {
    "G": 57.02146, "A": 71.03711, "S": 87.03203, "P": 97.05276, "V": 99.06841, "T": 101.04768,
    "C": 160.03065, "L": 113.08406, "N": 114.04293, "D": 115.02694, "Q": 128.05858, "K": 128.09496,
    "E": 129.04259, "M": 131.04049, "H": 137.05891, "F": 147.06841, "R": 156.10111, "Y": 163.06333,
    "W": 186.07931,
}
VOCAB = ["<pad>"] + list(AA_MASSES) + ["$"]
STOP = VOCAB.index("$")
PROTON, H2O = 1.007276, 18.010565


def generate_tgt_mask(sz):
    return torch.triu(torch.ones(sz, sz, dtype=torch.bool)).transpose(0, 1)  # expect: MC521 transposed


class MassEncoder(nn.Module):
    def __init__(self, dim_model, min_wavelength=0.001, max_wavelength=10000):
        super().__init__()
        n_sin, n_cos = dim_model // 2, dim_model - dim_model // 2
        base = min_wavelength / (2 * math.pi)
        scale = max_wavelength / min_wavelength
        self.register_buffer("sin_term", base * scale ** (torch.arange(n_sin).float() / (n_sin - 1)))
        self.register_buffer("cos_term", base * scale ** (torch.arange(n_cos).float() / (n_cos - 1)))

    def forward(self, x):
        return torch.cat([torch.sin(x / self.sin_term), torch.cos(x / self.cos_term)], dim=-1)


class SpectrumEncoder(nn.Module):
    def __init__(self, dim_model=64, n_head=4, dim_feedforward=128, n_layers=2, dropout=0.0):
        super().__init__()
        self.latent_spectrum = nn.Parameter(torch.randn(1, 1, dim_model))
        self.mass_encoder = MassEncoder(dim_model)
        self.int_encoder = nn.Linear(1, dim_model, bias=False)
        layer = nn.TransformerEncoderLayer(dim_model, n_head, dim_feedforward, dropout=dropout, batch_first=True)
        self.transformer_encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)

    def forward(self, spectra):
        zeros = ~spectra.sum(dim=2).bool()
        mask = torch.cat([torch.zeros(spectra.shape[0], 1, dtype=torch.bool), zeros], dim=1)
        peaks = self.mass_encoder(spectra[:, :, [0]]) + self.int_encoder(spectra[:, :, [1]])
        latent = self.latent_spectrum.expand(peaks.shape[0], -1, -1)
        peaks = torch.cat([latent, peaks], dim=1)
        return self.transformer_encoder(peaks, src_key_padding_mask=mask), mask


class PeptideDecoder(nn.Module):
    def __init__(self, dim_model=64, n_head=4, dim_feedforward=128, n_layers=2, dropout=0.0, max_charge=5):
        super().__init__()
        self.aa_encoder = nn.Embedding(len(VOCAB), dim_model, padding_idx=0)
        self.mass_encoder = MassEncoder(dim_model)
        self.charge_encoder = nn.Embedding(max_charge, dim_model)
        self.pos_encoder = MassEncoder(dim_model, min_wavelength=1.0, max_wavelength=1e4)
        layer = nn.TransformerDecoderLayer(dim_model, n_head, dim_feedforward, dropout=dropout, batch_first=True)
        self.transformer_decoder = nn.TransformerDecoder(layer, n_layers)
        self.final = nn.Linear(dim_model, len(VOCAB))

    def forward(self, tokens, precursors, memory, memory_key_padding_mask):
        masses = self.mass_encoder(precursors[:, None, [0]])
        charges = self.charge_encoder(precursors[:, 1].long() - 1)[:, None]
        tgt = torch.cat([masses + charges, self.aa_encoder(tokens)], dim=1)
        tgt_key_padding_mask = F.pad(tokens == 0, (1, 0), value=False)
        tgt = tgt + self.pos_encoder(torch.arange(tgt.shape[1], dtype=torch.float)[None, :, None])
        tgt_mask = generate_tgt_mask(tgt.shape[1]).to(tgt.device)
        preds = self.transformer_decoder(tgt, memory, tgt_mask=tgt_mask, tgt_key_padding_mask=tgt_key_padding_mask,
                                         memory_key_padding_mask=memory_key_padding_mask)
        return self.final(preds)


class Spec2Pep(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = SpectrumEncoder()
        self.decoder = PeptideDecoder()

    def forward(self, spectra, precursors, tokens):
        memory, mem_masks = self.encoder(spectra)
        return self.decoder(tokens, precursors, memory, mem_masks)

    @torch.no_grad()
    def greedy_decode(self, spectra, precursors, max_length=16):
        memory, mem_masks = self.encoder(spectra)
        tokens = torch.zeros(spectra.shape[0], 0, dtype=torch.long)
        done = torch.zeros(spectra.shape[0], dtype=torch.bool)
        for _ in range(max_length):
            logits = self.decoder(tokens, precursors, memory, mem_masks)[:, -1]
            nxt = logits[:, 1:].argmax(-1) + 1
            nxt = nxt.masked_fill(done, 0)
            tokens = torch.cat([tokens, nxt[:, None]], dim=1)
            done |= nxt == STOP
            if done.all():
                break
        return ["".join(VOCAB[t] for t in row if 0 < t < STOP) for row in tokens.tolist()]


def simulate_spectrum(peptide, charge, g, n_noise=4):
    masses = torch.tensor([AA_MASSES[a] for a in peptide])
    b_ions = torch.cumsum(masses, 0)[:-1] + PROTON
    y_ions = torch.cumsum(masses.flip(0), 0)[:-1] + H2O + PROTON
    noise = torch.rand(n_noise, generator=g) * float(masses.sum())
    mz = torch.cat([b_ions, y_ions, noise])
    intensity = torch.cat([torch.rand(2 * len(b_ions), generator=g) * 0.5 + 0.5, torch.rand(n_noise, generator=g) * 0.2])
    precursor_mz = (float(masses.sum()) + H2O + charge * PROTON) / charge
    return torch.stack([mz, intensity / intensity.max()], dim=-1), torch.tensor([precursor_mz * charge, charge])


def collate(peptides, g):
    specs, precs = zip(*[simulate_spectrum(p, 2 + i % 2, g) for i, p in enumerate(peptides)])
    spectra = nn.utils.rnn.pad_sequence(list(specs), batch_first=True)
    tokens = nn.utils.rnn.pad_sequence([torch.tensor([VOCAB.index(a) for a in p] + [STOP]) for p in peptides],
                                       batch_first=True)
    return spectra, torch.stack(precs), tokens


if __name__ == "__main__":
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    peptides = ["PEPTLDEK", "GASPVTR", "LLNDQK", "MHFYWER"]
    spectra, precursors, tokens = collate(peptides, g)
    model = Spec2Pep()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(5):
        logits = model(spectra, precursors, tokens[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), tokens.flatten(), ignore_index=0)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.4f}")
    model.eval()
    preds = model.greedy_decode(spectra, precursors)
    recall = sum(p == t for p, t in zip(preds, peptides)) / len(peptides)
    print(preds, "peptide recall", recall)
