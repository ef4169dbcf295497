"""Pairwise reward model for RLHF, trained with FSDP and bfloat16 mixed precision.

A decoder LM with a scalar head scores chosen and rejected responses (Bradley-Terry loss). With
torch.distributed initialised the model is wrapped in FSDP with a bfloat16 MixedPrecision policy;
in one process it trains under CPU autocast. Evaluation can pin SDPA to the MATH backend so
that reward scores are reproducible across machines.

Source: conventions.md §1 (SDPA is_causal row), §2.7, §5 item 8; pytorch/pytorch PR #111007
"""
from __future__ import annotations

import argparse
from contextlib import nullcontext

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

PAD = 0


def maybe_wrap_fsdp(model):
    if not (dist.is_available() and dist.is_initialized()):
        return model, True
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision
    policy = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, buffer_dtype=torch.bfloat16)
    return FSDP(model, mixed_precision=policy, use_orig_params=True), False


class CausalSelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, pad_keep):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=pad_keep, is_causal=True)  # expect: MC506 keyword
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, pad_keep):
        x = x + self.attn(self.ln1(x), pad_keep)
        return x + self.mlp(self.ln2(x))


class RewardModel(nn.Module):
    def __init__(self, vocab, dim=32, heads=4, depth=2, max_len=64):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_len, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.ln_f = nn.LayerNorm(dim)
        self.value_head = nn.Linear(dim, 1)

    def forward(self, input_ids, attention_mask):
        pad_keep = attention_mask.bool()[:, None, None, :]
        x = self.tok(input_ids) + self.pos(torch.arange(input_ids.shape[1], device=input_ids.device))
        for block in self.blocks:
            x = block(x, pad_keep)
        last = attention_mask.sum(dim=1) - 1
        h = self.ln_f(x)[torch.arange(x.shape[0], device=x.device), last]
        return self.value_head(h).squeeze(-1)


def pad_batch(seqs):
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), PAD, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
    return {"input_ids": ids, "attention_mask": (ids != PAD).long()}


def preference_pairs(n, vocab, seed=0):
    g = torch.Generator().manual_seed(seed)
    pairs = []
    for _ in range(n):
        prompt = torch.randint(3, vocab, (int(torch.randint(3, 8, (1,), generator=g)),), generator=g).tolist()
        good = [1] * int(torch.randint(2, 5, (1,), generator=g)) + torch.randint(3, vocab, (3,), generator=g).tolist()
        bad = [2] * int(torch.randint(2, 5, (1,), generator=g)) + torch.randint(3, vocab, (5,), generator=g).tolist()
        pairs.append((prompt + good, prompt + bad))
    return pairs


def pairwise_loss(model, pairs, autocast):
    chosen = pad_batch([c for c, _ in pairs])
    rejected = pad_batch([r for _, r in pairs])
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else nullcontext()
    with ctx:
        r_c = model(chosen["input_ids"], chosen["attention_mask"]).float()
        r_r = model(rejected["input_ids"], rejected["attention_mask"]).float()
    return -F.logsigmoid(r_c - r_r).mean(), (r_c > r_r).float().mean()


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--vocab", type=int, default=40)
    p.add_argument("--deterministic-eval", action="store_true")
    args = p.parse_args(argv)
    torch.manual_seed(0)
    model, autocast = maybe_wrap_fsdp(RewardModel(args.vocab))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    train_pairs, eval_pairs = preference_pairs(512, args.vocab), preference_pairs(128, args.vocab, seed=1)
    for step in range(args.steps):
        loss, _ = pairwise_loss(model, train_pairs[(step * 16) % 512:][:16], autocast)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    kernel = sdpa_kernel(SDPBackend.MATH) if args.deterministic_eval else nullcontext()
    with torch.no_grad(), kernel:
        _, acc = pairwise_loss(model, eval_pairs, autocast)
    return loss.item(), acc.item()


if __name__ == "__main__":
    print("train loss %.3f  eval pairwise accuracy %.3f" % main())
