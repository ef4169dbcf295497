"""Multilingual content-moderation classifier for chat messages (toxicity, harassment, self-harm).

The encoder picks its attention implementation per deployment: FlashAttention on unpadded tokens
on GPU servers, SDPA on CPU servers, and an eager implementation on CPU workers that also export
attention maps for the reviewers' highlighting tool. Messages are scored in padded batches.

Source: conventions.md §1 (HF attention_mask row, direction cheat-sheet), §5 item 1; seed masked_fill_inplace.txt (作用, 语法)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    from flash_attn.bert_padding import pad_input, unpad_input
    from flash_attn import flash_attn_varlen_func
except ImportError:
    flash_attn_varlen_func = None

LABELS = ("toxicity", "harassment", "self_harm", "spam")


@dataclass
class ModerationConfig:
    vocab: int = 1000
    dim: int = 64
    heads: int = 4
    depth: int = 2
    max_length: int = 128
    attn_implementation: str = "eager"


def tokenize_messages(tokenizer, messages, max_length):
    enc = tokenizer(messages, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    keep = enc["attention_mask"].bool()
    return {"input_ids": enc["input_ids"], "keep": keep}


class EncoderAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.head_dim = cfg.dim // cfg.heads
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.out = nn.Linear(cfg.dim, cfg.dim)

    def forward(self, x, keep):
        b, n, d = x.shape
        impl = self.cfg.attn_implementation
        if impl == "flash_attention_2" and flash_attn_varlen_func is not None:
            x_unpad, indices, cu, max_len, _ = unpad_input(x, keep)
            q, k, v = self.qkv(x_unpad).view(-1, 3, self.cfg.heads, self.head_dim).unbind(1)
            y = flash_attn_varlen_func(q, k, v, cu, cu, max_len, max_len)
            return self.out(pad_input(y.reshape(-1, d), indices, b, n)), None
        q, k, v = self.qkv(x).view(b, n, 3, self.cfg.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        if impl == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])
            return self.out(y.transpose(1, 2).reshape(b, n, d)), None
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(~keep[:, None, None, :], float("-inf"))
        probs = scores.softmax(dim=-1)
        y = (probs @ v).transpose(1, 2).reshape(b, n, d)
        return self.out(y), probs


class EncoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attn = EncoderAttention(cfg)
        self.norm1, self.norm2 = nn.LayerNorm(cfg.dim), nn.LayerNorm(cfg.dim)
        self.ffn = nn.Sequential(nn.Linear(cfg.dim, 4 * cfg.dim), nn.GELU(), nn.Linear(4 * cfg.dim, cfg.dim))

    def forward(self, x, keep):
        h, probs = self.attn(x, keep)
        x = self.norm1(x + h)
        return self.norm2(x + self.ffn(x)), probs


class ModerationModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.dim)
        self.pos = nn.Embedding(cfg.max_length, cfg.dim)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.depth))
        self.classifier = nn.Linear(cfg.dim, len(LABELS))

    def forward(self, input_ids, keep):
        n = input_ids.shape[1]
        x = self.embed(input_ids) + self.pos(torch.arange(n, device=input_ids.device))
        maps = []
        for layer in self.layers:
            x, probs = layer(x, keep)
            maps.append(probs)
        weights = keep.unsqueeze(-1).to(x.dtype)
        pooled = (x * weights).sum(1) / weights.sum(1).clamp_min(1.0)
        return self.classifier(pooled), maps


def set_attention(model, impl):
    model.cfg.attn_implementation = impl
    return model


def train(model, tokenizer, messages, labels, epochs=5, lr=1e-3, batch_size=8):
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    for _ in range(epochs):
        for i in range(0, len(messages), batch_size):
            batch = tokenize_messages(tokenizer, messages[i:i + batch_size], model.cfg.max_length)
            logits, _ = model(batch["input_ids"], batch["keep"])
            loss = F.binary_cross_entropy_with_logits(logits, labels[i:i + batch_size].float())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return loss.item()


@torch.no_grad()
def score(model, tokenizer, messages, with_highlights=False):
    batch = tokenize_messages(tokenizer, messages, model.cfg.max_length)
    logits, maps = model(batch["input_ids"], batch["keep"])
    result = {"scores": dict(zip(LABELS, torch.sigmoid(logits).T))}
    if with_highlights and maps[-1] is not None:
        token_weight = maps[-1].mean(dim=1).sum(dim=1)
        result["highlights"] = token_weight.masked_fill(~batch["keep"], 0.0)
    return result
