"""Whisper-style encoder-decoder written the way openai/whisper's whisper/model.py writes it
(``ModelDimensions``, ``sinusoids``, ``ResidualAttentionBlock``, a per-layer kv cache), for clips
padded only to the longest in the batch: the encoder and the cross-attention skip the padded
frames. Greedy decoding is conditioned on a previous-text prompt, as in ``transcribe``.

Source: pytorch/pytorch PR #111007, conventions.md §1 (SDPA is_causal row), §2.7 and §5 item 8
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class ModelDimensions:
    n_mels: int = 16
    n_audio_ctx: int = 32
    n_state: int = 32
    n_head: int = 4
    n_audio_layer: int = 1
    n_vocab: int = 40
    n_text_ctx: int = 24
    n_text_layer: int = 2


def sinusoids(length: int, channels: int, max_timescale: int = 10000) -> torch.Tensor:
    log_timescale_increment = np.log(max_timescale) / (channels // 2 - 1)
    inv_timescales = torch.exp(-log_timescale_increment * torch.arange(channels // 2))
    scaled_time = torch.arange(length)[:, np.newaxis] * inv_timescales[np.newaxis, :]
    return torch.cat([torch.sin(scaled_time), torch.cos(scaled_time)], dim=1)


class MultiHeadAttention(nn.Module):
    def __init__(self, n_state: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.query, self.key = nn.Linear(n_state, n_state), nn.Linear(n_state, n_state, bias=False)
        self.value, self.out = nn.Linear(n_state, n_state), nn.Linear(n_state, n_state)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(*x.shape[:2], self.n_head, -1).permute(0, 2, 1, 3)

    def forward(self, x, xa=None, key_keep=None, kv_cache=None, causal=False):
        q = self.split(self.query(x))
        if xa is not None and kv_cache is not None and self in kv_cache:
            k, v = kv_cache[self]
        else:
            k, v = self.split(self.key(x if xa is None else xa)), self.split(self.value(x if xa is None else xa))
            if xa is None and kv_cache is not None and self in kv_cache:
                k = torch.cat([kv_cache[self][0], k], dim=2)
                v = torch.cat([kv_cache[self][1], v], dim=2)
            if kv_cache is not None:
                kv_cache[self] = (k, v)
        if causal:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril(k.shape[2] - q.shape[2]))
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=key_keep[:, None, None, :])
        return self.out(out.permute(0, 2, 1, 3).flatten(start_dim=2))


class ResidualAttentionBlock(nn.Module):
    def __init__(self, n_state: int, n_head: int, cross_attention: bool = False):
        super().__init__()
        self.attn, self.attn_ln = MultiHeadAttention(n_state, n_head), nn.LayerNorm(n_state)
        self.cross_attn = MultiHeadAttention(n_state, n_head) if cross_attention else None
        self.cross_attn_ln = nn.LayerNorm(n_state) if cross_attention else None
        self.mlp = nn.Sequential(nn.Linear(n_state, 4 * n_state), nn.GELU(), nn.Linear(4 * n_state, n_state))
        self.mlp_ln = nn.LayerNorm(n_state)

    def forward(self, x, key_keep, xa=None, audio_keep=None, kv_cache=None):
        if self.cross_attn is None:
            x = x + self.attn(self.attn_ln(x), key_keep=key_keep)
        else:
            x = x + self.attn(self.attn_ln(x), kv_cache=kv_cache, causal=True)
            x = x + self.cross_attn(self.cross_attn_ln(x), xa, key_keep=audio_keep, kv_cache=kv_cache)
        return x + self.mlp(self.mlp_ln(x))


class Whisper(nn.Module):
    def __init__(self, dims: ModelDimensions):
        super().__init__()
        d = dims.n_state
        self.conv1 = nn.Conv1d(dims.n_mels, d, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(d, d, kernel_size=3, stride=2, padding=1)
        self.register_buffer("positional_embedding", sinusoids(dims.n_audio_ctx, d))
        self.audio_blocks = nn.ModuleList(ResidualAttentionBlock(d, dims.n_head) for _ in range(dims.n_audio_layer))
        self.ln_post = nn.LayerNorm(d)
        self.token_embedding = nn.Embedding(dims.n_vocab, d)
        self.text_positional_embedding = nn.Parameter(torch.randn(dims.n_text_ctx, d) * 0.02)
        self.text_blocks = nn.ModuleList(ResidualAttentionBlock(d, dims.n_head, True) for _ in range(dims.n_text_layer))
        self.ln = nn.LayerNorm(d)

    def embed_audio(self, mel: torch.Tensor, mel_lens: torch.Tensor):
        frame_keep = torch.arange(mel.shape[-1])[None, :] < mel_lens[:, None]
        x = F.gelu(self.conv1(mel.masked_fill(~frame_keep[:, None, :], 0.0)))
        x = F.gelu(self.conv2(x)).permute(0, 2, 1)
        audio_keep = torch.arange(x.shape[1])[None, :] < (mel_lens[:, None] + 1) // 2
        x = x + self.positional_embedding[: x.shape[1]]
        for block in self.audio_blocks:
            x = block(x, audio_keep)
        return self.ln_post(x), audio_keep

    def logits(self, tokens, xa, audio_keep, kv_cache=None):
        offset = next(iter(kv_cache.values()))[0].shape[2] if kv_cache else 0
        x = self.token_embedding(tokens) + self.text_positional_embedding[offset: offset + tokens.shape[-1]]
        for block in self.text_blocks:
            x = block(x, None, xa, audio_keep, kv_cache=kv_cache)
        return self.ln(x) @ self.token_embedding.weight.T


@torch.no_grad()
def greedy_decode(model, mel, mel_lens, prompt, sot_sequence, steps=4):
    xa, audio_keep = model.embed_audio(mel, mel_lens)
    batch, kv_cache = mel.shape[0], {}
    model.logits(prompt.expand(batch, -1), xa, audio_keep, kv_cache)
    logits = model.logits(sot_sequence.expand(batch, -1), xa, audio_keep, kv_cache)
    tokens, step_logits = [logits[:, -1].argmax(-1, keepdim=True)], [logits[:, -1]]
    for _ in range(steps - 1):
        logits = model.logits(tokens[-1], xa, audio_keep, kv_cache)
        tokens.append(logits[:, -1].argmax(-1, keepdim=True))
        step_logits.append(logits[:, -1])
    return torch.cat(tokens, dim=1), torch.stack(step_logits, dim=1), (xa, audio_keep)


if __name__ == "__main__":
    torch.manual_seed(0)
    model = Whisper(ModelDimensions()).eval()
    mel, mel_lens = torch.randn(2, 16, 40), torch.tensor([40, 26])
    prompt, sot = torch.tensor([[1, 7, 9, 11]]), torch.tensor([[2, 3, 4]])
    tokens, step_logits, (xa, audio_keep) = greedy_decode(model, mel, mel_lens, prompt, sot)
    with torch.no_grad():
        full = torch.cat([prompt.expand(2, -1), sot.expand(2, -1), tokens[:, :-1]], dim=1)
        reference = model.logits(full, xa, audio_keep)[:, -tokens.shape[1]:]
        print("cached decode vs full recompute:", (step_logits - reference).abs().max().item())
        alone, alone_logits, _ = greedy_decode(model, mel[1:, :, :26], mel_lens[1:], prompt, sot)
        print("padded clip batched vs alone:", (step_logits[1] - alone_logits[0]).abs().max().item())
