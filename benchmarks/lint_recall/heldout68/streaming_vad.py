"""Streaming voice activity detection for a meeting-room microphone.

Log-mel frames every 10 ms go through a small transformer whose attention is
restricted to the current chunk of frames and two chunks of left context, so the
detector can run chunk by chunk with a bounded look-ahead. Frame posteriors are
smoothed into speech segments with a hangover.

Source: seed self_attention_mask_guide.txt section 6; conventions.md section 2.3.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

SAMPLE_RATE = 16000
N_FFT = 400
HOP = 160
N_MELS = 40
CHUNK_FRAMES = 8
LEFT_CHUNKS = 2


def mel_filterbank(n_mels=N_MELS, n_fft=N_FFT, sr=SAMPLE_RATE):
    hz_to_mel = lambda f: 2595.0 * math.log10(1.0 + f / 700.0)
    mels = torch.linspace(hz_to_mel(20.0), hz_to_mel(sr / 2), n_mels + 2)
    hz = 700.0 * (10 ** (mels / 2595.0) - 1.0)
    bins = torch.floor((n_fft + 1) * hz / sr).long()
    fb = torch.zeros(n_mels, n_fft // 2 + 1)
    for m in range(1, n_mels + 1):
        lo, ce, hi = bins[m - 1].item(), bins[m].item(), bins[m + 1].item()
        for k in range(lo, ce):
            fb[m - 1, k] = (k - lo) / max(ce - lo, 1)
        for k in range(ce, hi):
            fb[m - 1, k] = (hi - k) / max(hi - ce, 1)
    return fb


FBANK = mel_filterbank()


def log_mel(wav):
    spec = torch.stft(wav, N_FFT, HOP, window=torch.hann_window(N_FFT), return_complex=True)
    power = spec.abs().pow(2)
    return torch.log(FBANK @ power + 1e-6).transpose(1, 2)


def chunk_attention_bias(num_frames, chunk=CHUNK_FRAMES, left_chunks=LEFT_CHUNKS):
    bias = torch.zeros(num_frames, num_frames)  # expect: MC504 chunk
    for start in range(0, num_frames, chunk):
        end = min(start + chunk, num_frames)
        left = max(0, start - left_chunks * chunk)
        bias[start:end, left:end] = 0
    bias[bias == 0] = float("-inf")  # also: MC504 chunk
    return bias


class ChunkedSelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, attn_bias):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
        weights = torch.softmax(scores + attn_bias, dim=-1)
        return self.proj((weights @ v).transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = ChunkedSelfAttention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x, attn_bias):
        x = x + self.attn(self.ln1(x), attn_bias)
        return x + self.mlp(self.ln2(x))


class TransformerVAD(nn.Module):
    def __init__(self, dim=48, heads=4, layers=2):
        super().__init__()
        self.cmvn = nn.BatchNorm1d(N_MELS, affine=False)
        self.front = nn.Sequential(nn.Conv1d(N_MELS, dim, 3, padding=2), nn.ReLU())
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.head = nn.Linear(dim, 1)

    def forward(self, feats, lengths):
        t = feats.size(1)
        x = self.front(self.cmvn(feats.transpose(1, 2)))[:, :, :t].transpose(1, 2)
        frame_pad = torch.arange(t, device=feats.device)[None, :] >= lengths[:, None]
        attn_bias = chunk_attention_bias(t).to(feats.device)
        attn_bias = attn_bias.masked_fill(frame_pad[:, None, None, :], torch.finfo(x.dtype).min)
        for block in self.blocks:
            x = block(x, attn_bias)
        return self.head(x).squeeze(-1), frame_pad


def frames_to_segments(probs, threshold=0.5, min_speech=5, hangover=4):
    segments, start, silence = [], None, 0
    for i, p in enumerate(probs.tolist()):
        if p >= threshold:
            start = i if start is None else start
            silence = 0
        elif start is not None:
            silence += 1
            if silence > hangover:
                if i - silence - start + 1 >= min_speech:
                    segments.append((start * HOP / SAMPLE_RATE, (i - silence + 1) * HOP / SAMPLE_RATE))
                start, silence = None, 0
    if start is not None and len(probs) - start >= min_speech:
        segments.append((start * HOP / SAMPLE_RATE, len(probs) * HOP / SAMPLE_RATE))
    return segments


def synthetic_batch(n=3, seconds=0.6):
    total = int(seconds * SAMPLE_RATE)
    wavs, labels = torch.randn(n, total) * 0.01, torch.zeros(n, total // HOP + 1)
    t = torch.arange(total) / SAMPLE_RATE
    for i in range(n):
        s, e = int((0.1 + 0.05 * i) * SAMPLE_RATE), int((0.35 + 0.05 * i) * SAMPLE_RATE)
        wavs[i, s:e] += 0.3 * torch.sin(2 * math.pi * (180 + 40 * i) * t[s:e])
        labels[i, s // HOP:e // HOP] = 1.0
    lengths = torch.tensor([total // HOP + 1 - 12 * i for i in range(n)])
    return wavs, labels, lengths


if __name__ == "__main__":
    torch.manual_seed(0)
    model = TransformerVAD()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    wavs, labels, lengths = synthetic_batch()
    feats = log_mel(wavs)
    for step in range(3):
        logits, frame_pad = model(feats, lengths)
        loss = F.binary_cross_entropy_with_logits(logits, labels, reduction="none")
        loss = loss.masked_fill(frame_pad, 0.0).sum() / (~frame_pad).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} bce {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        logits, _ = model(feats[:1], lengths[:1])
    print("segments", frames_to_segments(torch.sigmoid(logits[0])))
