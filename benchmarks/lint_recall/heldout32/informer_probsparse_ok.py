"""Informer long-sequence forecaster in the style of zhouhaoyi/Informer2020.

Encoder with ProbSparse self-attention and self-attention distilling (ConvLayer),
generative-style decoder fed with the last ``label_len`` known steps followed by
``pred_len`` zero placeholders, so the whole horizon comes out of one forward
pass. ``attn`` chooses ProbSparse or full attention for the self-attention
layers; the masks are the ``TriangularCausalMask`` and ``ProbMask`` classes.

Source: seed self_attention_mask_guide.txt §3 (generate_causal_mask, 常见误区), conventions.md §1 (direction cheat-sheet), pytorch/pytorch#103749
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class InformerConfig:
    enc_in: int = 3
    dec_in: int = 3
    c_out: int = 3
    seq_len: int = 48
    label_len: int = 24
    out_len: int = 12
    factor: int = 5
    d_model: int = 32
    n_heads: int = 4
    e_layers: int = 2
    d_layers: int = 1
    d_ff: int = 64
    dropout: float = 0.05
    attn: str = "prob"
    n_time_features: int = 4


class TriangularCausalMask:
    def __init__(self, B, L, device="cpu"):
        mask_shape = [B, 1, L, L]
        with torch.no_grad():
            self._mask = torch.triu(torch.ones(mask_shape, dtype=torch.bool), diagonal=1).to(device)

    @property
    def mask(self):
        return self._mask


class ProbMask:
    def __init__(self, B, H, L, index, scores, device="cpu"):
        _mask = torch.ones(L, scores.shape[-1], dtype=torch.bool).to(device).triu(1)
        _mask_ex = _mask[None, None, :].expand(B, H, L, scores.shape[-1])
        indicator = _mask_ex[torch.arange(B)[:, None, None], torch.arange(H)[None, :, None], index, :].to(device)
        self._mask = indicator.view(scores.shape).to(device)

    @property
    def mask(self):
        return self._mask


class FullAttention(nn.Module):
    def __init__(self, mask_flag=True, factor=5, scale=None, attention_dropout=0.1):
        super().__init__()
        self.scale = scale
        self.mask_flag = mask_flag
        self.dropout = nn.Dropout(attention_dropout)

    def forward(self, queries, keys, values, attn_mask):
        B, L, H, E = queries.shape
        scale = self.scale or 1.0 / math.sqrt(E)
        scores = torch.einsum("blhe,bshe->bhls", queries, keys)
        if self.mask_flag:
            if attn_mask is None:
                attn_mask = TriangularCausalMask(B, L, device=queries.device)
            scores = scores.masked_fill(attn_mask.mask, -np.inf)
        A = self.dropout(torch.softmax(scale * scores, dim=-1))
        return torch.einsum("bhls,bshd->blhd", A, values).contiguous()


class ProbAttention(nn.Module):
    def __init__(self, mask_flag=True, factor=5, scale=None, attention_dropout=0.1):
        super().__init__()
        self.factor = factor
        self.scale = scale
        self.mask_flag = mask_flag
        self.dropout = nn.Dropout(attention_dropout)

    def _prob_QK(self, Q, K, sample_k, n_top):
        B, H, L_K, E = K.shape
        _, _, L_Q, _ = Q.shape
        K_expand = K.unsqueeze(-3).expand(B, H, L_Q, L_K, E)
        index_sample = torch.randint(L_K, (L_Q, sample_k))
        K_sample = K_expand[:, :, torch.arange(L_Q).unsqueeze(1), index_sample, :]
        Q_K_sample = torch.matmul(Q.unsqueeze(-2), K_sample.transpose(-2, -1)).squeeze(-2)
        M = Q_K_sample.max(-1)[0] - torch.div(Q_K_sample.sum(-1), L_K)
        M_top = M.topk(n_top, sorted=False)[1]
        Q_reduce = Q[torch.arange(B)[:, None, None], torch.arange(H)[None, :, None], M_top, :]
        return torch.matmul(Q_reduce, K.transpose(-2, -1)), M_top

    def _get_initial_context(self, V, L_Q):
        B, H, L_V, D = V.shape
        if not self.mask_flag:
            V_sum = V.mean(dim=-2)
            return V_sum.unsqueeze(-2).expand(B, H, L_Q, V_sum.shape[-1]).clone()
        assert L_Q == L_V
        return V.cumsum(dim=-2) / torch.arange(1, L_V + 1, device=V.device)[:, None]

    def _update_context(self, context_in, V, scores, index, L_Q):
        B, H, L_V, D = V.shape
        if self.mask_flag:
            attn_mask = ProbMask(B, H, L_Q, index, scores, device=V.device)
            scores = scores.masked_fill(attn_mask.mask, -np.inf)
        attn = torch.softmax(scores, dim=-1)
        context_in[torch.arange(B)[:, None, None], torch.arange(H)[None, :, None], index, :] = \
            torch.matmul(attn, V).type_as(context_in)
        return context_in

    def forward(self, queries, keys, values, attn_mask):
        B, L_Q, H, D = queries.shape
        _, L_K, _, _ = keys.shape
        queries, keys, values = (t.transpose(2, 1) for t in (queries, keys, values))
        U_part = min(self.factor * int(np.ceil(np.log(L_K))), L_K)
        u = min(self.factor * int(np.ceil(np.log(L_Q))), L_Q)
        scores_top, index = self._prob_QK(queries, keys, sample_k=U_part, n_top=u)
        scores_top = scores_top * (self.scale or 1.0 / math.sqrt(D))
        context = self._get_initial_context(values, L_Q)
        context = self._update_context(context, values, scores_top, index, L_Q)
        return context.transpose(2, 1).contiguous()


ATTENTIONS = {"prob": ProbAttention, "full": FullAttention}


class AttentionLayer(nn.Module):
    def __init__(self, attention, d_model, n_heads, mix=False):
        super().__init__()
        d_keys = d_model // n_heads
        self.inner_attention = attention
        self.query_projection = nn.Linear(d_model, d_keys * n_heads)
        self.key_projection = nn.Linear(d_model, d_keys * n_heads)
        self.value_projection = nn.Linear(d_model, d_keys * n_heads)
        self.out_projection = nn.Linear(d_keys * n_heads, d_model)
        self.n_heads = n_heads
        self.mix = mix

    def forward(self, queries, keys, values, attn_mask):
        B, L, _ = queries.shape
        _, S, _ = keys.shape
        H = self.n_heads
        out = self.inner_attention(
            self.query_projection(queries).view(B, L, H, -1),
            self.key_projection(keys).view(B, S, H, -1),
            self.value_projection(values).view(B, S, H, -1),
            attn_mask,
        )
        if self.mix:
            out = out.transpose(2, 1).contiguous()
        return self.out_projection(out.view(B, L, -1))


class DataEmbedding(nn.Module):
    def __init__(self, c_in, d_model, n_time_features, dropout=0.1):
        super().__init__()
        self.value_embedding = nn.Conv1d(c_in, d_model, kernel_size=3, padding=1, padding_mode="circular")
        self.temporal_embedding = nn.Linear(n_time_features, d_model)
        pe = torch.zeros(512, d_model)
        position = torch.arange(0, 512).float().unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0))
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x, x_mark):
        x = self.value_embedding(x.permute(0, 2, 1)).transpose(1, 2)
        return self.dropout(x + self.pe[:, : x.size(1)] + self.temporal_embedding(x_mark))


class ConvLayer(nn.Module):
    def __init__(self, c_in):
        super().__init__()
        self.downConv = nn.Conv1d(c_in, c_in, kernel_size=3, padding=1, padding_mode="circular")
        self.norm = nn.BatchNorm1d(c_in)
        self.activation = nn.ELU()
        self.maxPool = nn.MaxPool1d(kernel_size=3, stride=2, padding=1)

    def forward(self, x):
        x = self.maxPool(self.activation(self.norm(self.downConv(x.permute(0, 2, 1)))))
        return x.transpose(1, 2)


class EncoderLayer(nn.Module):
    def __init__(self, attention, d_model, d_ff, dropout):
        super().__init__()
        self.attention = attention
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model))
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, attn_mask=None):
        x = self.norm1(x + self.dropout(self.attention(x, x, x, attn_mask=attn_mask)))
        return self.norm2(x + self.dropout(self.ff(x)))


class DecoderLayer(nn.Module):
    def __init__(self, self_attention, cross_attention, d_model, d_ff, dropout):
        super().__init__()
        self.self_attention = self_attention
        self.cross_attention = cross_attention
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model))
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, cross, x_mask=None, cross_mask=None):
        x = self.norm1(x + self.dropout(self.self_attention(x, x, x, attn_mask=x_mask)))
        x = self.norm2(x + self.dropout(self.cross_attention(x, cross, cross, attn_mask=cross_mask)))
        return self.norm3(x + self.dropout(self.ff(x)))


class Informer(nn.Module):
    def __init__(self, cfg: InformerConfig):
        super().__init__()
        self.pred_len = cfg.out_len
        Attn = ATTENTIONS[cfg.attn]
        self.enc_embedding = DataEmbedding(cfg.enc_in, cfg.d_model, cfg.n_time_features, cfg.dropout)
        self.dec_embedding = DataEmbedding(cfg.dec_in, cfg.d_model, cfg.n_time_features, cfg.dropout)
        self.encoder_layers = nn.ModuleList([
            EncoderLayer(AttentionLayer(Attn(False, cfg.factor, attention_dropout=cfg.dropout), cfg.d_model, cfg.n_heads),
                         cfg.d_model, cfg.d_ff, cfg.dropout)
            for _ in range(cfg.e_layers)
        ])
        self.conv_layers = nn.ModuleList([ConvLayer(cfg.d_model) for _ in range(cfg.e_layers - 1)])
        self.enc_norm = nn.LayerNorm(cfg.d_model)
        self.decoder_layers = nn.ModuleList([
            DecoderLayer(
                AttentionLayer(Attn(True, cfg.factor, attention_dropout=cfg.dropout), cfg.d_model, cfg.n_heads, mix=True),
                AttentionLayer(FullAttention(False, cfg.factor, attention_dropout=cfg.dropout), cfg.d_model, cfg.n_heads),
                cfg.d_model, cfg.d_ff, cfg.dropout)
            for _ in range(cfg.d_layers)
        ])
        self.dec_norm = nn.LayerNorm(cfg.d_model)
        self.projection = nn.Linear(cfg.d_model, cfg.c_out)

    def forward(self, x_enc, x_mark_enc, x_dec, x_mark_dec, dec_self_mask=None):
        enc_out = self.enc_embedding(x_enc, x_mark_enc)
        for attn_layer, conv_layer in zip(self.encoder_layers, self.conv_layers):
            enc_out = conv_layer(attn_layer(enc_out))
        enc_out = self.enc_norm(self.encoder_layers[-1](enc_out))
        dec_out = self.dec_embedding(x_dec, x_mark_dec)
        for layer in self.decoder_layers:
            dec_out = layer(dec_out, enc_out, x_mask=dec_self_mask)
        dec_out = self.projection(self.dec_norm(dec_out))
        return dec_out[:, -self.pred_len:, :]


def make_windows(cfg: InformerConfig, n=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    total = cfg.seq_len + cfg.out_len
    t = torch.arange(total).float()[None, :, None] + torch.randint(0, 500, (n, 1, 1), generator=g)
    series = torch.sin(t / 6.0 * torch.tensor([1.0, 0.5, 0.25])) + 0.05 * torch.randn(n, total, cfg.enc_in, generator=g)
    marks = torch.cat([torch.sin(t / 24.0), torch.cos(t / 24.0), torch.sin(t / 168.0), torch.cos(t / 168.0)], dim=-1)
    x_enc, x_mark_enc = series[:, : cfg.seq_len], marks[:, : cfg.seq_len]
    dec_start = cfg.seq_len - cfg.label_len
    x_dec = torch.cat([series[:, dec_start: cfg.seq_len], torch.zeros(n, cfg.out_len, cfg.dec_in)], dim=1)
    x_mark_dec = marks[:, dec_start:]
    return x_enc, x_mark_enc, x_dec, x_mark_dec, series[:, cfg.seq_len:]


if __name__ == "__main__":
    for attn in ("prob", "full"):
        torch.manual_seed(0)
        cfg = InformerConfig(attn=attn)
        model = Informer(cfg)
        x_enc, x_mark_enc, x_dec, x_mark_dec, y = make_windows(cfg)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        for step in range(15):
            model.train()
            loss = F.mse_loss(model(x_enc, x_mark_enc, x_dec, x_mark_dec), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            pred = model(x_enc, x_mark_enc, x_dec, x_mark_dec)
            print(attn, "train mse", round(loss.item(), 4), "eval mse", round(F.mse_loss(pred, y).item(), 4),
                  "non-finite predictions:", (~torch.isfinite(pred)).sum().item())
