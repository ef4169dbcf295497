"""Held-out 7: a research-repo training script for a character-level GPT (argparse, a model
module, a prefix-LM mask option, a training loop with checkpointing).

Source: the seed article's `triu` look-ahead recipes (here a bool buffer built with the
`.triu()` method, which keeps the diagonal), the seed guide's `create_block_mask`
(`torch.zeros` then fill where == 0; here a prefix-LM mask filled in place with `.eq(0)`),
NVIDIA/apex#1052 (the -1e9 fill value, here coming from an argparse default through the model),
the seed article's gradient warning (an in-place masked_fill_ on a Parameter outside no_grad).
Surroundings: argparse namespace, a value handed through __init__, method chains on factory
calls, in-place masked_fill_ with a method comparison, a training loop.
"""

import argparse
import math
import os
import time

import torch
import torch.nn as nn
from torch.nn import functional as F


def get_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description="train a char-level GPT")
    p.add_argument("--data", default="data/shakespeare.txt")
    p.add_argument("--block-size", type=int, default=256)
    p.add_argument("--n-layer", type=int, default=6)
    p.add_argument("--n-head", type=int, default=6)
    p.add_argument("--n-embd", type=int, default=384)
    p.add_argument("--prefix", type=int, default=0, help="bidirectional prefix length (prefix-LM)")
    p.add_argument("--mask-value", type=float, default=-1e9)
    p.add_argument("--iters", type=int, default=5000)
    p.add_argument("--out", default="out")
    return p.parse_args()


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int, block_size: int, mask_value: float):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head = n_head
        self.mask_value = mask_value
        self.register_buffer("future", torch.ones(block_size, block_size, dtype=torch.bool).triu())  # expect: MC503 method

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.future[:T, :T], self.mask_value)  # expect: MC501 attribute
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


def prefix_lm_bias(T: int, prefix: int) -> torch.Tensor:
    """0 where attention is allowed: the prefix sees itself, the rest is causal."""
    bias = torch.zeros(T, T)
    bias[:prefix, :prefix] = 0.0
    bias.masked_fill_(bias.eq(0), -math.inf)  # expect: MC504 method
    return bias


class GPT(nn.Module):
    def __init__(self, vocab: int, args: argparse.Namespace):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, args.n_embd)
        self.pos_emb = nn.Parameter(torch.zeros(1, args.block_size, args.n_embd))
        self.blocks = nn.ModuleList(
            [CausalSelfAttention(args.n_embd, args.n_head, args.block_size, args.mask_value)
             for _ in range(args.n_layer)])
        self.ln_f = nn.LayerNorm(args.n_embd)
        self.head = nn.Linear(args.n_embd, vocab, bias=False)

    def forward(self, idx: torch.Tensor, targets=None):
        x = self.tok_emb(idx) + self.pos_emb[:, : idx.size(1)]
        for blk in self.blocks:
            x = x + blk(x)
        logits = self.head(self.ln_f(x))
        loss = None if targets is None else F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss


def main() -> None:
    args = get_args()
    text = open(args.data).read()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    model = GPT(len(chars), args)
    unused = torch.tensor([c not in text[: len(text) // 2] for c in chars])
    model.tok_emb.weight.masked_fill_(unused[:, None], 0.0)  # expect: MC505 attribute
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    t0 = time.time()
    for it in range(args.iters):
        ix = torch.randint(len(data) - args.block_size - 1, (16,))
        xb = torch.stack([data[i:i + args.block_size] for i in ix])
        yb = torch.stack([data[i + 1:i + 1 + args.block_size] for i in ix])
        _, loss = model(xb, yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if it % 500 == 0:
            print(f"iter {it}: loss {loss.item():.4f} ({time.time() - t0:.1f}s)")
    os.makedirs(args.out, exist_ok=True)
    torch.save(model.state_dict(), os.path.join(args.out, "ckpt.pt"))


if __name__ == "__main__":
    main()
