"""PatchTST forecaster in the style of yuqinie98/PatchTST, for series of different lengths.

Channel-independent patching (each variable is its own sequence of patches),
RevIN instance normalisation, a TSTEncoder with residual attention scores, and a
flatten head. Short series are left-padded to ``context_window`` and carry a
``past_observed_mask`` as in Hugging Face's PatchTST; patches made only of
padding are hidden from attention through ``key_padding_mask``.

Source: hyunwoongko/transformer PR #40, bentrevett/pytorch-seq2seq#96, conventions.md §3 item 21
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class PatchTSTConfig:
    c_in: int = 4
    context_window: int = 64
    target_window: int = 16
    patch_len: int = 8
    stride: int = 8
    n_layers: int = 2
    n_heads: int = 4
    d_model: int = 32
    d_ff: int = 64
    dropout: float = 0.1
    attn_dropout: float = 0.0
    res_attention: bool = True

    @property
    def patch_num(self) -> int:
        return (self.context_window - self.patch_len) // self.stride + 1


class RevIN(nn.Module):
    def __init__(self, num_features, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.affine_weight = nn.Parameter(torch.ones(num_features))
        self.affine_bias = nn.Parameter(torch.zeros(num_features))

    def norm(self, x, observed):
        weight = observed.to(x.dtype)
        count = weight.sum(dim=1, keepdim=True).clamp(min=1.0)
        self.mean = ((x * weight).sum(dim=1, keepdim=True) / count).detach()
        var = (((x - self.mean) * weight) ** 2).sum(dim=1, keepdim=True) / count
        self.stdev = torch.sqrt(var + self.eps).detach()
        x = (x - self.mean) / self.stdev * self.affine_weight + self.affine_bias
        return x.masked_fill(~observed, 0.0)

    def denorm(self, x):
        x = (x - self.affine_bias) / (self.affine_weight + self.eps * self.eps)
        return x * self.stdev + self.mean


class _ScaledDotProductAttention(nn.Module):
    def __init__(self, d_model, n_heads, attn_dropout=0.0, res_attention=False):
        super().__init__()
        self.attn_dropout = nn.Dropout(attn_dropout)
        self.res_attention = res_attention
        self.scale = (d_model // n_heads) ** -0.5

    def forward(self, q, k, v, prev=None, key_padding_mask=None):
        attn_scores = torch.matmul(q, k) * self.scale
        if prev is not None:
            attn_scores = attn_scores + prev
        if key_padding_mask is not None:
            attn_scores = attn_scores.masked_fill(key_padding_mask.unsqueeze(1).unsqueeze(3), -np.inf)  # expect: MC514 patchtst
        attn_weights = self.attn_dropout(F.softmax(attn_scores, dim=-1))
        output = torch.matmul(attn_weights, v)
        return output, attn_weights, attn_scores


class _MultiheadAttention(nn.Module):
    def __init__(self, d_model, n_heads, attn_dropout=0.0, proj_dropout=0.0, res_attention=False):
        super().__init__()
        self.n_heads = n_heads
        self.d_k = d_model // n_heads
        self.W_Q = nn.Linear(d_model, d_model)
        self.W_K = nn.Linear(d_model, d_model)
        self.W_V = nn.Linear(d_model, d_model)
        self.res_attention = res_attention
        self.sdp_attn = _ScaledDotProductAttention(d_model, n_heads, attn_dropout, res_attention)
        self.to_out = nn.Sequential(nn.Linear(d_model, d_model), nn.Dropout(proj_dropout))

    def forward(self, Q, K=None, V=None, prev=None, key_padding_mask=None):
        bs = Q.size(0)
        K = Q if K is None else K
        V = Q if V is None else V
        q_s = self.W_Q(Q).view(bs, -1, self.n_heads, self.d_k).transpose(1, 2)
        k_s = self.W_K(K).view(bs, -1, self.n_heads, self.d_k).permute(0, 2, 3, 1)
        v_s = self.W_V(V).view(bs, -1, self.n_heads, self.d_k).transpose(1, 2)
        output, attn_weights, attn_scores = self.sdp_attn(q_s, k_s, v_s, prev=prev, key_padding_mask=key_padding_mask)
        output = output.transpose(1, 2).contiguous().view(bs, -1, self.n_heads * self.d_k)
        return self.to_out(output), attn_weights, attn_scores


class TSTEncoderLayer(nn.Module):
    def __init__(self, cfg: PatchTSTConfig):
        super().__init__()
        self.res_attention = cfg.res_attention
        self.self_attn = _MultiheadAttention(cfg.d_model, cfg.n_heads, cfg.attn_dropout, cfg.dropout, cfg.res_attention)
        self.dropout_attn = nn.Dropout(cfg.dropout)
        self.norm_attn = nn.Sequential(Transpose(1, 2), nn.BatchNorm1d(cfg.d_model), Transpose(1, 2))
        self.ff = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_ff), nn.GELU(), nn.Dropout(cfg.dropout),
                                nn.Linear(cfg.d_ff, cfg.d_model))
        self.dropout_ffn = nn.Dropout(cfg.dropout)
        self.norm_ffn = nn.Sequential(Transpose(1, 2), nn.BatchNorm1d(cfg.d_model), Transpose(1, 2))

    def forward(self, src, prev=None, key_padding_mask=None):
        src2, attn, scores = self.self_attn(src, prev=prev, key_padding_mask=key_padding_mask)
        src = self.norm_attn(src + self.dropout_attn(src2))
        src = self.norm_ffn(src + self.dropout_ffn(self.ff(src)))
        return (src, scores) if self.res_attention else (src, None)


class Transpose(nn.Module):
    def __init__(self, *dims):
        super().__init__()
        self.dims = dims

    def forward(self, x):
        return x.transpose(*self.dims)


class PatchTST(nn.Module):
    def __init__(self, cfg: PatchTSTConfig):
        super().__init__()
        self.cfg = cfg
        self.revin_layer = RevIN(cfg.c_in)
        self.W_P = nn.Linear(cfg.patch_len, cfg.d_model)
        self.W_pos = nn.Parameter(torch.empty(cfg.patch_num, cfg.d_model).uniform_(-0.02, 0.02))
        self.dropout = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList([TSTEncoderLayer(cfg) for _ in range(cfg.n_layers)])
        self.flatten = nn.Flatten(start_dim=-2)
        self.head = nn.Linear(cfg.d_model * cfg.patch_num, cfg.target_window)

    def forward(self, past_values, past_observed_mask):
        cfg = self.cfg
        bs = past_values.size(0)
        z = self.revin_layer.norm(past_values, past_observed_mask.bool())
        z = z.permute(0, 2, 1)
        z = z.unfold(dimension=-1, size=cfg.patch_len, step=cfg.stride)
        observed_patches = past_observed_mask.permute(0, 2, 1).unfold(-1, cfg.patch_len, cfg.stride).any(-1)
        n_vars = z.shape[1]

        u = self.W_P(z).reshape(bs * n_vars, cfg.patch_num, cfg.d_model)
        u = self.dropout(u + self.W_pos)
        key_padding_mask = ~observed_patches.reshape(bs * n_vars, cfg.patch_num)

        scores = None
        for layer in self.layers:
            u, scores = layer(u, prev=scores, key_padding_mask=key_padding_mask)

        u = u.masked_fill(key_padding_mask.unsqueeze(-1), 0.0)
        u = u.reshape(bs, n_vars, cfg.patch_num, cfg.d_model)
        y = self.head(self.flatten(u)).permute(0, 2, 1)
        return self.revin_layer.denorm(y)


def left_pad_batch(series_list, context_window):
    bs, c = len(series_list), series_list[0].shape[1]
    values = torch.zeros(bs, context_window, c)
    observed = torch.zeros(bs, context_window, c, dtype=torch.long)
    for i, s in enumerate(series_list):
        s = s[-context_window:]
        values[i, context_window - len(s):] = s
        observed[i, context_window - len(s):] = 1
    return {"past_values": values, "past_observed_mask": observed}


def synthetic(cfg: PatchTSTConfig, n=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        length = cfg.stride * int(torch.randint(3, cfg.patch_num + 1, (1,), generator=g))
        t = torch.arange(length + cfg.target_window).float()[:, None]
        phase = torch.rand(1, cfg.c_in, generator=g) * 6.28
        s = torch.sin(t / 5.0 + phase) * (1 + i % 3) + 0.1 * torch.randn(len(t), cfg.c_in, generator=g)
        out.append((s[:length], s[length:]))
    return out


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = PatchTSTConfig()
    data = synthetic(cfg)
    batch = left_pad_batch([x for x, _ in data], cfg.context_window)
    target = torch.stack([y for _, y in data])
    model = PatchTST(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(20):
        model.train()
        loss = F.mse_loss(model(**batch), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("train mse", round(loss.item(), 4))

    model.eval()
    with torch.no_grad():
        pred = model(**batch)
        junk = dict(batch)
        junk["past_values"] = batch["past_values"] + (batch["past_observed_mask"] == 0) * 3.0
        moved = model(**junk)
        print("eval mse", round(F.mse_loss(pred, target).item(), 4),
              "non-finite:", (~torch.isfinite(pred)).sum().item(),
              "padding values changed:", (pred - moved).abs().max().item())
