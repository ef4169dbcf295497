"""Transformer encoder whose inputs travel as a NamedTuple from the collator to every layer.

`collate` pads the token lists and returns `EncoderInputs(ids, src_mask)`; `src_mask` is the
padding mask, 1/True for a real token and 0/False for padding, laid out to broadcast against
the (batch, heads, query, key) scores so that no query attends to a padded key.
`MultiHeadAttention` fills the scores where `src_mask == 0`.

Source: hyunwoongko/transformer PR #40, bentrevett/pytorch-seq2seq#96, conventions.md §3
item 21 (`(src != pad).unsqueeze(1).unsqueeze(3)`: a (B, 1, L, 1) mask hides query rows
instead of key columns).
"""
from typing import List, NamedTuple

import torch
import torch.nn as nn

PAD_IDX = 0


class EncoderInputs(NamedTuple):
    ids: torch.Tensor       # (B, L) token ids
    src_mask: torch.Tensor  # padding mask, True = real token


def collate(batch: List[List[int]]) -> EncoderInputs:
    width = max(len(s) for s in batch)
    ids = torch.tensor([s + [PAD_IDX] * (width - len(s)) for s in batch])
    src_mask = (ids != PAD_IDX).unsqueeze(1).unsqueeze(3)  # expect: MC514 namedtuple
    return EncoderInputs(ids, src_mask)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)

    def split(self, t):
        b, n, d = t.shape
        return t.view(b, n, self.n_head, d // self.n_head).transpose(1, 2)

    def forward(self, x, inputs: EncoderInputs):
        q, k, v = self.split(self.w_q(x)), self.split(self.w_k(x)), self.split(self.w_v(x))
        scores = q @ k.transpose(2, 3) / (q.shape[-1] ** 0.5)
        scores = scores.masked_fill(inputs.src_mask == 0, torch.finfo(scores.dtype).min)  # also: MC514
        out = scores.softmax(dim=-1) @ v
        return self.w_o(out.transpose(1, 2).reshape(x.shape))


class EncoderLayer(nn.Module):
    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.attn = MultiHeadAttention(d_model, n_head)
        self.norm1 = nn.LayerNorm(d_model)
        self.ffn = nn.Sequential(nn.Linear(d_model, 64), nn.ReLU(), nn.Linear(64, d_model))
        self.norm2 = nn.LayerNorm(d_model)

    def forward(self, x, inputs: EncoderInputs):
        x = self.norm1(x + self.attn(x, inputs))
        return self.norm2(x + self.ffn(x))


class Encoder(nn.Module):
    def __init__(self, vocab: int = 100, d_model: int = 32, n_head: int = 4, n_layers: int = 2):
        super().__init__()
        self.emb = nn.Embedding(vocab, d_model, padding_idx=PAD_IDX)
        self.layers = nn.ModuleList(EncoderLayer(d_model, n_head) for _ in range(n_layers))

    def forward(self, inputs: EncoderInputs):
        x = self.emb(inputs.ids)
        for layer in self.layers:
            x = layer(x, inputs)
        return x


if __name__ == "__main__":
    torch.manual_seed(0)
    enc = Encoder().eval()
    short, long = [11, 12, 13], [21, 22, 23, 24, 25, 26]
    with torch.no_grad():
        batched = enc(collate([short, long]))[0, :3]
        alone = enc(collate([short]))[0]
    print("short sentence, batched vs alone:", (batched - alone).abs().max().item())
