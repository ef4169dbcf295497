"""MIST-style fingerprint prediction from annotated tandem mass spectra.

Layout after samgoldman97/mist (Goldman et al., "Annotating metabolite mass spectra with
domain-inspired chemical formula transformers", Nat. Mach. Intell. 5, 965-979, 2023): subformula
peaks with intensities and the precursor as the first ("cls") peak, `_collate_fn` returning a
dict with `num_peaks`, `FormulaTransformer` with pairwise formula-difference features added to
the attention of each `TransformerEncoderLayer`, `SpectraEncoder` predicting a fingerprint,
BCE training and retrieval among candidate structures; synthetic metabolites built from 48
substructures whose fragments give the peaks.

Source: hyunwoongko/transformer PR #40, bentrevett/pytorch-seq2seq#96 (conventions.md §3 item 21), conventions.md §1 (direction cheat-sheet)
"""

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

ELEMENTS = ["C", "H", "N", "O", "P", "S"]
N_SUB = 48


def _collate_fn(items):
    max_peaks = max(len(it["peak_formulas"]) for it in items)
    B, E = len(items), len(ELEMENTS)
    peak_formulas, peak_intensities = torch.zeros(B, max_peaks, E), torch.zeros(B, max_peaks)
    for b, it in enumerate(items):
        n = len(it["peak_formulas"])
        peak_formulas[b, :n] = torch.tensor(it["peak_formulas"], dtype=torch.float32)
        peak_intensities[b, :n] = torch.tensor(it["peak_intensities"], dtype=torch.float32)
    return {"peak_formulas": peak_formulas, "peak_intensities": peak_intensities,
            "num_peaks": torch.tensor([len(it["peak_formulas"]) for it in items]),
            "fingerprints": torch.tensor(np.stack([it["fingerprint"] for it in items]), dtype=torch.float32)}


class FormulaEncoder(nn.Module):
    def __init__(self, hidden_size, num_freqs=4):
        super().__init__()
        self.register_buffer("freqs", 2.0 ** torch.arange(num_freqs) * math.pi / 16)
        in_dim = len(ELEMENTS) * (1 + 2 * num_freqs) * 2 + 1
        self.mlp = nn.Sequential(nn.Linear(in_dim, hidden_size), nn.ReLU(), nn.Linear(hidden_size, hidden_size))

    def featurize(self, counts):
        ang = counts.unsqueeze(-1) * self.freqs
        return torch.cat([counts.unsqueeze(-1) / 10, torch.sin(ang), torch.cos(ang)], -1).flatten(-2)

    def forward(self, peak_formulas, peak_intensities):
        precursor = peak_formulas[:, :1].expand_as(peak_formulas)
        x = torch.cat([self.featurize(peak_formulas), self.featurize(precursor - peak_formulas),
                       peak_intensities.unsqueeze(-1)], -1)
        return self.mlp(x)


class MultiheadAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, dropout=0.0, pairwise_featurization=True):
        super().__init__()
        self.num_heads, self.head_dim, self.dropout = num_heads, embed_dim // num_heads, dropout
        self.in_proj = nn.Linear(embed_dim, 3 * embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        self.pair_proj = nn.Linear(embed_dim, num_heads) if pairwise_featurization else None

    def forward(self, query, key_padding_mask=None, pairwise_features=None):
        tgt_len, bsz, embed_dim = query.shape
        q, k, v = self.in_proj(query).view(tgt_len, bsz, 3, self.num_heads, self.head_dim).permute(2, 1, 3, 0, 4)
        attn_weights = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        if self.pair_proj is not None and pairwise_features is not None:
            attn_weights = attn_weights + self.pair_proj(pairwise_features).permute(0, 3, 1, 2)
        if key_padding_mask is not None:
            attn_weights = attn_weights.masked_fill(key_padding_mask.unsqueeze(1).unsqueeze(3), float("-inf"))  # expect: MC514 collator
        attn_weights = F.dropout(attn_weights.softmax(-1), p=self.dropout, training=self.training)
        out = (attn_weights @ v).permute(2, 0, 1, 3).reshape(tgt_len, bsz, embed_dim)
        return self.out_proj(out), attn_weights


class TransformerEncoderLayer(nn.Module):
    def __init__(self, d_model, nhead, dim_feedforward, dropout=0.1, pairwise_featurization=True):
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout, pairwise_featurization)
        self.linear1, self.linear2 = nn.Linear(d_model, dim_feedforward), nn.Linear(dim_feedforward, d_model)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, src, pairwise_features=None, src_key_padding_mask=None):
        src2, _ = self.self_attn(src, key_padding_mask=src_key_padding_mask, pairwise_features=pairwise_features)
        src = self.norm1(src + self.dropout(src2))
        src2 = self.linear2(self.dropout(F.relu(self.linear1(src))))
        return self.norm2(src + self.dropout(src2)), pairwise_features


