"""Long-context decoder with sliding-window attention and attention sinks.

A Mistral-style decoder (RMSNorm, rotary embeddings, SwiGLU) whose attention sees the last
``sliding_window`` positions plus the first ``num_sink_tokens`` positions of the sequence, as in
StreamingLLM. Training and prefill use ``build_window_bias``; streaming generation keeps a
``SinkCache`` that stores the sink keys and the most recent keys (rotated at their absolute
positions, as Mistral's rolling buffer does) and evicts everything in between.

Source: seed self_attention_mask_guide.txt §3 (generate_causal_mask) and §6 (create_local_mask), pytorch/pytorch#103749, conventions.md §1 (direction cheat-sheet) and §2.9 (sliding_window)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class LongContextConfig:
    vocab_size: int = 32
    hidden_size: int = 64
    intermediate_size: int = 128
    num_attention_heads: int = 4
    num_hidden_layers: int = 2
    sliding_window: int = 8
    num_sink_tokens: int = 2
    rope_theta: float = 10000.0


def build_window_bias(seq_len: int, window: int, num_sinks: int, dtype: torch.dtype) -> torch.Tensor:
    future = torch.triu(torch.full((seq_len, seq_len), float("-inf"), dtype=dtype))  # expect: MC503 attnsinks
    distant = torch.tril(torch.full((seq_len, seq_len), float("-inf"), dtype=dtype), diagonal=-window)
    bias = future + distant
    bias[:, :num_sinks] = future[:, :num_sinks]
    return bias


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class RotaryEmbedding(nn.Module):
    def __init__(self, dim: int, base: float):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)), persistent=False)

    def forward(self, position_ids: torch.Tensor):
        freqs = position_ids[:, :, None].float() * self.inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos()[:, None], emb.sin()[:, None]


class SinkCache:
    def __init__(self, window: int, num_sinks: int):
        self.window, self.num_sinks = window, num_sinks
        self.key_cache: list[torch.Tensor] = []
        self.value_cache: list[torch.Tensor] = []

    def _evict(self, t: torch.Tensor) -> torch.Tensor:
        keep_recent = self.window - 1
        if t.shape[2] <= self.num_sinks + keep_recent:
            return t
        return torch.cat([t[:, :, : self.num_sinks], t[:, :, -keep_recent:]], dim=2)

    def update(self, key_states, value_states, layer_idx: int):
        if len(self.key_cache) <= layer_idx:
            keys, values = key_states, value_states
            self.key_cache.append(None)
            self.value_cache.append(None)
        else:
            keys = torch.cat([self.key_cache[layer_idx], key_states], dim=2)
            values = torch.cat([self.value_cache[layer_idx], value_states], dim=2)
        self.key_cache[layer_idx], self.value_cache[layer_idx] = self._evict(keys), self._evict(values)
        return keys, values


class Attention(nn.Module):
    def __init__(self, cfg: LongContextConfig, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads, self.head_dim = cfg.num_attention_heads, cfg.hidden_size // cfg.num_attention_heads
        self.q_proj = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=False)
        self.o_proj = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=False)

    def forward(self, hidden_states, position_embeddings, attention_bias=None, past_key_value=None):
        B, T, C = hidden_states.shape
        shape = (B, T, self.num_heads, self.head_dim)
        q = self.q_proj(hidden_states).view(shape).transpose(1, 2)
        k = self.k_proj(hidden_states).view(shape).transpose(1, 2)
        v = self.v_proj(hidden_states).view(shape).transpose(1, 2)
        cos, sin = position_embeddings
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        if past_key_value is not None:
            k, v = past_key_value.update(k, v, self.layer_idx)
        attn_weights = q @ k.transpose(2, 3) / math.sqrt(self.head_dim)
        if attention_bias is not None:
            attn_weights = attn_weights + attention_bias
        attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(q.dtype)
        return self.o_proj((attn_weights @ v).transpose(1, 2).reshape(B, T, C))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: LongContextConfig, layer_idx: int):
        super().__init__()
        self.input_layernorm = nn.RMSNorm(cfg.hidden_size, eps=1e-6)
        self.self_attn = Attention(cfg, layer_idx)
        self.post_attention_layernorm = nn.RMSNorm(cfg.hidden_size, eps=1e-6)
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x, position_embeddings, attention_bias=None, past_key_value=None):
        x = x + self.self_attn(self.input_layernorm(x), position_embeddings, attention_bias, past_key_value)
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class StreamingLM(nn.Module):
    def __init__(self, cfg: LongContextConfig):
        super().__init__()
        self.config = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.rotary_emb = RotaryEmbedding(cfg.hidden_size // cfg.num_attention_heads, cfg.rope_theta)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.num_hidden_layers))
        self.norm = nn.RMSNorm(cfg.hidden_size, eps=1e-6)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def forward(self, input_ids, position_ids=None, past_key_values=None, labels=None):
        B, T = input_ids.shape
        if position_ids is None:
            position_ids = torch.arange(T, device=input_ids.device)[None].expand(B, -1)
        x = self.embed_tokens(input_ids)
        bias = None
        if T > 1:
            bias = build_window_bias(T, self.config.sliding_window, self.config.num_sink_tokens, x.dtype)
        position_embeddings = self.rotary_emb(position_ids)
        for layer in self.layers:
            x = layer(x, position_embeddings, attention_bias=bias, past_key_value=past_key_values)
        logits = self.lm_head(self.norm(x))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1))
        return {"loss": loss, "logits": logits}

    @torch.no_grad()
    def stream(self, input_ids: torch.Tensor, prefill: int) -> torch.Tensor:
        cache = SinkCache(self.config.sliding_window, self.config.num_sink_tokens)
        outs = [self(input_ids[:, :prefill], past_key_values=cache)["logits"]]
        for t in range(prefill, input_ids.shape[1]):
            pos = torch.full((input_ids.shape[0], 1), t)
            outs.append(self(input_ids[:, t : t + 1], position_ids=pos, past_key_values=cache)["logits"])
        return torch.cat(outs, dim=1)


def make_batch(batch_size: int, length: int, cfg: LongContextConfig, g: torch.Generator) -> torch.Tensor:
    period = cfg.sliding_window // 2
    motif = torch.randint(1, cfg.vocab_size, (batch_size, period), generator=g)
    return motif.repeat(1, length // period + 1)[:, :length]


def main() -> None:
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    cfg = LongContextConfig()
    model = StreamingLM(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(60):
        ids = make_batch(16, 32, cfg, g)
        loss = model(ids, labels=ids)["loss"]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 20 == 0 or step == 59:
            print(f"step {step:2d} loss {loss.item():.4f}")

    model.eval()
    ids = make_batch(2, 48, cfg, g)
    with torch.no_grad():
        full = model(ids)["logits"]
    streamed = model.stream(ids, prefill=6)
    print(f"48 tokens, full forward vs streaming with a sink cache: {(full - streamed).abs().max().item():.3g}")
    accuracy = (full[:, 8:-1].argmax(-1) == ids[:, 9:]).float().mean().item()
    print(f"next-token accuracy after the first window: {accuracy:.2f}")


if __name__ == "__main__":
    main()
