"""Sentence-embedding encoder over packed rows: several short texts share one row.

Short texts are packed into rows with `segment_ids` (1, 2, ... per text, 0 for the padding at
the end of the row), the way packed fine-tuning collators for BERT-style encoders lay them out.
Position ids restart per text, attention is bidirectional inside a text and never crosses into
another one, and each text's embedding is the mean of its own tokens.

Source: pytorch/pytorch#103749, Biohub/esm#299; conventions.md §1 and §2.3
"""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class PackedBatch:
    input_ids: torch.Tensor
    segment_ids: torch.Tensor
    position_ids: torch.Tensor


def pack_texts(texts, row_len, pad_id=0):
    rows = []
    row, seg, pos, n = [], [], [], 0
    for text in texts:
        if len(row) + len(text) > row_len:
            rows.append((row, seg, pos))
            row, seg, pos, n = [], [], [], 0
        n += 1
        row, seg, pos = row + text, seg + [n] * len(text), pos + list(range(len(text)))
    rows.append((row, seg, pos))
    fill = lambda i, v: torch.tensor([r[i] + [v] * (row_len - len(r[i])) for r in rows])
    return PackedBatch(input_ids=fill(0, pad_id), segment_ids=fill(1, 0),
                       position_ids=fill(2, 0))


class SegmentAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x, mask):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / (d // self.n_heads) ** 0.5
        scores = scores.masked_fill(~mask[:, None], float("-inf"))  # expect: MC507 segments
        probs = scores.softmax(dim=-1)
        return self.proj(torch.einsum("bhqk,bhkd->bhqd", probs, v).transpose(1, 2).reshape(b, t, d))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.attn = SegmentAttention(d_model, n_heads)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.GELU(), nn.Linear(2 * d_model, d_model))

    def forward(self, x, mask):
        x = self.norm1(x + self.attn(x, mask))
        return self.norm2(x + self.ff(x))


class PackedSentenceEncoder(nn.Module):
    def __init__(self, vocab=100, d_model=32, n_heads=4, n_layers=2, max_pos=32):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(max_pos, d_model)
        self.layers = nn.ModuleList(EncoderLayer(d_model, n_heads) for _ in range(n_layers))

    def forward(self, batch: PackedBatch):
        seg = batch.segment_ids
        real = seg > 0
        same_text = seg[:, :, None] == seg[:, None, :]
        attn_mask = same_text & real[:, :, None] & real[:, None, :]
        h = self.tok(batch.input_ids) + self.pos(batch.position_ids)
        for layer in self.layers:
            h = layer(h, attn_mask)
        n_texts = int(seg.max())
        member = F.one_hot(seg, n_texts + 1)[..., 1:].to(h.dtype)
        counts = member.sum(dim=1).clamp(min=1.0)
        pooled = torch.einsum("btn,btd->bnd", member, h) / counts[..., None]
        present = member.sum(dim=1) > 0
        return pooled, present


if __name__ == "__main__":
    torch.manual_seed(0)
    texts = [[12, 7, 33, 2], [41, 5, 6], [9, 18, 27, 36, 45], [3, 4]]
    batch = pack_texts(texts, row_len=8)
    model = PackedSentenceEncoder().eval()
    with torch.no_grad():
        pooled, present = model(batch)
    print("segment_ids", batch.segment_ids.tolist())
    print("embeddings", tuple(pooled.shape), "present", present.tolist())
    print("nan in embeddings", torch.isnan(pooled[present]).any().item())
