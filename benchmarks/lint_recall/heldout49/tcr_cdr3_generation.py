"""Epitope-conditioned generation of T-cell receptor CDR3-beta sequences.

An encoder reads the presented peptide (VDJdb-style epitopes such as the
influenza M1 GILGFVFTL) and a decoder writes CDR3-beta amino-acid sequences
one residue at a time, for designing candidate TCRs against a target
epitope. Training uses teacher forcing; design uses greedy decoding.

Source: pytorch/pytorch#29546 (conventions.md §3 item 9), rasbt/LLMs-from-scratch#1061 (item 14)
"""

import random

import torch
import torch.nn as nn
import torch.nn.functional as F

AMINO = "ACDEFGHIKLMNPQRSTVWY"
PAD, BOS, EOS = 0, 1, 2
STOI = {a: i + 3 for i, a in enumerate(AMINO)}
ITOS = {i: a for a, i in STOI.items()}
EPITOPES = {"GILGFVFTL": "RS", "NLVPMVATV": "LAG", "GLCTLVAML": "PDR", "YLQPRTFLL": "QGN", "KLGGALQAK": "TW"}


def make_pairs(n, seed=0):
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        epitope, motif = rng.choice(list(EPITOPES.items()))
        middle = "".join(rng.choice(AMINO) for _ in range(rng.randint(1, 4)))
        cdr3 = "CASS" + motif + middle + rng.choice(["YEQYF", "NTEAFF", "GELFF"])
        pairs.append((epitope, cdr3))
    return pairs


def encode(seqs, bos_eos=False):
    rows = [([BOS] if bos_eos else []) + [STOI[a] for a in s] + ([EOS] if bos_eos else []) for s in seqs]
    n = max(len(r) for r in rows)
    return torch.tensor([r + [PAD] * (n - len(r)) for r in rows])


class TCRGenerator(nn.Module):
    def __init__(self, dim=64, heads=4, layers=2, max_len=32):
        super().__init__()
        self.embed = nn.Embedding(len(AMINO) + 3, dim, padding_idx=PAD)
        self.pos = nn.Embedding(max_len, dim)
        enc_layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.1, batch_first=True)
        dec_layer = nn.TransformerDecoderLayer(dim, heads, 4 * dim, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(enc_layer, layers, enable_nested_tensor=False)
        self.decoder = nn.TransformerDecoder(dec_layer, layers)
        self.out = nn.Linear(dim, len(AMINO) + 3)

    def embed_seq(self, tokens):
        return self.embed(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))

    def forward(self, epitope, cdr3_in):
        def subsequent_mask(n):
            return torch.tril(torch.ones(n, n, dtype=torch.bool, device=cdr3_in.device))  # expect: MC521 closure

        memory = self.encoder(self.embed_seq(epitope), src_key_padding_mask=epitope == PAD)
        h = self.decoder(
            self.embed_seq(cdr3_in),
            memory,
            tgt_mask=subsequent_mask(cdr3_in.shape[1]),
            tgt_key_padding_mask=cdr3_in == PAD,
            memory_key_padding_mask=epitope == PAD,
        )
        return self.out(h)

    @torch.no_grad()
    def design(self, epitopes, max_len=20):
        self.eval()
        src = encode(epitopes)
        seq = torch.full((len(epitopes), 1), BOS)
        for _ in range(max_len):
            nxt = self(src, seq)[:, -1].argmax(-1, keepdim=True)
            seq = torch.cat([seq, nxt], dim=1)
        out = []
        for row in seq[:, 1:].tolist():
            row = row[: row.index(EOS)] if EOS in row else row
            out.append("".join(ITOS.get(t, "?") for t in row))
        return out


def motif_rate(designs, epitopes):
    ok = [d.startswith("CASS") and d.endswith("F") and EPITOPES[e] in d[4:8] for d, e in zip(designs, epitopes)]
    return sum(ok) / len(ok)


def main():
    torch.manual_seed(0)
    train = make_pairs(2000, seed=1)
    model = TCRGenerator()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(4):
        model.train()
        random.Random(epoch).shuffle(train)
        for i in range(0, len(train), 64):
            batch = train[i : i + 64]
            src = encode([e for e, _ in batch])
            tgt = encode([c for _, c in batch], bos_eos=True)
            logits = model(src, tgt[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=PAD)
            opt.zero_grad()
            loss.backward()
            opt.step()
        targets = list(EPITOPES) * 4
        designs = model.design(targets)
        print(f"epoch {epoch} loss {loss.item():.3f} motif rate {motif_rate(designs, targets):.2f} e.g. {designs[0]}")


if __name__ == "__main__":
    main()
