"""VITS text encoder, monotonic alignment search and duration-based expansion.

The prior side of VITS: a transformer text encoder with windowed relative
attention produces per-phoneme means and log-scales, monotonic alignment search
aligns them to the latent frames during training, a deterministic duration
predictor learns the alignment's durations, and at inference the predicted
durations expand the phoneme statistics to frames through `generate_path`.

Source: TransformerLensOrg/TransformerLens PR #366 (conventions.md section 3 item 20);
conventions.md section 5 item 5.
"""
import math

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F


def sequence_mask(length, max_length=None):
    if max_length is None:
        max_length = length.max()
    x = torch.arange(max_length, dtype=length.dtype, device=length.device)
    return x.unsqueeze(0) < length.unsqueeze(1)


def generate_path(duration, mask):
    b, _, t_y, t_x = mask.shape
    cum_duration = torch.cumsum(duration, -1)
    path = sequence_mask(cum_duration.view(b * t_x), t_y).to(mask.dtype).view(b, t_x, t_y)
    path = path - F.pad(path, [0, 0, 1, 0, 0, 0])[:, :-1]
    return path.unsqueeze(1).transpose(2, 3) * mask


def maximum_path(neg_cent, mask):
    values = neg_cent.detach().cpu().numpy().astype(np.float32)
    path = np.zeros_like(values, dtype=np.int32)
    t_ys, t_xs = mask.sum(1)[:, 0].long().tolist(), mask.sum(2)[:, 0].long().tolist()
    for b, (t_y, t_x) in enumerate(zip(t_ys, t_xs)):
        v = np.full((t_y, t_x), -np.inf, dtype=np.float32)
        for y in range(t_y):
            for x in range(max(0, t_x + y - t_y), min(t_x, y + 1)):
                prev = 0.0 if y == 0 else max(v[y - 1, x], v[y - 1, x - 1] if x > 0 else -np.inf)
                v[y, x] = values[b, y, x] + prev if (y > 0 or x == 0) else -np.inf
        x = t_x - 1
        for y in range(t_y - 1, -1, -1):
            path[b, y, x] = 1
            if x != 0 and (x == y or v[y - 1, x] < v[y - 1, x - 1]):
                x -= 1
    return torch.from_numpy(path).to(device=neg_cent.device, dtype=neg_cent.dtype)


