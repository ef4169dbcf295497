"""Mixture-of-experts decoder LM with Megatron-style tensor-parallel attention.

Heads are split across tensor-parallel ranks (column-parallel QKV, row-parallel output) and the
experts across expert-parallel ranks; the fused scale-mask-softmax kernel is used when apex is
present and a PyTorch path otherwise. Trains with --fp16 and a dynamic loss scale.

Source: NVIDIA/apex#1052, NVIDIA/apex#1105, facebookresearch/fairseq#3575 (conventions.md §3 item 18), §2.3
"""
from __future__ import annotations

import argparse
import math

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

def tp_rank_world():
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def reduce_from_tp_region(x):
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(x)
    return x


def get_ltor_masks(tokens, eod_token):
    b, s = tokens.shape
    causal = torch.tril(torch.ones(s, s, dtype=torch.bool, device=tokens.device))
    doc_id = torch.cumsum((tokens == eod_token).long(), dim=1)
    doc_id = torch.cat([doc_id.new_zeros(b, 1), doc_id[:, :-1]], dim=1)
    same_doc = doc_id[:, :, None] == doc_id[:, None, :]
    attention_mask = ~(causal[None] & same_doc)
    return attention_mask[:, None]


def attention_mask_func(attention_scores, attention_mask):
    return attention_scores.masked_fill(attention_mask, -1e9)  # expect: MC501 function


class ScaleMaskSoftmax(nn.Module):
    def __init__(self, scale, softmax_in_fp32=True):
        super().__init__()
        self.scale = scale
        self.softmax_in_fp32 = softmax_in_fp32

    def forward(self, scores, mask):
        input_dtype = scores.dtype
        scores = attention_mask_func(scores * self.scale, mask)
        if self.softmax_in_fp32:
            scores = scores.float()
        probs = torch.softmax(scores, dim=-1)
        return probs.to(input_dtype)


class ParallelSelfAttention(nn.Module):
    def __init__(self, hidden, num_heads):
        super().__init__()
        _, tp = tp_rank_world()
        self.local_heads = num_heads // tp
        self.head_dim = hidden // num_heads
        self.query_key_value = nn.Linear(hidden, 3 * self.local_heads * self.head_dim)
        self.dense = nn.Linear(self.local_heads * self.head_dim, hidden, bias=False)
        self.softmax = ScaleMaskSoftmax(1.0 / math.sqrt(self.head_dim))

    def forward(self, hidden_states, attention_mask):
        b, s, _ = hidden_states.shape
        qkv = self.query_key_value(hidden_states).view(b, s, self.local_heads, 3 * self.head_dim)
        q, k, v = qkv.permute(0, 2, 1, 3).chunk(3, dim=-1)
        probs = self.softmax(q @ k.transpose(-1, -2), attention_mask)
        context = (probs @ v).transpose(1, 2).reshape(b, s, -1)
        return reduce_from_tp_region(self.dense(context))


class SwitchMLP(nn.Module):
    def __init__(self, hidden, num_experts):
        super().__init__()
        self.router = nn.Linear(hidden, num_experts, bias=False)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))
            for _ in range(num_experts)
        )

    def forward(self, x):
        flat = x.reshape(-1, x.shape[-1])
        gate = torch.softmax(self.router(flat).float(), dim=-1)
        weight, expert = gate.max(dim=-1)
        out = torch.zeros_like(flat)
        for e, mlp in enumerate(self.experts):
            rows = (expert == e).nonzero(as_tuple=True)[0]
            if rows.numel():
                out[rows] = mlp(flat[rows]) * weight[rows, None].to(flat.dtype)
        aux = gate.mean(0).pow(2).sum() * len(self.experts)
        return out.view_as(x), aux


class MoEBlock(nn.Module):
    def __init__(self, hidden, num_heads, num_experts):
        super().__init__()
        self.ln1 = nn.LayerNorm(hidden)
        self.attn = ParallelSelfAttention(hidden, num_heads)
        self.ln2 = nn.LayerNorm(hidden)
        self.moe = SwitchMLP(hidden, num_experts)

    def forward(self, x, attention_mask):
        x = x + self.attn(self.ln1(x), attention_mask)
        y, aux = self.moe(self.ln2(x))
        return x + y, aux


class MoEGPT(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.embed = nn.Embedding(args.vocab, args.hidden)
        self.pos = nn.Embedding(args.seq_len, args.hidden)
        self.blocks = nn.ModuleList(MoEBlock(args.hidden, args.heads, args.experts) for _ in range(args.layers))
        self.ln_f = nn.LayerNorm(args.hidden)
        self.eod = args.eod

    def forward(self, tokens):
        attention_mask = get_ltor_masks(tokens, self.eod)
        x = self.embed(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        aux_total = 0.0
        for block in self.blocks:
            x, aux = block(x, attention_mask)
            aux_total = aux_total + aux
        return self.ln_f(x) @ self.embed.weight.t(), aux_total


def train(args):
    torch.manual_seed(args.seed)
    model = MoEGPT(args)
    if args.fp16:
        model = model.half()
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    loss_scale = 2.0 ** 8
    for step in range(args.steps):
        tokens = torch.randint(1, args.vocab, (args.batch, args.seq_len + 1))
        tokens[:, args.seq_len // 2] = args.eod
        logits, aux = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, args.vocab), tokens[:, 1:].reshape(-1))
        opt.zero_grad()
        ((loss + 0.01 * aux) * loss_scale).backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        if any(not torch.isfinite(g).all() for g in grads):
            loss_scale /= 2
            continue
        for g in grads:
            g.div_(loss_scale)
        opt.step()
    return loss.item()


def get_args(argv=None):
    p = argparse.ArgumentParser()
    for name, default in [("vocab", 64), ("hidden", 32), ("heads", 4), ("experts", 4), ("layers", 2),
                          ("seq-len", 16), ("batch", 4), ("eod", 0), ("steps", 5), ("seed", 0)]:
        p.add_argument(f"--{name}", type=int, default=default)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--fp16", action="store_true")
    return p.parse_args(argv)


if __name__ == "__main__":
    print("loss", train(get_args()))
