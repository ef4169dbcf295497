"""Held-out 16 (correct twin): a torchtune-style decoder: `KVCache` buffers filled by `update`, a
`MultiHeadAttention` with grouped-query heads, rotary embeddings taking `input_pos`, and an
attention call chosen once in `__init__` by a module-level factory (`_sdpa_or_flex_attention`, as
in torchtune.modules.attention_utils, kept at the bottom of this file). `generate` prefills the
prompt with a causal mask, then decodes one token per step from the cache without a mask.

Source: pytorch/pytorch#144858 ("when is_causal is set and a single query vector is put in, the
function only compares against the earliest k and v"), pytorch/pytorch#110144 and #103082
(`is_causal` is aligned top-left when L != S). torchtune passes
`is_causal=self.kv_cache is None and mask is None and self.is_causal`; here the cache condition is
missing, so a decoding step with the cache gets `is_causal=True` and sees only the first key.
Twin: `is_causal=self.kv_cache is None and mask is None and self.is_causal`, as in torchtune (a cached step attends to every key it holds).
"""

from typing import Callable, Optional

import torch
from torch import nn


class KVCache(nn.Module):
    def __init__(self, batch_size: int, max_seq_len: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype):
        super().__init__()
        cache_shape = (batch_size, num_kv_heads, max_seq_len, head_dim)
        self.register_buffer("k_cache", torch.zeros(cache_shape, dtype=dtype), persistent=False)
        self.register_buffer("v_cache", torch.zeros(cache_shape, dtype=dtype), persistent=False)
        self.size = 0

    def update(self, k_val: torch.Tensor, v_val: torch.Tensor):
        seq_len = k_val.shape[2]
        self.k_cache[:, :, self.size : self.size + seq_len] = k_val
        self.v_cache[:, :, self.size : self.size + seq_len] = v_val
        self.size += seq_len
        return self.k_cache[:, :, : self.size], self.v_cache[:, :, : self.size]