class LayerNorm(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.gamma, self.beta = nn.Parameter(torch.ones(channels)), nn.Parameter(torch.zeros(channels))

    def forward(self, x):
        return F.layer_norm(x.transpose(1, -1), self.gamma.shape, self.gamma, self.beta, 1e-5).transpose(1, -1)


class MultiHeadAttention(nn.Module):
    def __init__(self, channels, n_heads, window_size=4):
        super().__init__()
        self.n_heads, self.k_channels, self.window_size = n_heads, channels // n_heads, window_size
        self.conv_q, self.conv_k = nn.Conv1d(channels, channels, 1), nn.Conv1d(channels, channels, 1)
        self.conv_v, self.conv_o = nn.Conv1d(channels, channels, 1), nn.Conv1d(channels, channels, 1)
        rel_stddev = self.k_channels ** -0.5
        self.emb_rel_k = nn.Parameter(torch.randn(1, window_size * 2 + 1, self.k_channels) * rel_stddev)
        self.emb_rel_v = nn.Parameter(torch.randn(1, window_size * 2 + 1, self.k_channels) * rel_stddev)

    def forward(self, x, c, attn_mask=None):
        q, k, v = self.conv_q(x), self.conv_k(c), self.conv_v(c)
        b, d, t_s, t_t = (*k.size(), q.size(2))
        query = q.view(b, self.n_heads, self.k_channels, t_t).transpose(2, 3) / math.sqrt(self.k_channels)
        key = k.view(b, self.n_heads, self.k_channels, t_s).transpose(2, 3)
        value = v.view(b, self.n_heads, self.k_channels, t_s).transpose(2, 3)
        scores = torch.matmul(query, key.transpose(-2, -1))
        rel_logits = torch.matmul(query, self._get_relative_embeddings(self.emb_rel_k, t_s).unsqueeze(0).transpose(-2, -1))
        scores = scores + self._relative_position_to_absolute_position(rel_logits)
        if attn_mask is not None:
            scores = scores.masked_fill(attn_mask == 0, -1e-4)  # expect: MC516 weak
        p_attn = F.softmax(scores, dim=-1)
        output = torch.matmul(p_attn, value)
        relative_weights = self._absolute_position_to_relative_position(p_attn)
        output = output + torch.matmul(relative_weights, self._get_relative_embeddings(self.emb_rel_v, t_s).unsqueeze(0))
        return self.conv_o(output.transpose(2, 3).contiguous().view(b, d, t_t))

    def _get_relative_embeddings(self, relative_embeddings, length):
        pad_length = max(length - (self.window_size + 1), 0)
        slice_start_position = max((self.window_size + 1) - length, 0)
        padded = F.pad(relative_embeddings, [0, 0, pad_length, pad_length, 0, 0]) if pad_length > 0 else relative_embeddings
        return padded[:, slice_start_position : slice_start_position + 2 * length - 1]

    def _relative_position_to_absolute_position(self, x):
        batch, heads, length, _ = x.size()
        x_flat = F.pad(F.pad(x, [0, 1]).view([batch, heads, length * 2 * length]), [0, length - 1])
        return x_flat.view([batch, heads, length + 1, 2 * length - 1])[:, :, :length, length - 1 :]

    def _absolute_position_to_relative_position(self, x):
        batch, heads, length, _ = x.size()
        x_flat = F.pad(F.pad(x, [0, length - 1]).view([batch, heads, length ** 2 + length * (length - 1)]), [length, 0])
        return x_flat.view([batch, heads, length, 2 * length])[:, :, :, 1:]


class Encoder(nn.Module):
    def __init__(self, hidden_channels, filter_channels, n_heads, n_layers, kernel_size=3):
        super().__init__()
        self.attn_layers = nn.ModuleList(MultiHeadAttention(hidden_channels, n_heads) for _ in range(n_layers))
        self.norm_layers_1 = nn.ModuleList(LayerNorm(hidden_channels) for _ in range(n_layers))
        self.ffn_1 = nn.ModuleList(nn.Conv1d(hidden_channels, filter_channels, kernel_size, padding=kernel_size // 2) for _ in range(n_layers))
        self.ffn_2 = nn.ModuleList(nn.Conv1d(filter_channels, hidden_channels, kernel_size, padding=kernel_size // 2) for _ in range(n_layers))
        self.norm_layers_2 = nn.ModuleList(LayerNorm(hidden_channels) for _ in range(n_layers))

    def forward(self, x, x_mask):
        attn_mask = x_mask.unsqueeze(2) * x_mask.unsqueeze(-1)
        x = x * x_mask
        for i in range(len(self.attn_layers)):
            x = self.norm_layers_1[i](x + self.attn_layers[i](x, x, attn_mask))
            y = self.ffn_2[i](torch.relu(self.ffn_1[i](x * x_mask)) * x_mask) * x_mask
            x = self.norm_layers_2[i](x + y)
        return x * x_mask


class TextEncoder(nn.Module):
    def __init__(self, n_vocab, out_channels=8, hidden_channels=32, filter_channels=64, n_heads=2, n_layers=2):
        super().__init__()
        self.hidden_channels, self.out_channels = hidden_channels, out_channels
        self.emb = nn.Embedding(n_vocab, hidden_channels)
        nn.init.normal_(self.emb.weight, 0.0, hidden_channels ** -0.5)
        self.encoder = Encoder(hidden_channels, filter_channels, n_heads, n_layers)
        self.proj = nn.Conv1d(hidden_channels, out_channels * 2, 1)

    def forward(self, x, x_lengths):
        x = torch.transpose(self.emb(x) * math.sqrt(self.hidden_channels), 1, -1)
        x_mask = torch.unsqueeze(sequence_mask(x_lengths, x.size(2)), 1).to(x.dtype)
        x = self.encoder(x * x_mask, x_mask)
        m, logs = torch.split(self.proj(x) * x_mask, self.out_channels, dim=1)
        return x, m, logs, x_mask


class DurationPredictor(nn.Module):
    def __init__(self, in_channels=32, filter_channels=32, kernel_size=3):
        super().__init__()
        self.conv_1, self.norm_1 = nn.Conv1d(in_channels, filter_channels, kernel_size, padding=kernel_size // 2), LayerNorm(filter_channels)
        self.conv_2, self.norm_2 = nn.Conv1d(filter_channels, filter_channels, kernel_size, padding=kernel_size // 2), LayerNorm(filter_channels)
        self.proj = nn.Conv1d(filter_channels, 1, 1)

    def forward(self, x, x_mask):
        x = self.norm_1(torch.relu(self.conv_1(x.detach() * x_mask)))
        x = self.norm_2(torch.relu(self.conv_2(x * x_mask)))
        return self.proj(x * x_mask) * x_mask


if __name__ == "__main__":
    torch.manual_seed(0)
    enc_p, dp = TextEncoder(n_vocab=40), DurationPredictor()
    opt = torch.optim.AdamW(list(enc_p.parameters()) + list(dp.parameters()), lr=2e-4)
    x, x_lengths = torch.randint(1, 40, (2, 7)), torch.tensor([7, 5])
    z_p, y_lengths = torch.randn(2, 8, 20), torch.tensor([20, 14])
    for step in range(2):
        h, m_p, logs_p, x_mask = enc_p(x, x_lengths)
        y_mask = sequence_mask(y_lengths, z_p.size(2)).unsqueeze(1).to(x_mask.dtype)
        s_p_sq_r = torch.exp(-2 * logs_p)
        neg_cent = torch.sum(-0.5 * math.log(2 * math.pi) - logs_p, [1], keepdim=True) + torch.matmul(-0.5 * (z_p ** 2).transpose(1, 2), s_p_sq_r) \
            + torch.matmul(z_p.transpose(1, 2), m_p * s_p_sq_r) + torch.sum(-0.5 * (m_p ** 2) * s_p_sq_r, [1], keepdim=True)
        attn_mask = torch.unsqueeze(x_mask, 2) * torch.unsqueeze(y_mask, -1)
        attn = maximum_path(neg_cent, attn_mask.squeeze(1)).unsqueeze(1).detach()
        logw_ = torch.log(attn.sum(2) + 1e-6) * x_mask
        l_length = torch.sum((dp(h, x_mask) - logw_) ** 2) / torch.sum(x_mask)
        m_frames = torch.matmul(attn.squeeze(1), m_p.transpose(1, 2)).transpose(1, 2)
        logs_frames = torch.matmul(attn.squeeze(1), logs_p.transpose(1, 2)).transpose(1, 2)
        l_kl = torch.sum((logs_frames + 0.5 * torch.exp(-2 * logs_frames) * (z_p - m_frames) ** 2) * y_mask) / torch.sum(y_mask)
        opt.zero_grad()
        (l_length + l_kl).backward()
        opt.step()
        print(f"step {step} prior nll {l_kl.item():.4f} duration {l_length.item():.4f}")
    with torch.no_grad():
        h, m_p, logs_p, x_mask = enc_p(x, x_lengths)
        w_ceil = torch.ceil(torch.exp(dp(h, x_mask)) * x_mask * 1.0)
        y_lengths = torch.clamp_min(torch.sum(w_ceil, [1, 2]), 1).long()
        y_mask = torch.unsqueeze(sequence_mask(y_lengths, None), 1).to(x_mask.dtype)
        path = generate_path(w_ceil, torch.unsqueeze(x_mask, 2) * torch.unsqueeze(y_mask, -1))
        m_frames = torch.matmul(path.squeeze(1), m_p.transpose(1, 2)).transpose(1, 2)
    print("frames per utterance", y_lengths.tolist(), "prior", tuple(m_frames.shape))
