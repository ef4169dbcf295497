"""openai/whisper-style TextDecoder: MultiHeadAttention with `qkv_attention`, ResidualAttentionBlock with
cross-attention, the `kv_cache` dict filled by forward hooks (`install_kv_cache_hooks`), and the
-inf causal buffer registered in `TextDecoder.__init__` and read as `mask[:n_ctx, :n_ctx]`.

The buffer is built with `.triu_()`, whisper's `.triu_(1)` without the 1: the diagonal is -inf.

Source: seed self_attention_mask_guide.txt §3 (`generate_causal_mask`: `torch.triu(... * float('-inf'),
diagonal=1)`, the printed mask keeps the diagonal at 0); conventions.md §2.3 (an all -inf row gives NaN).
"""
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn


class LayerNorm(nn.LayerNorm):
    def forward(self, x: Tensor) -> Tensor:
        return super().forward(x.float()).type(x.dtype)


class MultiHeadAttention(nn.Module):
    def __init__(self, n_state: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.query = nn.Linear(n_state, n_state)
        self.key = nn.Linear(n_state, n_state, bias=False)
        self.value = nn.Linear(n_state, n_state)
        self.out = nn.Linear(n_state, n_state)

    def forward(self, x: Tensor, xa: Optional[Tensor] = None, mask: Optional[Tensor] = None, kv_cache: Optional[dict] = None):
        q = self.query(x)
        if kv_cache is None or xa is None or self.key not in kv_cache:
            # hooks, if installed (i.e. kv_cache is not None), will prepend the cached kv tensors;
            # otherwise, perform key/value projections for self- or cross-attention as usual.
            k = self.key(x if xa is None else xa)
            v = self.value(x if xa is None else xa)
        else:
            # for cross-attention, calculate keys and values once and reuse in subsequent calls.
            k, v = kv_cache[self.key], kv_cache[self.value]
        return self.out(self.qkv_attention(q, k, v, mask))

    def qkv_attention(self, q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor] = None):
        n_batch, n_ctx, n_state = q.shape
        scale = (n_state // self.n_head) ** -0.25
        q = q.view(*q.shape[:2], self.n_head, -1).permute(0, 2, 1, 3) * scale
        k = k.view(*k.shape[:2], self.n_head, -1).permute(0, 2, 3, 1) * scale
        v = v.view(*v.shape[:2], self.n_head, -1).permute(0, 2, 1, 3)
        qk = q @ k
        if mask is not None:
            qk = qk + mask[:n_ctx, :n_ctx]
        w = F.softmax(qk.float(), dim=-1).to(q.dtype)
        return (w @ v).permute(0, 2, 1, 3).flatten(start_dim=2)


class ResidualAttentionBlock(nn.Module):
    def __init__(self, n_state: int, n_head: int):
        super().__init__()
        self.attn, self.attn_ln = MultiHeadAttention(n_state, n_head), LayerNorm(n_state)
        self.cross_attn, self.cross_attn_ln = MultiHeadAttention(n_state, n_head), LayerNorm(n_state)
        self.mlp = nn.Sequential(nn.Linear(n_state, 4 * n_state), nn.GELU(), nn.Linear(4 * n_state, n_state))
        self.mlp_ln = LayerNorm(n_state)

    def forward(self, x: Tensor, xa: Tensor, mask: Optional[Tensor] = None, kv_cache: Optional[dict] = None):
        x = x + self.attn(self.attn_ln(x), mask=mask, kv_cache=kv_cache)
        x = x + self.cross_attn(self.cross_attn_ln(x), xa, kv_cache=kv_cache)
        return x + self.mlp(self.mlp_ln(x))


class TextDecoder(nn.Module):
    def __init__(self, n_vocab: int, n_ctx: int, n_state: int, n_head: int, n_layer: int):
        super().__init__()
        self.token_embedding = nn.Embedding(n_vocab, n_state)
        self.positional_embedding = nn.Parameter(torch.empty(n_ctx, n_state).normal_(std=0.02))
        self.blocks = nn.ModuleList([ResidualAttentionBlock(n_state, n_head) for _ in range(n_layer)])
        self.ln = LayerNorm(n_state)
        mask = torch.empty(n_ctx, n_ctx).fill_(-np.inf).triu_()  # expect: MC503 whisper
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x: Tensor, xa: Tensor, kv_cache: Optional[dict] = None):
        offset = next(iter(kv_cache.values())).shape[1] if kv_cache else 0
        x = self.token_embedding(x) + self.positional_embedding[offset : offset + x.shape[-1]]
        x = x.to(xa.dtype)
        for block in self.blocks:
            x = block(x, xa, mask=self.mask, kv_cache=kv_cache)
        x = self.ln(x)
        return (x @ torch.transpose(self.token_embedding.weight.to(x.dtype), 0, 1)).float()

    def install_kv_cache_hooks(self, cache: Optional[dict] = None):
        cache = {**cache} if cache is not None else {}
        hooks = []

        def save_to_cache(module, _, output):
            if module not in cache or output.shape[1] > self.positional_embedding.shape[0]:
                cache[module] = output  # save as-is, for the first token or cross attention
            else:
                cache[module] = torch.cat([cache[module], output], dim=1).detach()
            return cache[module]

        for block in self.blocks:
            for layer in (block.attn.key, block.attn.value, block.cross_attn.key, block.cross_attn.value):
                hooks.append(layer.register_forward_hook(save_to_cache))
        return cache, hooks


if __name__ == "__main__":
    torch.manual_seed(0)
    decoder = TextDecoder(n_vocab=51, n_ctx=16, n_state=32, n_head=4, n_layer=2).eval()
    audio_features = torch.randn(1, 10, 32)  # the AudioEncoder's output
    tokens = torch.tensor([[50, 7, 21, 3]])  # <|startoftranscript|> ...
    with torch.no_grad():
        full = decoder(tokens, audio_features)
        kv_cache, hooks = decoder.install_kv_cache_hooks()
        steps = torch.cat([decoder(tokens[:, i : i + 1], audio_features, kv_cache=kv_cache) for i in range(4)], dim=1)
        for hook in hooks:
            hook.remove()
    print("NaN in logits:", bool(full.isnan().any()), "cached == full:", torch.allclose(steps, full, atol=1e-5))
