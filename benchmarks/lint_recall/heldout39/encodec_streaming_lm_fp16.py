"""EnCodec-style neural audio codec with a streaming transformer language model over its codes.

Laid out after facebookresearch/encodec: ``SEANetEncoder`` / ``SEANetDecoder``, a
``ResidualVectorQuantizer``, ``create_sin_embedding``, a ``StreamingTransformerEncoder`` whose
layers keep the inputs of the last ``past_context`` frames as state, and the ``LMModel`` that
gives the code probabilities for the entropy coder. The LM is shipped in ``cfg.dtype``.

Source: NVIDIA/apex#1052 and facebookresearch/fairseq#3575 (conventions.md §3 item 18),
conventions.md §2.3.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class EncodecConfig:
    sample_rate: int = 8000
    channels: int = 1
    dimension: int = 32
    ratios: tuple[int, ...] = (4, 4)
    n_q: int = 4
    bins: int = 64
    lm_dim: int = 64
    lm_heads: int = 4
    lm_layers: int = 2
    past_context: int = 16
    chunk: int = 8
    dtype: torch.dtype = torch.float16


class SEANetEncoder(nn.Module):
    def __init__(self, cfg: EncodecConfig):
        super().__init__()
        ch = 16
        layers: list[nn.Module] = [nn.Conv1d(cfg.channels, ch, 7, padding=3)]
        for ratio in cfg.ratios:
            layers += [nn.ELU(), nn.Conv1d(ch, ch * 2, 2 * ratio, stride=ratio, padding=ratio // 2)]
            ch *= 2
        layers += [nn.ELU(), nn.Conv1d(ch, cfg.dimension, 3, padding=1)]
        self.model = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)


class SEANetDecoder(nn.Module):
    def __init__(self, cfg: EncodecConfig):
        super().__init__()
        ch = 16 * 2 ** len(cfg.ratios)
        layers: list[nn.Module] = [nn.Conv1d(cfg.dimension, ch, 3, padding=1)]
        for ratio in cfg.ratios:
            up = nn.ConvTranspose1d(ch, ch // 2, 2 * ratio, stride=ratio, padding=ratio // 2)
            layers += [nn.ELU(), up]
            ch //= 2
        layers += [nn.ELU(), nn.Conv1d(ch, cfg.channels, 7, padding=3)]
        self.model = nn.Sequential(*layers)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.model(z)


class ResidualVectorQuantizer(nn.Module):
    def __init__(self, cfg: EncodecConfig):
        super().__init__()
        self.codebooks = nn.ParameterList(
            nn.Parameter(torch.randn(cfg.bins, cfg.dimension)) for _ in range(cfg.n_q)
        )
        self.inited = False

    @staticmethod
    def _nearest(x: torch.Tensor, codebook: torch.Tensor) -> torch.Tensor:
        dist = x.pow(2).sum(-1, keepdim=True) - 2 * x @ codebook.t() + codebook.pow(2).sum(-1)
        return dist.argmin(dim=-1)

    def forward(self, x: torch.Tensor):
        x = x.transpose(1, 2)
        residual, quantized, codes, commit = x, torch.zeros_like(x), [], x.new_zeros(())
        for codebook in self.codebooks:
            if self.training and not self.inited:
                frames = residual.detach().reshape(-1, residual.shape[-1])
                codebook.data.copy_(frames[torch.randperm(frames.shape[0])[: codebook.shape[0]]])
            idx = self._nearest(residual.detach(), codebook)
            q = F.embedding(idx, codebook)
            commit = commit + F.mse_loss(residual, q.detach()) + F.mse_loss(q, residual.detach())
            quantized = quantized + q
            residual = residual - q.detach()
            codes.append(idx)
        self.inited = True
        quantized = x + (quantized - x).detach()
        return quantized.transpose(1, 2), torch.stack(codes, dim=1), commit


def create_sin_embedding(positions: torch.Tensor, dim: int, max_period: float = 10000.0):
    half_dim = dim // 2
    adim = torch.arange(half_dim, device=positions.device).view(1, 1, -1)
    phase = positions / (max_period ** (adim / (half_dim - 1)))
    return torch.cat([torch.cos(phase), torch.sin(phase)], dim=-1)


def streaming_attn_mask(num_queries: int, num_past: int, past_context: int, device) -> torch.Tensor:
    queries_pos = torch.arange(num_past, num_past + num_queries, device=device).view(-1, 1)
    keys_pos = torch.arange(num_past + num_queries, device=device).view(1, -1)
    delta = queries_pos - keys_pos
    return (delta >= 0) & (delta <= past_context)


class StreamingMultiheadAttention(nn.Module):
    def __init__(self, dim: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.in_proj = nn.Linear(dim, 3 * dim)
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, x_past: torch.Tensor, attn_mask: torch.Tensor):
        B, T, C = x.shape
        q, k, v = self.in_proj(torch.cat([x_past, x], dim=1)).chunk(3, dim=-1)
        q = q[:, -T:]
        q, k, v = (
            t.reshape(B, -1, self.num_heads, C // self.num_heads).transpose(1, 2) for t in (q, k, v)
        )
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(~attn_mask, -1e9)  # expect: MC501 encodec
        weights = scores.softmax(dim=-1)
        return self.out_proj((weights @ v).transpose(1, 2).reshape(B, T, C))


class StreamingTransformerEncoderLayer(nn.Module):
    def __init__(self, dim: int, num_heads: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.self_attn = StreamingMultiheadAttention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.ffn = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor, x_past: torch.Tensor, attn_mask: torch.Tensor):
        x = x + self.self_attn(self.norm1(x), self.norm1(x_past), attn_mask)
        return x + self.ffn(self.norm2(x))


class StreamingTransformerEncoder(nn.Module):
    def __init__(self, dim: int, num_heads: int, num_layers: int, past_context: int):
        super().__init__()
        self.past_context = past_context
        self.layers = nn.ModuleList(
            StreamingTransformerEncoderLayer(dim, num_heads) for _ in range(num_layers)
        )

    def forward(self, x: torch.Tensor, states=None, offset: int = 0):
        B, T, C = x.shape
        if states is None:
            states = [x.new_zeros(B, 0, C) for _ in self.layers]
        positions = torch.arange(T, device=x.device).view(1, -1, 1) + offset
        x = x + create_sin_embedding(positions, C).to(x.dtype)
        new_states = []
        for x_past, layer in zip(states, self.layers):
            attn_mask = streaming_attn_mask(T, x_past.shape[1], self.past_context, x.device)
            new_states.append(torch.cat([x_past, x], dim=1)[:, -self.past_context :])
            x = layer(x, x_past, attn_mask)
        return x, new_states, offset + T


class LMModel(nn.Module):
    def __init__(self, cfg: EncodecConfig):
        super().__init__()
        self.bins = cfg.bins
        self.emb = nn.ModuleList(nn.Embedding(cfg.bins + 1, cfg.lm_dim) for _ in range(cfg.n_q))
        self.transformer = StreamingTransformerEncoder(
            cfg.lm_dim, cfg.lm_heads, cfg.lm_layers, cfg.past_context
        )
        self.linears = nn.ModuleList(nn.Linear(cfg.lm_dim, cfg.bins) for _ in range(cfg.n_q))

    def forward(self, indices: torch.Tensor, states=None, offset: int = 0):
        x = sum(emb(indices[:, k]) for k, emb in enumerate(self.emb))
        out, states, offset = self.transformer(x, states, offset)
        logits = torch.stack([linear(out) for linear in self.linears], dim=1)
        return logits, states, offset


def shift_codes(codes: torch.Tensor, bins: int) -> torch.Tensor:
    return torch.cat([torch.full_like(codes[..., :1], bins), codes[..., :-1]], dim=-1)


@torch.no_grad()
def streaming_bits(lm: LMModel, codes: torch.Tensor, chunk: int) -> float:
    inputs, states, offset, total = shift_codes(codes, lm.bins), None, 0, 0.0
    for start in range(0, codes.shape[-1], chunk):
        logits, states, offset = lm(inputs[..., start : start + chunk], states, offset)
        logp = logits.float().log_softmax(dim=-1)
        target = codes[..., start : start + chunk, None]
        total -= logp.gather(-1, target).sum().item() / math.log(2)
    return total / codes.shape[0]


def synth_batch(cfg: EncodecConfig, batch: int, length: int, gen: torch.Generator):
    t = torch.arange(length) / cfg.sample_rate
    freqs = 100 + 900 * torch.rand(batch, 3, 1, generator=gen)
    amps = torch.rand(batch, 3, 1, generator=gen)
    wav = (amps * torch.sin(2 * math.pi * freqs * t)).sum(1, keepdim=True) / 3
    return wav * torch.hann_window(length, periodic=False)


def main() -> None:
    torch.manual_seed(0)
    cfg, gen = EncodecConfig(), torch.Generator().manual_seed(0)
    encoder, quantizer, decoder = (
        SEANetEncoder(cfg),
        ResidualVectorQuantizer(cfg),
        SEANetDecoder(cfg),
    )
    codec = nn.ModuleList([encoder, quantizer, decoder])
    opt = torch.optim.Adam(codec.parameters(), lr=2e-3)
    for _ in range(60):
        wav = synth_batch(cfg, 8, 1024, gen)
        quantized, codes, commit = quantizer(encoder(wav))
        loss = F.l1_loss(decoder(quantized), wav) + 0.25 * commit
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"codec loss {loss.item():.4f}")
    lm = LMModel(cfg)
    opt = torch.optim.Adam(lm.parameters(), lr=2e-3)
    for _ in range(60):
        with torch.no_grad():
            _, codes, _ = quantizer(encoder(synth_batch(cfg, 8, 1024, gen)))
        logits, _, _ = lm(shift_codes(codes, cfg.bins))
        loss = F.cross_entropy(logits.reshape(-1, cfg.bins), codes.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"lm loss {loss.item():.4f}")
    with torch.no_grad():
        _, codes, _ = quantizer(encoder(synth_batch(cfg, 4, 1024, gen)))
    seconds = 1024 / cfg.sample_rate
    print(f"float32 streamed: {streaming_bits(lm, codes, cfg.chunk) / seconds:.0f} bit/s")
    lm_shipped = copy.deepcopy(lm).to(cfg.dtype).eval()
    bits = streaming_bits(lm_shipped, codes, cfg.chunk)
    print(f"{cfg.dtype} streamed: {bits / seconds:.0f} bit/s")


if __name__ == "__main__":
    main()
