"""A Conformer encoder with a CTC head for speech recognition (ESPnet / NeMo style).

Filterbank frames -> per-utterance mean/variance normalisation over the real frames ->
SpecAugment (training) -> 4x convolutional subsampling -> Conformer blocks (macaron feed-forward,
multi-head self-attention, convolution module) -> CTC. Utterances are right-padded; every module
recomputes its frame mask from the per-utterance lengths, the way ESPnet's `make_pad_mask` is
called at each use. The convolution module uses LayerNorm instead of BatchNorm so that padding
cannot change the statistics, and zeroes padded frames before the depthwise convolution. The
self-attention runs on F.scaled_dot_product_attention, whose bool attn_mask (True = attend)
broadcasts from the right against (batch, heads, queries, keys).

Source: conventions.md §2.6 ((N, S) padding mask passed to SDPA as attn_mask: an error, or
silently wrong when N == L) and §5 item 6; lucidrains/x-transformers#172 (which axes a
padding mask must have).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

BLANK = 0


def lengths_to_padding_mask(lengths, max_len):
    """(batch, max_len) bool, True = padding (fairseq convention)."""
    return torch.arange(max_len, device=lengths.device)[None, :] >= lengths[:, None]


def utterance_cmvn(x, lengths, eps=1e-5):
    """Normalise each utterance with the mean/std of its real frames; padding stays zero."""
    pad = lengths_to_padding_mask(lengths, x.shape[1])
    weights = (~pad)[..., None].to(x.dtype)
    count = weights.sum(1, keepdim=True).clamp(min=1.0)
    mean = (x * weights).sum(1, keepdim=True) / count
    var = ((x - mean) ** 2 * weights).sum(1, keepdim=True) / count
    x = (x - mean) / (var + eps).sqrt()
    return x.masked_fill(pad[..., None], 0.0)


def spec_augment(x, lengths, num_time_masks=2, max_width=4, num_freq_masks=1, max_freq=3):
    """Zero random time spans (inside each utterance) and frequency bands."""
    b, t, f = x.shape
    idx = torch.arange(t)[None, :]
    for _ in range(num_time_masks):
        width = torch.randint(0, max_width + 1, (b,))
        start = (torch.rand(b) * (lengths - width).clamp(min=1)).long()
        span = (idx >= start[:, None]) & (idx < (start + width)[:, None])
        x = x.masked_fill(span[..., None], 0.0)
    fidx = torch.arange(f)[None, :]
    for _ in range(num_freq_masks):
        width = torch.randint(0, max_freq + 1, (b,))
        start = (torch.rand(b) * (f - width)).long()
        band = (fidx >= start[:, None]) & (fidx < (start + width)[:, None])
        x = x.masked_fill(band[:, None, :], 0.0)
    return x


class Conv2dSubsampling4(nn.Module):
    """Two stride-2 3x3 convolutions without padding: frames -> (frames - 3) // 2 + 1, twice."""

    def __init__(self, idim, odim):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, odim, 3, 2), nn.ReLU(), nn.Conv2d(odim, odim, 3, 2), nn.ReLU())
        self.out = nn.Linear(odim * (((idim - 1) // 2 - 1) // 2), odim)

    @staticmethod
    def output_lengths(lengths):
        return ((lengths - 3) // 2 + 1 - 3) // 2 + 1

    def forward(self, x, lengths):
        x = self.conv(x[:, None])
        b, c, t, f = x.shape
        return self.out(x.transpose(1, 2).reshape(b, t, c * f)), self.output_lengths(lengths)


def sinusoidal_positions(length, dim):
    pos = torch.arange(length, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    pe = torch.zeros(length, dim)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)
    return pe


class FeedForward(nn.Module):
    def __init__(self, dim, mult=4, dropout=0.1):
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim * mult), nn.SiLU(), nn.Dropout(dropout), nn.Linear(dim * mult, dim), nn.Dropout(dropout))

    def forward(self, x):
        return self.net(x)


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, dim, heads, dropout=0.1):
        super().__init__()
        self.heads = heads
        self.dropout = dropout
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x, lengths):
        b, t, d = x.shape
        frame_keep = torch.arange(t, device=x.device)[None, :] < lengths[:, None]
        q, k, v = self.qkv(self.norm(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=frame_keep[:, None, None, :], dropout_p=self.dropout if self.training else 0.0)
        return self.out(out.transpose(1, 2).reshape(b, t, d))


class ConvolutionModule(nn.Module):
    def __init__(self, dim, kernel_size=7, dropout=0.1):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.pointwise_in = nn.Conv1d(dim, 2 * dim, 1)
        self.depthwise = nn.Conv1d(dim, dim, kernel_size, padding=kernel_size // 2, groups=dim)
        self.depthwise_norm = nn.LayerNorm(dim)
        self.pointwise_out = nn.Conv1d(dim, dim, 1)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, lengths):
        pad = lengths_to_padding_mask(lengths, x.shape[1])
        h = F.glu(self.pointwise_in(self.norm(x).transpose(1, 2)), dim=1)
        h = h.masked_fill(pad[:, None, :], 0.0)
        h = self.depthwise(h).transpose(1, 2)
        h = F.silu(self.depthwise_norm(h)).transpose(1, 2)
        return self.dropout(self.pointwise_out(h).transpose(1, 2))


class ConformerBlock(nn.Module):
    def __init__(self, dim, heads, kernel_size=7, dropout=0.1):
        super().__init__()
        self.ff1 = FeedForward(dim, dropout=dropout)
        self.mhsa = MultiHeadSelfAttention(dim, heads, dropout)
        self.conv = ConvolutionModule(dim, kernel_size, dropout)
        self.ff2 = FeedForward(dim, dropout=dropout)
        self.final_norm = nn.LayerNorm(dim)

    def forward(self, x, lengths):
        x = x + 0.5 * self.ff1(x)
        x = x + self.mhsa(x, lengths)
        x = x + self.conv(x, lengths)
        x = x + 0.5 * self.ff2(x)
        return self.final_norm(x)


class ConformerCTC(nn.Module):
    def __init__(self, n_mels=20, dim=48, heads=4, num_blocks=2, vocab_size=12):
        super().__init__()
        self.subsampling = Conv2dSubsampling4(n_mels, dim)
        self.register_buffer("pe", sinusoidal_positions(512, dim), persistent=False)
        self.blocks = nn.ModuleList(ConformerBlock(dim, heads) for _ in range(num_blocks))
        self.ctc_head = nn.Linear(dim, vocab_size)

    def forward(self, feats, lengths):
        feats = utterance_cmvn(feats, lengths)
        if self.training:
            feats = spec_augment(feats, lengths)
        x, out_lengths = self.subsampling(feats, lengths)
        x = x * math.sqrt(x.shape[-1]) + self.pe[: x.shape[1]]
        for block in self.blocks:
            x = block(x, out_lengths)
        x = x.masked_fill(lengths_to_padding_mask(out_lengths, x.shape[1])[..., None], 0.0)
        return self.ctc_head(x).log_softmax(dim=-1), out_lengths

    def ctc_loss(self, feats, lengths, targets, target_lengths):
        log_probs, out_lengths = self(feats, lengths)
        return F.ctc_loss(log_probs.transpose(0, 1), targets, out_lengths, target_lengths, blank=BLANK, zero_infinity=True)

    @torch.no_grad()
    def greedy_decode(self, feats, lengths):
        log_probs, out_lengths = self(feats, lengths)
        hyps = []
        for best, n in zip(log_probs.argmax(-1), out_lengths.tolist()):
            best = torch.unique_consecutive(best[:n])
            hyps.append([tok for tok in best.tolist() if tok != BLANK])
        return hyps


def pad_batch(utterances):
    lengths = torch.tensor([u.shape[0] for u in utterances])
    feats = torch.zeros(len(utterances), int(lengths.max()), utterances[0].shape[1])
    for i, u in enumerate(utterances):
        feats[i, : u.shape[0]] = u
    return feats, lengths


if __name__ == "__main__":
    torch.manual_seed(0)
    model = ConformerCTC().eval()

    # four utterances whose longest one has 4 frames after subsampling (batch == frames)
    utts = [torch.randn(n, 20) for n in (19, 15, 12, 17)]
    feats, lengths = pad_batch(utts)
    with torch.no_grad():
        log_probs, out_lengths = model(feats, lengths)
        alone, _ = model(utts[1][None], lengths[1:2])
    n = int(out_lengths[1])
    print("subsampled lengths", out_lengths.tolist())
    print("utterance 1: batched vs alone max |diff| =", (log_probs[1, :n] - alone[0, :n]).abs().max().item())

    # three longer utterances (batch != frames)
    utts = [torch.randn(n, 20) for n in (40, 33, 25)]
    feats, lengths = pad_batch(utts)
    targets = torch.tensor([[3, 4, 5], [6, 7, 0], [8, 0, 0]])
    target_lengths = torch.tensor([3, 2, 1])
    try:
        model.train()
        loss = model.ctc_loss(feats, lengths, targets, target_lengths)
        loss.backward()
        print("ctc loss", round(loss.item(), 4))
        model.eval()
        print("hypotheses", model.greedy_decode(feats, lengths))
    except RuntimeError as err:
        print("forward failed:", str(err).splitlines()[0])