class FormulaTransformer(nn.Module):
    def __init__(self, hidden_size=64, peak_attn_layers=2, spectra_dropout=0.1, num_heads=4, set_pooling="cls"):
        super().__init__()
        self.set_pooling = set_pooling
        self.formula_encoder = FormulaEncoder(hidden_size)
        self.pairwise_encoder = nn.Sequential(nn.Linear(len(ELEMENTS), hidden_size), nn.ReLU())
        self.peak_attn_layers = nn.ModuleList([
            TransformerEncoderLayer(hidden_size, num_heads, hidden_size * 2, spectra_dropout)
            for _ in range(peak_attn_layers)])

    def forward(self, batch):
        peak_tensor = self.formula_encoder(batch["peak_formulas"], batch["peak_intensities"])
        diffs = batch["peak_formulas"][:, :, None] - batch["peak_formulas"][:, None, :]
        pairwise_features = self.pairwise_encoder(diffs / 10)
        peak_tensor = peak_tensor.transpose(0, 1)
        peak_dim = peak_tensor.shape[0]
        padding_mask = torch.arange(peak_dim)[None, :] >= batch["num_peaks"][:, None]
        for peak_attn_layer in self.peak_attn_layers:
            peak_tensor, pairwise_features = peak_attn_layer(peak_tensor, pairwise_features=pairwise_features,
                                                             src_key_padding_mask=padding_mask)
        if self.set_pooling == "cls":
            return peak_tensor[0]
        keep = (~padding_mask).float().transpose(0, 1).unsqueeze(-1)
        return (peak_tensor * keep).sum(0) / keep.sum(0)


class SpectraEncoder(nn.Module):
    def __init__(self, output_size=N_SUB, hidden_size=64, spectra_dropout=0.1, top_layers=1, **kwargs):
        super().__init__()
        self.spectra_encoder = FormulaTransformer(hidden_size, spectra_dropout=spectra_dropout, **kwargs)
        layers = [nn.Linear(hidden_size, hidden_size), nn.ReLU(), nn.Dropout(spectra_dropout)] * top_layers
        self.fingerprint_head = nn.Sequential(*layers, nn.Linear(hidden_size, output_size))

    def forward(self, batch):
        encoder_output = self.spectra_encoder(batch)
        return torch.sigmoid(self.fingerprint_head(encoder_output)), {"h0": encoder_output}


def make_library(rng):
    subs = np.stack([rng.integers(1, 7, N_SUB), rng.integers(1, 11, N_SUB), rng.integers(0, 3, N_SUB),
                     rng.integers(0, 4, N_SUB), rng.integers(0, 2, N_SUB), rng.integers(0, 2, N_SUB)], 1)
    return subs


def random_molecule(rng):
    fp = np.zeros(N_SUB, dtype=np.float32)
    fp[rng.choice(N_SUB, rng.integers(3, 8), replace=False)] = 1
    return fp


def simulate_spectrum(rng, subs, fp):
    present = np.flatnonzero(fp)
    formulas, intens = [subs[present].sum(0)], [1.0]
    for s in present:
        formulas.append(subs[s])
        intens.append(rng.uniform(0.2, 1.0))
    for _ in range(rng.integers(1, 4)):
        a, b = rng.choice(present, 2, replace=False)
        formulas.append(subs[a] + subs[b])
        intens.append(rng.uniform(0.05, 0.5))
    for _ in range(rng.integers(0, 4)):
        formulas.append(rng.integers(0, 8, len(ELEMENTS)))
        intens.append(rng.uniform(0.01, 0.2))
    order = np.concatenate([[0], 1 + rng.permutation(len(formulas) - 1)])
    return {"peak_formulas": np.array(formulas)[order], "peak_intensities": np.array(intens)[order], "fingerprint": fp}


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    subs = make_library(rng)
    train = [simulate_spectrum(rng, subs, random_molecule(rng)) for _ in range(3000)]
    test = [simulate_spectrum(rng, subs, random_molecule(rng)) for _ in range(200)]
    model = SpectraEncoder()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(10):
        model.train()
        order = rng.permutation(len(train))
        for i in range(0, len(train), 64):
            batch = _collate_fn([train[j] for j in order[i:i + 64]])
            pred, aux = model(batch)
            loss = F.binary_cross_entropy(pred, batch["fingerprints"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch + 1}: BCE {loss.item():.4f}")
    model.eval()
    batch = _collate_fn(test)
    with torch.no_grad():
        pred, _ = model(batch)
    decoys = torch.tensor(np.stack([random_molecule(rng) for _ in range(200 * 19)])).view(200, 19, N_SUB)
    cands = torch.cat([batch["fingerprints"].unsqueeze(1), decoys], 1)
    sims = F.cosine_similarity(pred.unsqueeze(1), cands, dim=-1)
    top1 = (sims.argmax(1) == 0).float().mean().item()
    tani = ((pred > 0.5) & (batch["fingerprints"] > 0)).sum(1) / ((pred > 0.5) | (batch["fingerprints"] > 0)).sum(1).clamp(min=1)
    print(f"test: mean Tanimoto {tani.float().mean().item():.3f}, retrieval top-1 among 20 candidates {top1:.3f}")
