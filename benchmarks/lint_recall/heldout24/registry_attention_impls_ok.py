"""Encoder whose attention implementation is picked by name from a registry.

Implementations register themselves with `@register_attention("<name>")`; the model looks
them up as `ATTENTION_REGISTRY[config.attn_implementation]`. Every implementation receives
the same `keep` mask: bool (B, 1, 1, S), True = real token that may be attended to,
False = padding. "eager" is the reference; "sdpa" should give the same numbers.

Source: pytorch/pytorch#103963, huggingface/transformers#32195 and #46458, conventions.md
§2.9 (a 0/1 keep-mask given as a float attn_mask is added to the scores and masks nothing).
"""
from dataclasses import dataclass
from typing import Callable, Dict

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD_ID = 0
ATTENTION_REGISTRY: Dict[str, Callable[..., torch.Tensor]] = {}


def register_attention(name: str):
    def wrap(fn):
        ATTENTION_REGISTRY[name] = fn
        return fn
    return wrap


@register_attention("eager")
def eager_attention(q, k, v, keep):
    scores = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5
    scores = scores.masked_fill(~keep, float("-inf"))
    return scores.softmax(dim=-1) @ v


@register_attention("sdpa")
def sdpa_attention(q, k, v, keep):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)


@dataclass
class EncoderConfig:
    vocab_size: int = 64
    dim: int = 32
    heads: int = 4
    layers: int = 2
    attn_implementation: str = "sdpa"


class EncoderLayer(nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.out = nn.Linear(cfg.dim, cfg.dim)
        self.norm = nn.LayerNorm(cfg.dim)
        self.attn_fn = ATTENTION_REGISTRY[cfg.attn_implementation]

    def forward(self, x, keep):
        b, n, d = x.shape
        qkv = self.qkv(self.norm(x)).view(b, n, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        y = self.attn_fn(q, k, v, keep)
        return x + self.out(y.transpose(1, 2).reshape(b, n, d))


class Encoder(nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim, padding_idx=PAD_ID)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.layers))

    def set_attn_implementation(self, name: str):
        for layer in self.layers:
            layer.attn_fn = ATTENTION_REGISTRY[name]

    def forward(self, input_ids):
        keep = (input_ids != PAD_ID)[:, None, None, :]
        x = self.embed(input_ids)
        for layer in self.layers:
            x = layer(x, keep)
        return x


if __name__ == "__main__":
    torch.manual_seed(0)
    model = Encoder(EncoderConfig()).eval()
    ids = torch.tensor([[5, 9, 12, 0, 0, 0], [7, 3, 8, 4, 2, 6]])
    real = ids != PAD_ID
    with torch.no_grad():
        outs = {}
        for name in ("eager", "sdpa"):
            model.set_attn_implementation(name)
            outs[name] = model(ids)
    diff = (outs["eager"] - outs["sdpa"])[real].abs().max().item()
    print(f"eager vs sdpa on real tokens: {diff:.2e}")
