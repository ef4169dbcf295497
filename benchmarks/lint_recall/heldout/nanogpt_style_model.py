"""Held-out: a nanoGPT-style model file with three mask bugs deep inside its classes.

Source: karpathy/nanoGPT model.py's CausalSelfAttention (registered `bias` buffer = tril keep mask,
`masked_fill(self.bias[...] == 0, float('-inf'))`, fp16 autocast training), with the bugs of
NVIDIA/apex#1052 (-1e9 under fp16), georg-wolflein/good-features PR #1 (mask multiplied into the
logits) and pytorch/pytorch#144858 (is_causal with a KV cache).
"""

import inspect
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F


@dataclass
class GPTConfig:
    block_size: int = 64
    vocab_size: int = 128
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 32
    dropout: float = 0.0
    bias: bool = True


class LayerNorm(nn.Module):
    def __init__(self, ndim: int, bias: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.flash = hasattr(torch.nn.functional, "scaled_dot_product_attention")
        self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size))
                             .view(1, 1, config.block_size, config.block_size))

    def _split(self, x: torch.Tensor):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        return [t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self._split(x)
        if self.flash:
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=None, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, -1e9)  # expect: MC501 deep-method
            att = F.softmax(att, dim=-1)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)

    def forward_lowmem(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self._split(x)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att * self.bias[:, :, :T, :T]  # expect: MC520 buffer
        att = F.softmax(att, dim=-1)
        return self.c_proj((att @ v).transpose(1, 2).contiguous().view(B, T, C))

    def forward_cached(self, x: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor] | None):
        B, T, C = x.size()
        q, k, v = self._split(x)
        if past is not None:
            k = torch.cat((past[0], k), dim=-2)
            v = torch.cat((past[1], v), dim=-2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # expect: MC510 cache
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C)), (k, v)


class MLP(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x)))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.mlp = MLP(config)
        self.ln_f = LayerNorm(config.n_embd, bias=config.bias)

    def configure_optimizers(self, lr: float) -> torch.optim.Optimizer:
        fused = "fused" in inspect.signature(torch.optim.AdamW).parameters
        return torch.optim.AdamW(self.parameters(), lr=lr, fused=fused and False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type="cuda", dtype=torch.float16):
            x = self.wte(idx)
            x = x + self.attn(x)
            x = x + self.mlp(x)
            return self.ln_f(x)
