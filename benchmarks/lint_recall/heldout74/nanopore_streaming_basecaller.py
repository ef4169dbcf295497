"""Streaming nanopore basecaller in the Bonito transformer layout.

Raw current samples of a read are normalised (median / MAD), cut into chunks,
downsampled by a convolutional stem into frames and fed through a transformer
encoder with rotary embeddings and DeepNorm residuals. Attention is local: each
frame sees a fixed number of past frames and a short lookahead so the caller
can emit bases with bounded latency. A CTC head over ``N`` (blank) and ``ACGT``
is trained with ``F.ctc_loss``; decoding is greedy.

Source: conventions.md §1 (SDPA is_causal row), §2.7, §5 item 8; pytorch/pytorch PR #111007
"""
from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class BasecallerConfig:
    alphabet: str = "NACGT"
    d_model: int = 32
    nhead: int = 4
    num_layers: int = 2
    dim_feedforward: int = 64
    stride: int = 5
    attn_window: tuple = (12, 2)
    deepnorm_alpha: float = 2.0


def med_mad(signal, factor=1.4826):
    med = signal.median()
    mad = (signal - med).abs().median() * factor
    return med, mad


@lru_cache(maxsize=16)
def sliding_window_keep(n_frames, left, right, device="cpu"):
    pos = torch.arange(n_frames, device=device)
    rel = pos[None, :] - pos[:, None]
    return (rel >= -left) & (rel <= right)


class RotaryEmbedding(nn.Module):
    def __init__(self, dim, base=10000.0):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / base ** (torch.arange(0, dim, 2).float() / dim), persistent=False)

    def forward(self, x):
        t = torch.arange(x.shape[-2], device=x.device, dtype=self.inv_freq.dtype)
        freqs = torch.outer(t, self.inv_freq)
        cos, sin = freqs.cos().repeat(1, 2), freqs.sin().repeat(1, 2)
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, nhead, attn_window):
        super().__init__()
        self.nhead = nhead
        self.head_dim = d_model // nhead
        self.attn_window = attn_window
        self.Wqkv = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.rotary_emb = RotaryEmbedding(self.head_dim)

    def forward(self, x, frame_keep):
        b, t, _ = x.shape
        qkv = self.Wqkv(x).view(b, t, 3, self.nhead, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = self.rotary_emb(qkv[0]), self.rotary_emb(qkv[1]), qkv[2]
        allowed = sliding_window_keep(t, *self.attn_window, str(x.device)) & frame_keep[:, None, None, :]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, is_causal=True)  # expect: MC506 window
        return self.out_proj(out.transpose(1, 2).reshape(b, t, -1))


class TransformerEncoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.nhead, cfg.attn_window)
        self.ff = nn.Sequential(nn.Linear(cfg.d_model, cfg.dim_feedforward), nn.SiLU(),
                                nn.Linear(cfg.dim_feedforward, cfg.d_model))
        self.norm1 = nn.LayerNorm(cfg.d_model)
        self.norm2 = nn.LayerNorm(cfg.d_model)
        self.alpha = cfg.deepnorm_alpha

    def forward(self, x, frame_keep):
        x = self.norm1(self.self_attn(x, frame_keep) + self.alpha * x)
        return self.norm2(self.ff(x) + self.alpha * x)


class Basecaller(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.conv = nn.Sequential(
            nn.Conv1d(1, 4, 5, padding=2), nn.SiLU(),
            nn.Conv1d(4, 16, 5, padding=2), nn.SiLU(),
            nn.Conv1d(16, cfg.d_model, 19, stride=cfg.stride, padding=9), nn.SiLU(),
        )
        self.encoder = nn.ModuleList([TransformerEncoderLayer(cfg) for _ in range(cfg.num_layers)])
        self.linear_crf = nn.Linear(cfg.d_model, len(cfg.alphabet))

    def frame_lengths(self, sample_lengths):
        return (sample_lengths - 1) // self.cfg.stride + 1

    def forward(self, signal, sample_lengths):
        x = self.conv(signal.unsqueeze(1)).transpose(1, 2)
        lengths = self.frame_lengths(sample_lengths)
        frame_keep = torch.arange(x.shape[1], device=x.device)[None, :] < lengths[:, None]
        for layer in self.encoder:
            x = layer(x, frame_keep)
        return self.linear_crf(x).log_softmax(-1), lengths

    def loss(self, signal, sample_lengths, targets, target_lengths):
        log_probs, lengths = self(signal, sample_lengths)
        return F.ctc_loss(log_probs.transpose(0, 1), targets, lengths, target_lengths, blank=0, zero_infinity=True)

    @torch.no_grad()
    def basecall(self, signal, sample_lengths):
        log_probs, lengths = self(signal, sample_lengths)
        calls = []
        for path, n in zip(log_probs.argmax(-1), lengths.tolist()):
            path = torch.unique_consecutive(path[:n])
            calls.append("".join(self.cfg.alphabet[i] for i in path.tolist() if i != 0))
        return calls


def chunk_reads(reads, chunksize):
    chunks, lengths = [], []
    for read in reads:
        med, mad = med_mad(read)
        read = (read - med) / mad.clamp(min=1e-6)
        for start in range(0, len(read), chunksize):
            piece = read[start:start + chunksize]
            lengths.append(len(piece))
            chunks.append(F.pad(piece, (0, chunksize - len(piece))))
    return torch.stack(chunks), torch.tensor(lengths)


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = BasecallerConfig()
    model = Basecaller(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    reads = [torch.randn(520) * 12 + 90, torch.randn(330) * 10 + 85]
    signal, sample_lengths = chunk_reads(reads, chunksize=300)
    target_lengths = (sample_lengths // 30).clamp(min=1)
    targets = torch.randint(1, 5, (int(target_lengths.sum()),))
    for step in range(3):
        loss = model.loss(signal, sample_lengths, targets, target_lengths)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} ctc {loss.item():.4f}")
    model.eval()
    print([c[:20] for c in model.basecall(signal, sample_lengths)])
