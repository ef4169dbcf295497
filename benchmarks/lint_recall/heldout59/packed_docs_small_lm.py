"""Small-LM pretraining on packed token streams with document masking (modded-nanoGPT-style).

Documents are concatenated into fixed-length rows, each starting with the end-of-text token.
Attention is restricted to the current document: FlexAttention with a document-causal block
mask, FlashAttention varlen with cu_seqlens from the document boundaries, or SDPA with a dense
mask. The backend check runs SDPA under the MATH kernel as the reference.

Source: conventions.md §1 (SDPA is_causal row), §2.7, §5 item 8; pytorch/pytorch PR #111007
"""
from __future__ import annotations

import argparse
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

try:
    from flash_attn import flash_attn_varlen_func
except ImportError:
    flash_attn_varlen_func = None

EOT = 0


def document_ids(tokens):
    return (tokens == EOT).cumsum(-1)


def cu_seqlens_from(tokens):
    starts = (tokens.flatten() == EOT).nonzero().flatten()
    row_starts = torch.arange(0, tokens.numel(), tokens.shape[1], device=tokens.device)
    starts = torch.unique(torch.cat([starts, row_starts]))
    end = torch.tensor([tokens.numel()], device=tokens.device)
    return torch.cat([starts, end]).to(torch.int32)


def document_block_mask(docs):
    b, t = docs.shape

    def document_causal(bi, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (docs[bi, q_idx] == docs[bi, kv_idx])

    return create_block_mask(document_causal, b, None, t, t, device=docs.device)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim, bias=False)
        self.proj = nn.Linear(cfg.dim, cfg.dim, bias=False)

    def forward(self, x, attn_inputs):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.cfg.heads, d // self.cfg.heads).unbind(2)
        q, k = F.rms_norm(q, (q.shape[-1],)), F.rms_norm(k, (k.shape[-1],))
        backend = attn_inputs["backend"]
        if backend == "varlen" and flash_attn_varlen_func is not None:
            cu, max_len = attn_inputs["cu_seqlens"], attn_inputs["max_seqlen"]
            y = flash_attn_varlen_func(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), cu, cu, max_len, max_len, causal=True)
            return self.proj(y.view(b, t, d))
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        if backend == "flex":
            y = flex_attention(q, k, v, block_mask=attn_inputs["block_mask"])
        else:
            same_doc = attn_inputs["docs"][:, :, None] == attn_inputs["docs"][:, None, :]
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=same_doc[:, None], is_causal=True)  # expect: MC506 dispatch
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attn = CausalSelfAttention(cfg)
        self.mlp = nn.Sequential(nn.Linear(cfg.dim, 4 * cfg.dim, bias=False), nn.ReLU(), nn.Linear(4 * cfg.dim, cfg.dim, bias=False))

    def forward(self, x, attn_inputs):
        x = x + self.attn(F.rms_norm(x, (x.shape[-1],)), attn_inputs)
        return x + self.mlp(F.rms_norm(x, (x.shape[-1],)))


class SmallLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.dim)
        self.pos = nn.Embedding(cfg.seq_len, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.depth))
        self.head = nn.Linear(cfg.dim, cfg.vocab, bias=False)

    def attention_inputs(self, tokens, backend):
        docs = document_ids(tokens)
        inputs = {"backend": backend, "docs": docs}
        if backend == "flex":
            inputs["block_mask"] = document_block_mask(docs)
        elif backend == "varlen":
            cu = cu_seqlens_from(tokens)
            inputs.update(cu_seqlens=cu, max_seqlen=int((cu[1:] - cu[:-1]).max()))
        return inputs

    def forward(self, tokens, backend="sdpa"):
        attn_inputs = self.attention_inputs(tokens, backend)
        x = self.embed(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            x = block(x, attn_inputs)
        return self.head(F.rms_norm(x, (x.shape[-1],)))


def pack_documents(docs, seq_len, rows):
    stream = torch.cat([torch.cat([torch.tensor([EOT]), d]) for d in docs])
    stream = stream[: rows * (seq_len + 1)].view(rows, seq_len + 1)
    return stream[:, :-1], stream[:, 1:]


def random_documents(n, vocab, min_len=4, max_len=40):
    lengths = torch.randint(min_len, max_len, (n,))
    return [torch.randint(1, vocab, (int(length),)) for length in lengths]


@torch.no_grad()
def check_backends(model, tokens):
    with sdpa_kernel(SDPBackend.MATH):
        reference = model(tokens, backend="sdpa")
    flex = model(tokens, backend="flex")
    return (reference - flex).abs().max().item()


def train(args):
    cfg = SimpleNamespace(vocab=args.vocab, dim=args.dim, heads=args.heads, depth=args.depth, seq_len=args.seq_len)
    model = SmallLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95))
    for step in range(args.steps):
        inputs, targets = pack_documents(random_documents(64, cfg.vocab), cfg.seq_len, args.batch)
        loss = F.cross_entropy(model(inputs, backend=args.backend).flatten(0, 1), targets.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % args.check_every == 0:
            print(f"step {step} loss {loss.item():.3f} backend diff {check_backends(model, inputs):.2e}")
    return model


def parse_args(argv=None):
    p = argparse.ArgumentParser()
    for name, default in [("vocab", 256), ("dim", 64), ("heads", 4), ("depth", 2), ("seq_len", 128), ("batch", 4), ("steps", 20), ("check_every", 10)]:
        p.add_argument(f"--{name}", type=int, default=default)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--backend", choices=["sdpa", "flex", "varlen"], default="sdpa")
    return p.parse_args(argv)
