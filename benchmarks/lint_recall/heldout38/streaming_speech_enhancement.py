"""Causal streaming transformer for single-channel speech enhancement (mask estimation).

A WeNet / Emformer-style chunked encoder over STFT frames: `subsequent_chunk_mask` with a
limited number of left chunks, `make_pad_mask` over utterance lengths, a magnitude mask head
applied to the noisy complex spectrum and an inverse STFT. Training is on full padded
utterances; deployment runs `StreamingEnhancer` chunk by chunk with per-layer key/value caches
holding the left context, in float16. The demo mixes harmonic "voiced" signals with white
noise and reports SI-SNR improvement.

Source: NVIDIA/apex#1052 and facebookresearch/fairseq#3575 (conventions.md §3 item 18);
huggingface/lerobot PR #710 (conventions.md §3 item 19); conventions.md §2.3; tools.md §0 P5.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class SEConfig:
    sample_rate: int = 8000
    n_fft: int = 64
    hop_length: int = 16
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    chunk_size: int = 4
    num_left_chunks: int = 2


def make_pad_mask(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    return torch.arange(max_len, device=lengths.device)[None, :] >= lengths[:, None]


def subsequent_chunk_mask(size: int, chunk_size: int, num_left_chunks: int, device=None):
    chunk = torch.arange(size, device=device) // chunk_size
    delta = chunk[:, None] - chunk[None, :]
    return (delta >= 0) & (delta <= num_left_chunks)


class StreamingSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.h, self.d_k = n_heads, d_model // n_heads
        self.linear_q = nn.Linear(d_model, d_model)
        self.linear_k = nn.Linear(d_model, d_model)
        self.linear_v = nn.Linear(d_model, d_model)
        self.linear_out = nn.Linear(d_model, d_model)

    def forward(self, x, mask, cache=None):
        B, T, _ = x.shape
        q = self.linear_q(x).view(B, T, self.h, self.d_k).transpose(1, 2)
        k = self.linear_k(x).view(B, T, self.h, self.d_k).transpose(1, 2)
        v = self.linear_v(x).view(B, T, self.h, self.d_k).transpose(1, 2)
        if cache is not None:
            k = torch.cat([cache[0], k], dim=2)
            v = torch.cat([cache[1], v], dim=2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        scores = scores.masked_fill(~mask, torch.finfo(torch.float32).min)  # expect: MC517 speech
        attn = torch.softmax(scores, dim=-1)
        out = (attn @ v).transpose(1, 2).reshape(B, T, -1)
        return self.linear_out(out), (k, v)


class EncoderLayer(nn.Module):
    def __init__(self, cfg: SEConfig):
        super().__init__()
        self.self_attn = StreamingSelfAttention(cfg.d_model, cfg.n_heads)
        self.norm1, self.norm2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.feed_forward = nn.Sequential(
            nn.Linear(cfg.d_model, 2 * cfg.d_model),
            nn.GELU(),
            nn.Linear(2 * cfg.d_model, cfg.d_model),
        )

    def forward(self, x, mask, cache=None):
        attn_out, new_cache = self.self_attn(self.norm1(x), mask, cache)
        x = x + attn_out
        return x + self.feed_forward(self.norm2(x)), new_cache


class MaskEstimator(nn.Module):
    def __init__(self, cfg: SEConfig):
        super().__init__()
        self.cfg = cfg
        n_freq = cfg.n_fft // 2 + 1
        self.input_layer = nn.Sequential(nn.Linear(n_freq, cfg.d_model), nn.LayerNorm(cfg.d_model))
        self.encoders = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_layers))
        self.mask_head = nn.Linear(cfg.d_model, n_freq)

    def forward(self, feats, lengths):
        T = feats.shape[1]
        chunk_masks = subsequent_chunk_mask(
            T, self.cfg.chunk_size, self.cfg.num_left_chunks, feats.device
        )
        masks = chunk_masks[None, None] & ~make_pad_mask(lengths, T)[:, None, None, :]
        x = self.input_layer(feats)
        for layer in self.encoders:
            x, _ = layer(x, masks)
        return torch.sigmoid(self.mask_head(x))


class Enhancer(nn.Module):
    def __init__(self, cfg: SEConfig):
        super().__init__()
        self.cfg = cfg
        self.estimator = MaskEstimator(cfg)
        self.register_buffer("window", torch.hann_window(cfg.n_fft), persistent=False)

    def stft(self, wav):
        spec = torch.stft(
            wav, self.cfg.n_fft, self.cfg.hop_length, window=self.window, return_complex=True
        )
        return spec.transpose(1, 2)

    def istft(self, spec, length):
        return torch.istft(
            spec.transpose(1, 2),
            self.cfg.n_fft,
            self.cfg.hop_length,
            window=self.window,
            length=length,
        )

    def forward(self, noisy, wav_lengths):
        spec = self.stft(noisy)
        frame_lengths = wav_lengths // self.cfg.hop_length + 1
        mask = self.estimator(torch.log1p(spec.abs()), frame_lengths)
        return spec * mask, frame_lengths


class StreamingEnhancer:
    """Chunk-by-chunk inference with left-context key/value caches, in the model's dtype."""

    def __init__(self, model: Enhancer, dtype=torch.float16):
        self.model = model
        self.estimator = model.estimator.to(dtype)
        self.dtype = dtype

    @torch.no_grad()
    def __call__(self, noisy):
        cfg = self.model.cfg
        spec = self.model.stft(noisy[None])
        feats = torch.log1p(spec.abs()).to(self.dtype)
        caches = [None] * cfg.n_layers
        keep_frames = cfg.chunk_size * cfg.num_left_chunks
        outputs = []
        for start in range(0, feats.shape[1], cfg.chunk_size):
            x = self.estimator.input_layer(feats[:, start : start + cfg.chunk_size])
            cached = 0 if caches[0] is None else caches[0][0].shape[2]
            mask = torch.ones(1, 1, x.shape[1], cached + x.shape[1], dtype=torch.bool)
            for i, layer in enumerate(self.estimator.encoders):
                x, (k, v) = layer(x, mask, caches[i])
                caches[i] = (k[:, :, -keep_frames:], v[:, :, -keep_frames:])
            outputs.append(torch.sigmoid(self.estimator.mask_head(x)))
        mask = torch.cat(outputs, dim=1).float()
        return self.model.istft(spec * mask, noisy.shape[-1])[0]


