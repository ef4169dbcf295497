"""Repro: a right-padded batch through a one-block causal LM on SDPA.

Script attached to an issue ("padded batch vs. single sequence, and the MATH backend").
It builds a tiny causal block on F.scaled_dot_product_attention, runs a right-padded batch
under the default kernel and under SDPBackend.MATH, and compares each sequence's real
positions with the same sequence run alone.

    python repro_sdpa_padding_causal.py

Source: conventions.md §2.7 and §5 item 8, pytorch/pytorch#131254
"""
import sys
from contextlib import nullcontext

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

PAD = 0
VOCAB, D, H = 50, 32, 4


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D, padding_idx=PAD)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.head = nn.Linear(D, VOCAB)

    def forward(self, ids):
        b, t = ids.shape
        x = self.emb(ids)
        q, k, v = self.qkv(x).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        keep = (ids != PAD)[:, None, None, :]
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, is_causal=True)  # expect: MC506 repro
        y = y.transpose(1, 2).reshape(b, t, D)
        return self.head(x + self.proj(y))


def run(model, batch, lengths, backend=None):
    ctx = sdpa_kernel(backend) if backend is not None else nullcontext()
    with ctx, torch.no_grad():
        logits = model(batch)
        diffs = []
        for i, n in enumerate(lengths):
            alone = model(batch[i : i + 1, :n])
            diffs.append((logits[i, :n] - alone[0]).abs().max().item())
    return diffs


def main():
    torch.manual_seed(0)
    print("torch", torch.__version__, "python", sys.version.split()[0])
    model = Block().eval()
    lengths = [3, 5, 2]
    batch = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    for i, n in enumerate(lengths):
        batch[i, :n] = torch.randint(1, VOCAB, (n,))
    print("default kernel, max |padded - alone| per sequence:", run(model, batch, lengths))
    try:
        print("MATH kernel:", run(model, batch, lengths, SDPBackend.MATH))
    except RuntimeError as e:
        print("MATH kernel raised:", e)


if __name__ == "__main__":
    main()
