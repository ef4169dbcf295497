"""Grad-TTS-style text-to-speech: a phoneme encoder predicts an average mel per phoneme and
durations, the averages are spread over frames, and a score-based decoder denoises the mel
spectrogram from mu + noise with a reverse SDE solver.

Source: hyunwoongko/transformer PR #40; bentrevett/pytorch-seq2seq#96
"""
import math
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD_ID = 0
PHONEMES = ["<pad>"] + "AA AE AH AO AW AY B CH D DH EH ER EY F G HH IH IY JH K L M N NG OW OY P R S SH T TH UH UW V W Y Z ZH".split()
SYMBOL_TO_ID = {p: i for i, p in enumerate(PHONEMES)}


def sequence_mask(length, max_length=None):
    max_length = max_length or int(length.max())
    return torch.arange(max_length, device=length.device)[None, :] < length[:, None]


def phonemes_to_batch(utterances):
    ids = [torch.tensor([SYMBOL_TO_ID[p] for p in u.split()]) for u in utterances]
    x_lengths = torch.tensor([len(i) for i in ids])
    return nn.utils.rnn.pad_sequence(ids, batch_first=True, padding_value=PAD_ID), x_lengths


class MultiHeadAttention(nn.Module):
    def __init__(self, channels, n_heads, p_dropout=0.0):
        super().__init__()
        self.n_heads, self.k_channels = n_heads, channels // n_heads
        self.conv_q, self.conv_k, self.conv_v = (nn.Conv1d(channels, channels, 1) for _ in range(3))
        self.conv_o = nn.Conv1d(channels, channels, 1)
        self.drop = nn.Dropout(p_dropout)

    def forward(self, x, attn_mask):
        b, d, t = x.shape
        q, k, v = (conv(x).view(b, self.n_heads, self.k_channels, t).transpose(2, 3) for conv in (self.conv_q, self.conv_k, self.conv_v))
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.k_channels)
        scores = scores.masked_fill(attn_mask == 0, -1e4)
        p_attn = self.drop(F.softmax(scores, dim=-1))
        return self.conv_o(torch.matmul(p_attn, v).transpose(2, 3).contiguous().view(b, d, t))


class LayerNorm(nn.LayerNorm):
    def forward(self, x):
        return super().forward(x.transpose(1, -1)).transpose(1, -1)


class TextEncoder(nn.Module):
    def __init__(self, n_vocab, n_feats=8, n_channels=32, n_heads=2, n_layers=2):
        super().__init__()
        self.emb = nn.Embedding(n_vocab, n_channels, padding_idx=PAD_ID)
        self.prenet = nn.Conv1d(n_channels, n_channels, 5, padding=2)
        self.attn_layers = nn.ModuleList(MultiHeadAttention(n_channels, n_heads) for _ in range(n_layers))
        self.norms = nn.ModuleList(LayerNorm(n_channels) for _ in range(n_layers))
        self.ffn = nn.ModuleList(nn.Conv1d(n_channels, n_channels, 3, padding=1) for _ in range(n_layers))
        self.proj_m = nn.Conv1d(n_channels, n_feats, 1)
        self.proj_w = nn.Sequential(nn.Conv1d(n_channels, n_channels, 3, padding=1), nn.ReLU(), nn.Conv1d(n_channels, 1, 1))

    def forward(self, x, x_lengths):
        x_mask = sequence_mask(x_lengths, x.size(1)).unsqueeze(1).to(torch.float32)
        src_mask = (x != PAD_ID).unsqueeze(1).unsqueeze(3)  # expect: MC514 queryaxis
        h = self.emb(x).transpose(1, 2) * x_mask
        h = F.relu(self.prenet(h)) * x_mask
        for attn, norm, ffn in zip(self.attn_layers, self.norms, self.ffn):
            h = norm(h + attn(h, src_mask)) * x_mask
            h = (h + F.relu(ffn(h))) * x_mask
        return self.proj_m(h) * x_mask, self.proj_w(h.detach()) * x_mask, x_mask


