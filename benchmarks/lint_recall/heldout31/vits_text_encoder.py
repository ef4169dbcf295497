"""VITS / Glow-TTS text encoder and duration-based alignment written the way jaywalnut310/vits
writes them (attentions.py, commons.py, models.py): channel-first tensors, float ``x_mask`` from
``sequence_mask``, the ``attn_mask`` outer product, FFN convolutions that re-apply the mask, a
duration predictor, and ``generate_path`` expanding the prior over the frames at inference.

Source: pytorch/pytorch#103749, Biohub/esm#299, conventions.md §2.3
"""
import math

import torch
import torch.nn.functional as F
from torch import nn


def sequence_mask(length, max_length=None):
    max_length = int(length.max()) if max_length is None else max_length
    x = torch.arange(max_length, dtype=length.dtype, device=length.device)
    return x.unsqueeze(0) < length.unsqueeze(1)


def generate_path(duration, mask):
    b, _, t_y, t_x = mask.shape
    cum_duration = torch.cumsum(duration, -1)
    path = sequence_mask(cum_duration.view(b * t_x), t_y).to(mask.dtype).view(b, t_x, t_y)
    path = path - F.pad(path, [0, 0, 1, 0, 0, 0])[:, :-1]
    return path.unsqueeze(1).transpose(2, 3) * mask


class MultiHeadAttention(nn.Module):
    def __init__(self, channels, n_heads, p_dropout=0.0):
        super().__init__()
        self.n_heads, self.k_channels = n_heads, channels // n_heads
        self.conv_q, self.conv_k = nn.Conv1d(channels, channels, 1), nn.Conv1d(channels, channels, 1)
        self.conv_v, self.conv_o = nn.Conv1d(channels, channels, 1), nn.Conv1d(channels, channels, 1)
        self.drop = nn.Dropout(p_dropout)

    def forward(self, x, c, attn_mask=None):
        b, d, t_s = c.size()
        t_t = x.size(2)
        query = self.conv_q(x).view(b, self.n_heads, self.k_channels, t_t).transpose(2, 3)
        key = self.conv_k(c).view(b, self.n_heads, self.k_channels, t_s).transpose(2, 3)
        value = self.conv_v(c).view(b, self.n_heads, self.k_channels, t_s).transpose(2, 3)
        scores = torch.matmul(query / math.sqrt(self.k_channels), key.transpose(-2, -1))
        if attn_mask is not None:
            scores = scores.masked_fill(attn_mask == 0, float("-inf"))  # expect: MC507 vits
        p_attn = self.drop(F.softmax(scores, dim=-1))
        output = torch.matmul(p_attn, value).transpose(2, 3).contiguous().view(b, d, t_t)
        return self.conv_o(output)


class FFN(nn.Module):
    def __init__(self, channels, filter_channels, kernel_size):
        super().__init__()
        self.conv_1 = nn.Conv1d(channels, filter_channels, kernel_size, padding=kernel_size // 2)
        self.conv_2 = nn.Conv1d(filter_channels, channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x, x_mask):
        x = torch.relu(self.conv_1(x * x_mask))
        return self.conv_2(x * x_mask) * x_mask


class Encoder(nn.Module):
    def __init__(self, hidden_channels, filter_channels, n_heads, n_layers, kernel_size=3):
        super().__init__()
        self.attn_layers = nn.ModuleList(MultiHeadAttention(hidden_channels, n_heads) for _ in range(n_layers))
        self.ffn_layers = nn.ModuleList(FFN(hidden_channels, filter_channels, kernel_size) for _ in range(n_layers))
        self.norm_layers_1 = nn.ModuleList(nn.LayerNorm(hidden_channels) for _ in range(n_layers))
        self.norm_layers_2 = nn.ModuleList(nn.LayerNorm(hidden_channels) for _ in range(n_layers))

    def forward(self, x, x_mask):
        attn_mask = x_mask.unsqueeze(2) * x_mask.unsqueeze(-1)
        x = x * x_mask
        for attn, ffn, norm_1, norm_2 in zip(self.attn_layers, self.ffn_layers, self.norm_layers_1, self.norm_layers_2):
            x = norm_1((x + attn(x, x, attn_mask)).transpose(1, -1)).transpose(1, -1)
            x = norm_2((x + ffn(x, x_mask)).transpose(1, -1)).transpose(1, -1)
        return x * x_mask


class TextEncoder(nn.Module):
    def __init__(self, n_vocab, out_channels=8, hidden_channels=32, filter_channels=64, n_heads=2, n_layers=2):
        super().__init__()
        self.hidden_channels = hidden_channels
        self.emb = nn.Embedding(n_vocab, hidden_channels)
        self.encoder = Encoder(hidden_channels, filter_channels, n_heads, n_layers)
        self.proj = nn.Conv1d(hidden_channels, out_channels * 2, 1)
        self.dp = nn.Sequential(nn.Conv1d(hidden_channels, filter_channels, 3, padding=1), nn.ReLU(),
                                nn.Conv1d(filter_channels, 1, 1))

    def forward(self, x, x_lengths):
        x = (self.emb(x) * math.sqrt(self.hidden_channels)).transpose(1, -1)
        x_mask = torch.unsqueeze(sequence_mask(x_lengths, x.size(2)), 1).to(x.dtype)
        x = self.encoder(x * x_mask, x_mask)
        m, logs = torch.split(self.proj(x) * x_mask, self.proj.out_channels // 2, dim=1)
        logw = self.dp(x.detach() * x_mask) * x_mask
        return m, logs, logw, x_mask


@torch.no_grad()
def infer_prior(text_encoder, x, x_lengths, length_scale=1.0):
    m_p, logs_p, logw, x_mask = text_encoder(x, x_lengths)
    w_ceil = torch.ceil(torch.exp(logw) * x_mask * length_scale)
    y_lengths = torch.clamp_min(torch.sum(w_ceil, [1, 2]), 1).long()
    y_mask = torch.unsqueeze(sequence_mask(y_lengths, None), 1).to(x_mask.dtype)
    attn_mask = torch.unsqueeze(x_mask, 2) * torch.unsqueeze(y_mask, -1)
    attn = generate_path(w_ceil, attn_mask)
    m_p = torch.matmul(attn.squeeze(1), m_p.transpose(1, 2)).transpose(1, 2)
    logs_p = torch.matmul(attn.squeeze(1), logs_p.transpose(1, 2)).transpose(1, 2)
    return m_p, logs_p, y_mask


if __name__ == "__main__":
    torch.manual_seed(0)
    enc = TextEncoder(n_vocab=30).eval()
    phonemes, lengths = torch.tensor([[3, 8, 1, 17, 5, 9, 12], [4, 22, 6, 11, 0, 0, 0]]), torch.tensor([7, 4])
    with torch.no_grad():
        m, logs, logw, x_mask = enc(phonemes, lengths)
        print("NaN in prior means:", torch.isnan(m).any(dim=(1, 2)).tolist())
        m_alone = enc(phonemes[1:, :4], lengths[1:])[0]
        print("padded item batched vs alone:", (m[1, :, :4] - m_alone[0]).abs().max().item())
        m_p, logs_p, y_mask = infer_prior(enc, phonemes, lengths)
        print("frames per item:", y_mask.sum(dim=(1, 2)).tolist(), "NaN in expanded prior:", torch.isnan(m_p).any().item())
