"""Pick the attention implementation once, as a callable, with functools.partial and lambdas.

`build_attention(impl, ids)` returns `fn(q, k, v)` with the batch's padding already bound:
"sdpa" binds the mask into F.scaled_dot_product_attention, "eager" closes over it in a
lambda around a hand-written softmax attention. The encoder only ever calls `fn(q, k, v)`.
The demo checks that the two implementations agree on a padded batch.

Source: pytorch/pytorch#103963, huggingface/transformers#32195 and #46458, conventions.md §2.9
"""
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD_ID = 0


def eager_attention(q, k, v, keep, scale=None):
    scale = q.size(-1) ** -0.5 if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale
    scores = torch.where(keep[:, None, None, :], scores, float("-inf"))
    return scores.softmax(dim=-1) @ v


def build_attention(impl, ids, dropout_p=0.0):
    keep = ids != PAD_ID
    if impl == "sdpa":
        return partial(F.scaled_dot_product_attention, attn_mask=keep[:, None, None, :], dropout_p=dropout_p)
    if impl == "eager":
        return lambda q, k, v: eager_attention(q, k, v, keep)
    raise ValueError(f"unknown attention implementation {impl!r}")


class Encoder(nn.Module):
    def __init__(self, vocab=30, dim=32, heads=4, layers=2):
        super().__init__()
        self.heads = heads
        self.emb = nn.Embedding(vocab, dim, padding_idx=PAD_ID)
        self.qkv = nn.ModuleList(nn.Linear(dim, 3 * dim) for _ in range(layers))
        self.out = nn.ModuleList(nn.Linear(dim, dim) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)

    def forward(self, ids, impl="sdpa"):
        attn_fn = build_attention(impl, ids)
        split = lambda t: t.view(t.size(0), t.size(1), self.heads, -1).transpose(1, 2)
        x = self.emb(ids)
        for qkv, out in zip(self.qkv, self.out):
            q, k, v = map(split, qkv(self.norm(x)).chunk(3, dim=-1))
            y = attn_fn(q, k, v).transpose(1, 2).flatten(2)
            x = x + out(y)
        return x


if __name__ == "__main__":
    torch.manual_seed(0)
    enc = Encoder().eval()
    ids = torch.tensor([[7, 3, 12, 5, 9], [4, 11, 0, 0, 0]])
    with torch.no_grad():
        a, b = enc(ids, "sdpa"), enc(ids, "eager")
        alone = enc(ids[1:, :2], "sdpa")
    real = ids != PAD_ID
    print("sdpa vs eager on real tokens:", (a - b)[real].abs().max().item())
    print("padded vs alone (sdpa):", (a[1, :2] - alone[0]).abs().max().item())