def generate_path(duration, mask):
    b, t_x, t_y = mask.shape
    cum = torch.cumsum(duration, dim=1)
    frames = torch.arange(t_y, device=duration.device)[None, None, :]
    path = (frames < cum[:, :, None]) & (frames >= (cum - duration)[:, :, None])
    return path.to(mask.dtype) * mask


class ScoreEstimator(nn.Module):
    def __init__(self, n_feats=8, dim=32, n_heads=2):
        super().__init__()
        self.inp = nn.Conv1d(2 * n_feats, dim, 3, padding=1)
        self.t_mlp = nn.Sequential(nn.Linear(1, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.qkv = nn.Linear(dim, 3 * dim)
        self.n_heads = n_heads
        self.out = nn.Conv1d(dim, n_feats, 3, padding=1)

    def forward(self, x, mask, mu, t):
        h = self.inp(torch.cat([x, mu], dim=1)) * mask + self.t_mlp(t.view(-1, 1))[:, :, None]
        frames = h.transpose(1, 2)
        q, k, v = self.qkv(frames).unflatten(-1, (3, self.n_heads, -1)).permute(2, 0, 3, 1, 4)
        frame_keep = mask.bool()[:, None, :, :]
        frames = frames + F.scaled_dot_product_attention(q, k, v, attn_mask=frame_keep).transpose(1, 2).flatten(2)
        return self.out(F.silu(frames.transpose(1, 2))) * mask


class GradTTSScheduler:
    def __init__(self, beta_min=0.05, beta_max=20.0):
        self.beta_min, self.beta_max = beta_min, beta_max

    def beta(self, t):
        return self.beta_min + (self.beta_max - self.beta_min) * t

    def step(self, score, xt, mu, t, h, mask):
        beta_t = self.beta(t)
        return (xt - 0.5 * (mu - xt - score) * beta_t * h) * mask


class GradTTSPipeline:
    def __init__(self, encoder, decoder, scheduler, n_feats=8):
        self.encoder, self.decoder, self.scheduler, self.n_feats = encoder, decoder, scheduler, n_feats

    @torch.no_grad()
    def __call__(self, utterances, n_timesteps=10, temperature=1.5, length_scale=1.0, generator=None):
        x, x_lengths = phonemes_to_batch(utterances)
        mu_x, logw, x_mask = self.encoder(x, x_lengths)
        w_ceil = torch.ceil(torch.exp(logw) * x_mask * length_scale).clamp(min=1) * x_mask
        y_lengths = w_ceil.sum(dim=[1, 2]).long()
        y_mask = sequence_mask(y_lengths, int(y_lengths.max())).unsqueeze(1).to(x_mask.dtype)
        attn_mask = x_mask.transpose(1, 2) * y_mask
        attn = generate_path(w_ceil.squeeze(1).long(), attn_mask)
        mu_y = torch.matmul(attn.transpose(1, 2), mu_x.transpose(1, 2)).transpose(1, 2)
        z = mu_y + torch.randn(mu_y.shape, generator=generator) / temperature
        h = 1.0 / n_timesteps
        xt = z * y_mask
        for i in range(n_timesteps):
            t = torch.full((z.shape[0],), 1.0 - (i + 0.5) * h)
            score = self.decoder(xt, y_mask, mu_y, t)
            xt = self.scheduler.step(score, xt, mu_y, t[:, None, None], h, y_mask)
        return SimpleNamespace(mel=xt, mel_lengths=y_lengths, mu=mu_y)


if __name__ == "__main__":
    torch.manual_seed(0)
    pipe = GradTTSPipeline(TextEncoder(len(PHONEMES)), ScoreEstimator(), GradTTSScheduler())
    out = pipe(["HH AH L OW W ER L D", "G UH D M AO R N IH NG EH V R IY W AH N", "Y EH S"], generator=torch.Generator().manual_seed(0))
    assert (out.mel[2, :, int(out.mel_lengths[2]):] == 0).all()
    print(tuple(out.mel.shape), out.mel_lengths.tolist(), bool(torch.isfinite(out.mel).all()))
