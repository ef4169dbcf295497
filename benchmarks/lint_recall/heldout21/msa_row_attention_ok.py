"""MSA Transformer block stack (row attention, then column attention) for masked-residue pretraining.

An alignment is (rows, columns) of residue tokens; rows are right-padded with PAD to the longest
aligned sequence, and the batch holds several alignments with the same depth. The collator
returns the tokens and an `attention_mask` (True = real residue) in the Hugging Face style;
row attention runs nn.MultiheadAttention over the columns of every row.

Source: self_attention_mask_guide.txt §2 and Q1 (seed), conventions.md §1 direction cheat-sheet, pytorch/pytorch PR #141694
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

ALPHABET = "-ACDEFGHIKLMNPQRSTVWY"
PAD, MASK = 0, 1
VOCAB = len(ALPHABET) + 2


def collate(alignments):
    depth = len(alignments[0])
    width = max(len(row) for msa in alignments for row in msa)
    tokens = torch.full((len(alignments), depth, width), PAD, dtype=torch.long)
    for b, msa in enumerate(alignments):
        for r, row in enumerate(msa):
            tokens[b, r, : len(row)] = torch.tensor([ALPHABET.index(c) + 2 for c in row])
    return {"input_ids": tokens, "attention_mask": tokens != PAD}


class RowAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)

    def forward(self, x, attention_mask):
        b, r, c, d = x.shape
        h = self.norm(x).reshape(b * r, c, d)
        out, _ = self.attn(h, h, h, key_padding_mask=~attention_mask.reshape(b * r, c))
        return x + out.reshape(b, r, c, d)


class ColumnAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)

    def forward(self, x):
        b, r, c, d = x.shape
        h = self.norm(x).transpose(1, 2).reshape(b * c, r, d)
        out, _ = self.attn(h, h, h)
        return x + out.reshape(b, c, r, d).transpose(1, 2)


class MSATransformer(nn.Module):
    def __init__(self, dim=32, heads=4, depth=2, max_cols=64):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim, padding_idx=PAD)
        self.col_pos = nn.Embedding(max_cols, dim)
        self.rows = nn.ModuleList(RowAttention(dim, heads) for _ in range(depth))
        self.cols = nn.ModuleList(ColumnAttention(dim, heads) for _ in range(depth))
        self.head = nn.Linear(dim, VOCAB)

    def forward(self, input_ids, attention_mask):
        x = self.embed(input_ids) + self.col_pos(torch.arange(input_ids.size(-1)))
        for row, col in zip(self.rows, self.cols):
            x = col(row(x, attention_mask))
        return self.head(x)


if __name__ == "__main__":
    torch.manual_seed(0)
    batch = collate([["MKV-LSA", "MRVELSA", "MKI-LT"], ["GSHM", "GS-M", "ASHML"]])
    model = MSATransformer()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(5):
        ids, keep = batch["input_ids"], batch["attention_mask"]
        pick = (torch.rand(ids.shape) < 0.2) & keep
        logits = model(ids.masked_fill(pick, MASK), keep)
        loss = F.cross_entropy(logits[pick], ids[pick]) if pick.any() else logits.sum() * 0
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.3f}")
