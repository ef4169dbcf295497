"""Protein masked language model (ESM-2 style) with rotary embeddings and an attention contact head.

Batches of sequences are padded to the longest one. On the GPU the padded batch is unpadded and
attention runs FlashAttention varlen over the real residues (cu_seqlens from the lengths); the
reference path, used on CPU, in the tests and whenever attention maps are needed for contact
prediction, works on the padded batch.

Source: pytorch/pytorch#103749 (conventions.md §3 item 5), Biohub/esm#299 (item 22)
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    from flash_attn import flash_attn_varlen_func
except ImportError:
    flash_attn_varlen_func = None

AMINO = "ACDEFGHIKLMNPQRSTVWY"
PAD, CLS, EOS, MASK = 0, 1, 2, 3
TOKENS = {a: i + 4 for i, a in enumerate(AMINO)}


def batch_sequences(seqs):
    ids = [[CLS] + [TOKENS[a] for a in s] + [EOS] for s in seqs]
    width = max(map(len, ids))
    tokens = torch.full((len(ids), width), PAD, dtype=torch.long)
    for i, row in enumerate(ids):
        tokens[i, : len(row)] = torch.tensor(row)
    return {"tokens": tokens, "residue_keep": tokens != PAD}


def rotary(x, positions):
    half = x.shape[-1] // 2
    freqs = 1.0 / 10000 ** (torch.arange(half, device=x.device) / half)
    angles = positions[..., None].float() * freqs
    cos, sin = angles.cos()[:, :, None], angles.sin()[:, :, None]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def unpad(x, keep):
    indices = keep.flatten().nonzero().flatten()
    lengths = keep.sum(-1, dtype=torch.int32)
    cu_seqlens = F.pad(lengths.cumsum(0, dtype=torch.int32), (1, 0))
    return x.flatten(0, 1)[indices], indices, cu_seqlens, int(lengths.max())


class SelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x, keep, pair, need_weights=False):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, self.head_dim).unbind(2)
        positions = torch.arange(n, device=x.device).expand(b, n)
        q, k = rotary(q, positions), rotary(k, positions)
        if flash_attn_varlen_func is not None and x.is_cuda and not need_weights:
            qkv, indices, cu, max_len = unpad(torch.stack([q, k, v], dim=2), keep)
            y = flash_attn_varlen_func(*qkv.half().unbind(1), cu, cu, max_len, max_len)
            out = torch.zeros(b * n, d, device=x.device, dtype=x.dtype)
            out[indices] = y.reshape(-1, d).to(x.dtype)
            return self.out(out.view(b, n, d)), None
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(~keep[:, None, None, :], float("-inf"))
        probs = scores.softmax(dim=-1)
        y = (probs @ v).transpose(1, 2).reshape(b, n, d)
        return self.out(y), probs


class Layer(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads)
        self.ffn = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, keep, pair, need_weights=False):
        h, probs = self.attn(self.norm1(x), keep, pair, need_weights)
        x = x + h
        return x + self.ffn(self.norm2(x)), probs


class ContactHead(nn.Module):
    def __init__(self, n_maps):
        super().__init__()
        self.regression = nn.Linear(n_maps, 1)

    def forward(self, maps, pair):
        maps = maps * pair[:, None]
        maps = maps + maps.transpose(-1, -2)
        apc = maps.sum(-1, keepdim=True) * maps.sum(-2, keepdim=True) / maps.sum((-1, -2), keepdim=True).clamp_min(1e-6)
        maps = (maps - apc).permute(0, 2, 3, 1)
        return torch.sigmoid(self.regression(maps).squeeze(-1))[:, 1:-1, 1:-1]


class ProteinMLM(nn.Module):
    def __init__(self, vocab=len(TOKENS) + 4, dim=64, heads=4, depth=3):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, padding_idx=PAD)
        self.layers = nn.ModuleList(Layer(dim, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab)
        self.contact_head = ContactHead(depth * heads)

    def forward(self, tokens, residue_keep, need_contacts=False):
        pair = residue_keep[:, :, None] & residue_keep[:, None, :]
        x = self.embed(tokens)
        maps = []
        for layer in self.layers:
            x, probs = layer(x, residue_keep, pair, need_weights=need_contacts)
            maps.append(probs)
        out = {"logits": self.lm_head(self.norm(x))}
        if need_contacts:
            out["contacts"] = self.contact_head(torch.cat(maps, dim=1), pair)
        return out


def mask_tokens(tokens, keep, rate=0.15):
    chosen = (torch.rand(tokens.shape) < rate) & keep & (tokens > MASK)
    inputs = tokens.masked_fill(chosen, MASK)
    labels = tokens.masked_fill(~chosen, -100)
    return inputs, labels


def train_step(model, opt, seqs):
    batch = batch_sequences(seqs)
    inputs, labels = mask_tokens(batch["tokens"], batch["residue_keep"])
    logits = model(inputs, batch["residue_keep"])["logits"]
    loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()