def si_snr(est, ref, eps=1e-8):
    ref = ref - ref.mean(-1, keepdim=True)
    est = est - est.mean(-1, keepdim=True)
    proj = (est * ref).sum(-1, keepdim=True) * ref / (ref.pow(2).sum(-1, keepdim=True) + eps)
    return 10 * torch.log10(proj.pow(2).sum(-1) / ((est - proj).pow(2).sum(-1) + eps) + eps)


def make_mixture(gen: torch.Generator, cfg: SEConfig):
    n = int(torch.randint(800, 2001, (1,), generator=gen))
    t = torch.arange(n) / cfg.sample_rate
    f0 = 150 + 250 * torch.rand(1, generator=gen)
    clean = sum(torch.sin(2 * math.pi * f0 * h * t) / h for h in range(1, 5))
    clean = clean * (0.5 + 0.5 * torch.sin(2 * math.pi * 3 * t)) * 0.3
    noise = torch.randn(n, generator=gen) * clean.std()
    return clean + noise, clean


def collate(pairs):
    lengths = torch.tensor([len(noisy) for noisy, _ in pairs])
    noisy = torch.zeros(len(pairs), int(lengths.max()))
    clean = torch.zeros_like(noisy)
    for i, (x, y) in enumerate(pairs):
        noisy[i, : len(x)], clean[i, : len(y)] = x, y
    return noisy, clean, lengths


def main():
    torch.manual_seed(0)
    cfg = SEConfig()
    model = Enhancer(cfg)
    gen = torch.Generator().manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    for step in range(120):
        noisy, clean, lengths = collate([make_mixture(gen, cfg) for _ in range(8)])
        enhanced, frame_lengths = model(noisy, lengths)
        target = model.stft(clean).abs()
        valid = ~make_pad_mask(frame_lengths, target.shape[1])
        loss = (enhanced.abs() - target).abs()[valid].mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 40 == 0:
            print(f"step {step}: spectral L1 {loss.item():.4f}")
    model.eval()
    test = [make_mixture(torch.Generator().manual_seed(100 + i), cfg) for i in range(4)]
    with torch.no_grad():
        offline = [
            model.istft(model(x[None], torch.tensor([len(x)]))[0], len(x))[0] for x, _ in test
        ]
    improvement = sum(float(si_snr(o, c) - si_snr(x, c)) for o, (x, c) in zip(offline, test)) / len(
        test
    )
    print(f"offline float32 SI-SNR improvement {improvement:.2f} dB")
    streamer = StreamingEnhancer(model, torch.float16)
    streamed = [streamer(x) for x, _ in test]
    gap = max((s - o).abs().max().item() for s, o in zip(streamed, offline))
    improvement = sum(
        float(si_snr(s, c) - si_snr(x, c)) for s, (x, c) in zip(streamed, test)
    ) / len(test)
    print(
        f"streaming float16 SI-SNR improvement {improvement:.2f} dB; max gap to offline {gap:.2e}"
    )


if __name__ == "__main__":
    main()