class RotaryPositionalEmbeddings(nn.Module):
    def __init__(self, dim: int, max_seq_len: int = 256, base: int = 10_000):
        super().__init__()
        theta = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
        idx_theta = torch.outer(torch.arange(max_seq_len).float(), theta)
        self.register_buffer("cache", torch.stack([idx_theta.cos(), idx_theta.sin()], dim=-1), persistent=False)

    def forward(self, x: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        rope = self.cache[input_pos].unsqueeze(1)  # (b, 1, s, h_d // 2, 2)
        xs = x.float().reshape(*x.shape[:-1], -1, 2)
        out = torch.stack([xs[..., 0] * rope[..., 0] - xs[..., 1] * rope[..., 1],
                           xs[..., 1] * rope[..., 0] + xs[..., 0] * rope[..., 1]], dim=-1)
        return out.flatten(-2).type_as(x)


class MultiHeadAttention(nn.Module):
    def __init__(self, embed_dim: int, num_heads: int, num_kv_heads: int, max_seq_len: int = 256,
                 is_causal: bool = True, attn_dropout: float = 0.0):
        super().__init__()
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads
        self.head_dim = embed_dim // num_heads
        self.q_proj = nn.Linear(embed_dim, num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(embed_dim, num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(embed_dim, num_kv_heads * self.head_dim, bias=False)
        self.output_proj = nn.Linear(embed_dim, embed_dim, bias=False)
        self.pos_embeddings = RotaryPositionalEmbeddings(self.head_dim, max_seq_len)
        self.is_causal, self.attn_dropout, self.max_seq_len = is_causal, attn_dropout, max_seq_len
        self.kv_cache: Optional[KVCache] = None
        self._attention_call = _sdpa_or_flex_attention()

    def setup_cache(self, batch_size: int, dtype: torch.dtype) -> None:
        self.kv_cache = KVCache(batch_size, self.max_seq_len, self.num_kv_heads, self.head_dim, dtype)

    def forward(self, x: torch.Tensor, *, mask: Optional[torch.Tensor] = None,
                input_pos: Optional[torch.Tensor] = None) -> torch.Tensor:
        b, s_x, _ = x.shape
        if input_pos is None:
            input_pos = torch.arange(s_x, device=x.device).expand(b, s_x)
        q = self.q_proj(x).view(b, s_x, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s_x, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s_x, self.num_kv_heads, self.head_dim).transpose(1, 2)
        q, k = self.pos_embeddings(q, input_pos), self.pos_embeddings(k, input_pos)
        if self.kv_cache is not None:
            k, v = self.kv_cache.update(k, v)
        if self.num_heads != self.num_kv_heads:
            k = k.repeat_interleave(self.num_heads // self.num_kv_heads, dim=1)
            v = v.repeat_interleave(self.num_heads // self.num_kv_heads, dim=1)
        dropout_p = self.attn_dropout if self.training else 0.0
        output = self._attention_call(q, k, v, mask=mask, dropout_p=dropout_p, is_causal=self.kv_cache is None and mask is None and self.is_causal)
        return self.output_proj(output.transpose(1, 2).reshape(b, s_x, -1))


class TransformerDecoder(nn.Module):
    def __init__(self, vocab_size: int = 64, embed_dim: int = 64, num_layers: int = 2, num_heads: int = 4,
                 num_kv_heads: int = 2):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab_size, embed_dim)
        self.layers = nn.ModuleList([MultiHeadAttention(embed_dim, num_heads, num_kv_heads) for _ in range(num_layers)])
        self.mlps = nn.ModuleList([nn.Sequential(nn.Linear(embed_dim, 128), nn.SiLU(), nn.Linear(128, embed_dim)) for _ in range(num_layers)])
        self.norm = nn.RMSNorm(embed_dim)
        self.output = nn.Linear(embed_dim, vocab_size, bias=False)

    def setup_caches(self, batch_size: int, dtype: torch.dtype) -> None:
        for layer in self.layers:
            layer.setup_cache(batch_size, dtype)

    def forward(self, tokens: torch.Tensor, *, mask=None, input_pos=None) -> torch.Tensor:
        h = self.tok_embeddings(tokens)
        for attn, mlp in zip(self.layers, self.mlps):
            h = h + attn(h, mask=mask, input_pos=input_pos)
            h = h + mlp(h)
        return self.output(self.norm(h)).float()


@torch.no_grad()
def generate(model: TransformerDecoder, prompt: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
    b, n = prompt.shape
    model.setup_caches(b, torch.float32)
    causal_mask = torch.tril(torch.ones(n, n, dtype=torch.bool)).expand(b, n, n)
    logits = model(prompt, mask=causal_mask, input_pos=torch.arange(n).expand(b, n))
    tokens = [prompt, logits[:, -1:].argmax(-1)]
    for pos in range(n, n + max_new_tokens - 1):  # one new token sees every cached key: no mask
        logits = model(tokens[-1], input_pos=torch.full((b, 1), pos))
        tokens.append(logits[:, -1:].argmax(-1))
    return torch.cat(tokens, dim=1)


def _sdpa_or_flex_attention() -> Callable:
    def _attention_call(q, k, v, mask: Optional[torch.Tensor], dropout_p: float, is_causal: bool) -> torch.Tensor:
        if mask is not None:
            mask = mask[:, None, :, :]  # (b, s, s_kv) -> (b, 1, s, s_kv), True = attend
        return nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal)
    return _attention_call


if __name__ == "__main__":
    torch.manual_seed(0)
    model = TransformerDecoder().eval()
    prompt, next_token = torch.randint(0, 64, (2, 6)), torch.randint(0, 64, (2, 1))
    model.setup_caches(2, torch.float32)
    with torch.no_grad():
        model(prompt, mask=torch.tril(torch.ones(6, 6, dtype=torch.bool)).expand(2, 6, 6),
              input_pos=torch.arange(6).expand(2, 6))
        step = model(next_token, input_pos=torch.full((2, 1), 6))
        for layer in model.layers:
            layer.kv_cache = None
        full = model(torch.cat([prompt, next_token], dim=1))
    print("cached decode step vs full forward (max abs diff):", float((step[:, -1] - full[:, -1]).abs().max()))
    out = generate(model, prompt, max_new_tokens=4)
    for layer in model.layers:
        layer.kv_cache = None
    with torch.no_grad():
        print("greedy continuation matches a forward without cache:", torch.equal(model(out[:, :-1])[:, 5:].argmax(-1), out[:, 6:]))
