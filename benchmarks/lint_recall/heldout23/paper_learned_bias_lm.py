"""Reference implementation: a causal LM whose attention adds a learned pairwise bias per head.

Single-file research code in the usual shape: many small nn.Modules (RMSNorm, SwiGLU,
LearnedBiasAttention, Block, BiasLM), a synthetic copy task, a train() function and argparse at
the bottom. Each head owns a learned (max_len, max_len) bias table; the causal part is applied
to the slice of that table used for the current length.

Source: seed masked_fill_inplace.txt (section 梯度计算风险: masked_fill_ on a tensor with
requires_grad=True breaks the gradient flow or raises; use masked_fill).
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class SwiGLU(nn.Module):
    def __init__(self, dim, mult=4):
        super().__init__()
        self.w12 = nn.Linear(dim, 2 * mult * dim, bias=False)
        self.w3 = nn.Linear(mult * dim, dim, bias=False)

    def forward(self, x):
        a, b = self.w12(x).chunk(2, dim=-1)
        return self.w3(F.silu(a) * b)


class LearnedBiasAttention(nn.Module):
    def __init__(self, dim, heads, max_len):
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.to_qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.to_out = nn.Linear(dim, dim, bias=False)
        self.bias = nn.Parameter(torch.zeros(heads, max_len, max_len))

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.to_qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        bias = self.bias[:, :n, :n]
        future = torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1)
        bias.masked_fill_(future, float("-inf"))  # expect: MC505 parameter
        sim = torch.einsum("b h i d, b h j d -> b h i j", q, k) * self.scale + bias
        out = torch.einsum("b h i j, b h j d -> b h i d", sim.softmax(dim=-1), v)
        return self.to_out(out.transpose(1, 2).reshape(b, n, d))


class Block(nn.Module):
    def __init__(self, dim, heads, max_len):
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(dim), RMSNorm(dim)
        self.attn = LearnedBiasAttention(dim, heads, max_len)
        self.ff = SwiGLU(dim)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.ff(self.norm2(x))


class BiasLM(nn.Module):
    def __init__(self, num_tokens, dim, depth, heads, max_len):
        super().__init__()
        self.token_emb = nn.Embedding(num_tokens, dim)
        self.blocks = nn.ModuleList([Block(dim, heads, max_len) for _ in range(depth)])
        self.norm = RMSNorm(dim)
        self.to_logits = nn.Linear(dim, num_tokens, bias=False)

    def forward(self, x):
        x = self.token_emb(x)
        for block in self.blocks:
            x = block(x)
        return self.to_logits(self.norm(x))


def copy_task_batch(batch_size, half_len, num_tokens):
    """Sequences `a b c ... a b c`: the second half repeats the first."""
    first = torch.randint(1, num_tokens, (batch_size, half_len))
    return torch.cat([first, first], dim=1)


def train(args):
    torch.manual_seed(args.seed)
    model = BiasLM(args.num_tokens, args.dim, args.depth, args.heads, args.max_len)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    for step in range(args.steps):
        seq = copy_task_batch(args.batch_size, args.max_len // 2, args.num_tokens)
        logits = model(seq[:, :-1])
        loss = F.cross_entropy(logits.transpose(1, 2), seq[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 10 == 0 or step == args.steps - 1:
            print(f"step {step:3d}  loss {loss.item():.3f}  (ppl {math.exp(loss.item()):.1f})")
    return model


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Learned pairwise attention bias LM")
    parser.add_argument("--num_tokens", type=int, default=32)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--max_len", type=int, default=16)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    train(parser.parse_args())
