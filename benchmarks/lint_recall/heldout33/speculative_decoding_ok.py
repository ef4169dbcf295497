"""Speculative decoding: a small draft model proposes tokens, the target model verifies them.

Follows the structure of the reference speculative-sampling implementations (Leviathan et al.,
Chen et al.): a ``KVCacheModel`` wrapper keeps each model's key/value cache and probability
history, ``generate`` extends the draft by ``gamma`` tokens, the target scores all of them in
one cached forward pass, tokens are accepted with probability ``min(1, p / q)`` (or by argmax
agreement when greedy), the caches are rolled back to the accepted prefix, and a corrected
token is sampled from ``norm(max(p - q, 0))``. The draft is a weight-quantized copy of the target.

Source: conventions.md §1 (SDPA is_causal row), §2.7 and §5 item 8, pytorch/pytorch PR #111007
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPTConfig:
    vocab_size: int = 50
    n_embd: int = 64
    n_head: int = 4
    n_layer: int = 3
    block_size: int = 128


@dataclass
class SpecConfig:
    gamma: int = 4
    max_new_tokens: int = 24
    temperature: float = 0.0
    draft_bits: int = 6


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)

    def forward(self, x, layer_past=None):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if layer_past is not None:
            past_k, past_v = layer_past
            k = torch.cat([past_k, k], dim=2)
            v = torch.cat([past_v, v], dim=2)
        present = (k, v)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(T, k.size(2), dtype=torch.bool, device=x.device).tril(k.size(2) - T))
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C)), present


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = nn.Sequential(nn.Linear(cfg.n_embd, 4 * cfg.n_embd), nn.GELU(), nn.Linear(4 * cfg.n_embd, cfg.n_embd))

    def forward(self, x, layer_past=None):
        a, present = self.attn(self.ln_1(x), layer_past)
        x = x + a
        return x + self.mlp(self.ln_2(x)), present


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)

    def forward(self, idx, past_key_values=None):
        past_length = 0 if past_key_values is None else past_key_values[0][0].size(2)
        pos = torch.arange(past_length, past_length + idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        presents = []
        for i, block in enumerate(self.h):
            x, present = block(x, None if past_key_values is None else past_key_values[i])
            presents.append(present)
        return self.lm_head(self.ln_f(x)), presents


def quantize_weights(model: nn.Module, bits: int) -> nn.Module:
    draft = copy.deepcopy(model)
    qmax = 2 ** (bits - 1) - 1
    with torch.no_grad():
        for module in draft.modules():
            if isinstance(module, nn.Linear):
                scale = module.weight.abs().amax(dim=1, keepdim=True) / qmax
                module.weight.copy_(torch.round(module.weight / scale).clamp(-qmax, qmax) * scale)
    return draft


def norm_logits(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    if temperature == 0.0:
        return F.one_hot(logits.argmax(-1), logits.size(-1)).to(logits.dtype)
    return F.softmax(logits / temperature, dim=-1)


def sample(probs: torch.Tensor, generator=None) -> torch.Tensor:
    return torch.multinomial(probs, num_samples=1, generator=generator)


def max_fn(x: torch.Tensor) -> torch.Tensor:
    x_max = torch.where(x > 0, x, torch.zeros_like(x))
    return x_max / x_max.sum(dim=-1, keepdim=True)


class KVCacheModel:
    def __init__(self, model: nn.Module, temperature: float):
        self._model = model
        self._past_key_values = None
        self._prob_history = None
        self._temperature = temperature

    @torch.no_grad()
    def _forward_with_kvcache(self, input_ids: torch.Tensor) -> torch.Tensor:
        if self._past_key_values is None:
            logits, self._past_key_values = self._model(input_ids)
            self._prob_history = norm_logits(logits, self._temperature)
            return self._prob_history[:, -1, :]
        cached_len = self._past_key_values[0][0].size(2)
        logits, self._past_key_values = self._model(input_ids[:, cached_len:], self._past_key_values)
        self._prob_history = torch.cat([self._prob_history, norm_logits(logits, self._temperature)], dim=1)
        return self._prob_history[:, -1, :]

    def generate(self, prefix: torch.Tensor, gamma: int, generator=None) -> torch.Tensor:
        x = prefix
        for _ in range(gamma):
            q = self._forward_with_kvcache(x)
            x = torch.cat((x, sample(q, generator)), dim=1)
        return x

    def rollback(self, end_pos: int) -> None:
        self._past_key_values = [(k[:, :, :end_pos], v[:, :, :end_pos]) for k, v in self._past_key_values]
        self._prob_history = self._prob_history[:, :end_pos, :]


@torch.no_grad()
def speculative_sampling(prefix, draft_model, target_model, cfg: SpecConfig, generator=None):
    seq_len = prefix.shape[1]
    T = seq_len + cfg.max_new_tokens
    draft_cache = KVCacheModel(draft_model, cfg.temperature)
    target_cache = KVCacheModel(target_model, cfg.temperature)
    accepted_total, proposed_total = 0, 0
    while prefix.shape[1] < T:
        prefix_len = prefix.shape[1]
        x = draft_cache.generate(prefix, cfg.gamma, generator)
        _ = target_cache._forward_with_kvcache(x)
        n = prefix_len + cfg.gamma - 1
        for i in range(cfg.gamma):
            j = x[:, prefix_len + i]
            p = target_cache._prob_history[:, prefix_len + i - 1, j]
            q = draft_cache._prob_history[:, prefix_len + i - 1, j]
            r = torch.rand(1, generator=generator)
            if r > p / q:
                n = prefix_len + i - 1
                break
        accepted_total += n - prefix_len + 1
        proposed_total += cfg.gamma
        prefix = x[:, : n + 1]
        draft_cache.rollback(n + 1)
        if n < prefix_len + cfg.gamma - 1:
            t = sample(max_fn(target_cache._prob_history[:, n, :] - draft_cache._prob_history[:, n, :]), generator)
            target_cache.rollback(n + 1)
        else:
            t = sample(target_cache._prob_history[:, -1, :], generator)
        prefix = torch.cat((prefix, t), dim=1)
    return prefix[:, :T], accepted_total / proposed_total


@torch.no_grad()
def autoregressive_sampling(prefix, model, cfg: SpecConfig, generator=None):
    T = prefix.shape[1] + cfg.max_new_tokens
    while prefix.shape[1] < T:
        logits, _ = model(prefix)
        prefix = torch.cat((prefix, sample(norm_logits(logits[:, -1], cfg.temperature), generator)), dim=1)
    return prefix


def main() -> None:
    torch.manual_seed(0)
    cfg = GPTConfig()
    spec = SpecConfig()
    target = GPT(cfg).eval()
    draft = quantize_weights(target, spec.draft_bits).eval()
    prompts = [torch.randint(0, cfg.vocab_size, (1, n)) for n in (5, 9, 3)]
    for prompt in prompts:
        reference = autoregressive_sampling(prompt, target, spec)
        speculative, acceptance = speculative_sampling(prompt, draft, target, spec, torch.Generator().manual_seed(0))
        agree = (reference == speculative).float()[:, prompt.shape[1]:].mean().item()
        first = int((reference != speculative).nonzero()[0, 1]) if agree < 1 else -1
        print(f"prompt of {prompt.shape[1]}: acceptance {acceptance:.2f}, agreement with target greedy {agree:.2f}, first difference at {first}")

    with torch.no_grad():
        seq = autoregressive_sampling(prompts[0], target, spec)
        full_logits, _ = target(seq)
        _, past = target(seq[:, :8])
        cached_logits, _ = target(seq[:, 8:13], past)
    print(f"5 tokens after an 8-token cache vs full recompute: {(cached_logits - full_logits[:, 8:13]).abs().max().item():.3g}")


if __name__ == "__main__":
    main()
