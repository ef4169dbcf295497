"""Informer: long-sequence time-series forecasting with ProbSparse self-attention (AAAI 2021).

Written in the layout of zhouhaoyi/Informer2020 (`TriangularCausalMask`, `ProbMask`,
`FullAttention`, `ProbAttention` with `_prob_QK`, `_get_initial_context` and `_update_context`,
`AttentionLayer` with `mix`, a `DataEmbedding` with a circular-conv token embedding and `timeF`
features, the distilling `ConvLayer`, a decoder fed `label_len` known steps and zeros, and
`_process_one_batch`), on synthetic hourly multivariate series.

Source: seed masked_fill_inplace.txt (区别); conventions.md §1 (direction cheat-sheet).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class TriangularCausalMask:
    def __init__(self, B, L, device="cpu"):
        mask_shape = [B, 1, L, L]
        self.mask = torch.triu(torch.ones(mask_shape, dtype=torch.bool), diagonal=1).to(device)


class ProbMask:
    def __init__(self, B, H, L, index, scores, device="cpu"):
        _mask = torch.ones(L, scores.shape[-1], dtype=torch.bool).to(device).triu(1)
        _mask_ex = _mask[None, None, :].expand(B, H, L, scores.shape[-1])
        indicator = _mask_ex[
            torch.arange(B)[:, None, None], torch.arange(H)[None, :, None], index, :
        ]
        self.mask = indicator.view(scores.shape).to(device)


class FullAttention(nn.Module):
    def __init__(self, mask_flag=True, factor=5, scale=None, attention_dropout=0.1):
        super().__init__()
        self.factor, self.scale, self.mask_flag = factor, scale, mask_flag
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
        return torch.einsum("bhls,bshd->blhd", A, values).contiguous(), None


class ProbAttention(nn.Module):
    def __init__(self, mask_flag=True, factor=5, scale=None, attention_dropout=0.1):
        super().__init__()
        self.factor, self.scale, self.mask_flag = factor, scale, mask_flag
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
        return V.cumsum(dim=-2)

    def _update_context(self, context_in, V, scores, index, L_Q, attn_mask):
        B, H = V.shape[:2]
        if self.mask_flag:
            attn_mask = ProbMask(B, H, L_Q, index, scores, device=V.device)
            scores = scores.masked_fill(attn_mask.mask, -np.inf)
        attn = torch.softmax(scores, dim=-1)
        context_in[torch.arange(B)[:, None, None], torch.arange(H)[None, :, None], index, :] = (
            torch.matmul(attn, V).type_as(context_in)
        )
        return context_in, None

    def forward(self, queries, keys, values, attn_mask):
        B, L_Q, H, D = queries.shape
        _, L_K, _, _ = keys.shape
        queries, keys = queries.transpose(2, 1), keys.transpose(2, 1)
        values = values.transpose(2, 1)
        U_part = min(self.factor * int(np.ceil(np.log(L_K))), L_K)
        u = min(self.factor * int(np.ceil(np.log(L_Q))), L_Q)
        scores_top, index = self._prob_QK(queries, keys, sample_k=U_part, n_top=u)
        scores_top = scores_top * (self.scale or 1.0 / math.sqrt(D))
        context = self._get_initial_context(values, L_Q)
        context, attn = self._update_context(context, values, scores_top, index, L_Q, attn_mask)
        return context.transpose(2, 1).contiguous(), attn


class AttentionLayer(nn.Module):
    def __init__(self, attention, d_model, n_heads, mix=False):
        super().__init__()
        d_keys = d_model // n_heads
        self.inner_attention = attention
        self.query_projection = nn.Linear(d_model, d_keys * n_heads)
        self.key_projection = nn.Linear(d_model, d_keys * n_heads)
        self.value_projection = nn.Linear(d_model, d_keys * n_heads)
        self.out_projection = nn.Linear(d_keys * n_heads, d_model)
        self.n_heads, self.mix = n_heads, mix

    def forward(self, queries, keys, values, attn_mask):
        (B, L, _), S, H = queries.shape, keys.shape[1], self.n_heads
        queries = self.query_projection(queries).view(B, L, H, -1)
        keys = self.key_projection(keys).view(B, S, H, -1)
        values = self.value_projection(values).view(B, S, H, -1)
        out, attn = self.inner_attention(queries, keys, values, attn_mask)
        if self.mix:
            out = out.transpose(2, 1).contiguous()
        return self.out_projection(out.view(B, L, -1)), attn


class DataEmbedding(nn.Module):
    def __init__(self, c_in, d_model, dropout=0.1, max_len=512):
        super().__init__()
        self.tokenConv = nn.Conv1d(c_in, d_model, kernel_size=3, padding=1, padding_mode="circular")
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len).float().unsqueeze(1)
        div_term = (torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model)).exp()
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0))
        self.temporal_embedding = nn.Linear(4, d_model)
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x, x_mark):
        x = self.tokenConv(x.permute(0, 2, 1)).transpose(1, 2)
        x = x + self.pe[:, : x.size(1)] + self.temporal_embedding(x_mark)
        return self.dropout(x)


class ConvLayer(nn.Module):
    def __init__(self, c_in):
        super().__init__()
        self.downConv = nn.Conv1d(c_in, c_in, kernel_size=3, padding=1, padding_mode="circular")
        self.norm = nn.BatchNorm1d(c_in)
        self.maxPool = nn.MaxPool1d(kernel_size=3, stride=2, padding=1)

    def forward(self, x):
        x = self.maxPool(F.elu(self.norm(self.downConv(x.permute(0, 2, 1)))))
        return x.transpose(1, 2)


class EncoderLayer(nn.Module):
    def __init__(self, attention, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.attention = attention
        self.conv1 = nn.Conv1d(d_model, d_ff, kernel_size=1)
        self.conv2 = nn.Conv1d(d_ff, d_model, kernel_size=1)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, attn_mask=None):
        new_x, attn = self.attention(x, x, x, attn_mask=attn_mask)
        x = y = self.norm1(x + self.dropout(new_x))
        y = self.dropout(F.gelu(self.conv1(y.transpose(-1, 1))))
        y = self.dropout(self.conv2(y).transpose(-1, 1))
        return self.norm2(x + y), attn


class DecoderLayer(nn.Module):
    def __init__(self, self_attention, cross_attention, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.self_attention, self.cross_attention = self_attention, cross_attention
        self.conv1 = nn.Conv1d(d_model, d_ff, kernel_size=1)
        self.conv2 = nn.Conv1d(d_ff, d_model, kernel_size=1)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, cross, x_mask=None, cross_mask=None):
        x = self.norm1(x + self.dropout(self.self_attention(x, x, x, attn_mask=x_mask)[0]))
        new_x, _ = self.cross_attention(x, cross, cross, attn_mask=cross_mask)
        x = self.norm2(x + self.dropout(new_x))
        y = self.dropout(F.gelu(self.conv1(x.transpose(-1, 1))))
        y = self.dropout(self.conv2(y).transpose(-1, 1))
        return self.norm3(x + y)


@dataclass
class InformerArgs:
    enc_in: int = 3
    seq_len: int = 48
    label_len: int = 24
    pred_len: int = 12
    factor: int = 3
    d_model: int = 32
    n_heads: int = 4
    e_layers: int = 2
    d_layers: int = 1
    d_ff: int = 64
    dropout: float = 0.05
    attn: str = "prob"


class Informer(nn.Module):
    def __init__(self, args: InformerArgs):
        super().__init__()
        self.pred_len = args.pred_len
        Attn = ProbAttention if args.attn == "prob" else FullAttention
        d, h, d_ff = args.d_model, args.n_heads, args.d_ff
        self.enc_embedding = DataEmbedding(args.enc_in, d, args.dropout)
        self.dec_embedding = DataEmbedding(args.enc_in, d, args.dropout)

        def attention(kind, mask_flag, mix=False):
            return AttentionLayer(kind(mask_flag, args.factor), d, h, mix=mix)

        self.encoder_layers = nn.ModuleList(
            EncoderLayer(attention(Attn, False), d, d_ff, args.dropout)
            for _ in range(args.e_layers)
        )
        self.conv_layers = nn.ModuleList(ConvLayer(d) for _ in range(args.e_layers - 1))
        self.encoder_norm = nn.LayerNorm(d)
        self.decoder_layers = nn.ModuleList(
            DecoderLayer(attention(Attn, True, mix=True), attention(FullAttention, False), d, d_ff)
            for _ in range(args.d_layers)
        )
        self.decoder_norm = nn.LayerNorm(d)
        self.projection = nn.Linear(d, args.enc_in)

    def forward(self, x_enc, x_mark_enc, x_dec, x_mark_dec, dec_self_mask=None, dec_enc_mask=None):
        enc_out = self.enc_embedding(x_enc, x_mark_enc)
        for attn_layer, conv_layer in zip(self.encoder_layers, self.conv_layers, strict=False):
            enc_out = conv_layer(attn_layer(enc_out)[0])
        enc_out = self.encoder_norm(self.encoder_layers[-1](enc_out)[0])
        dec_out = self.dec_embedding(x_dec, x_mark_dec)
        for layer in self.decoder_layers:
            dec_out = layer(dec_out, enc_out, x_mask=dec_self_mask, cross_mask=dec_enc_mask)
        dec_out = self.projection(self.decoder_norm(dec_out))
        return dec_out[:, -self.pred_len :, :]


def synthetic_hourly(n_steps, channels, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(n_steps)[:, None]
    c = np.arange(channels)[None, :]
    data = np.sin(2 * np.pi * t / 24 + c) + 0.5 * np.sin(2 * np.pi * t / 168 * (c + 1))
    data = data + 0.1 * rng.normal(size=(n_steps, channels))
    t = t[:, 0]
    marks = np.stack([t % 24 / 23, t // 24 % 30 / 29, t // 24 % 7 / 6, t // 720 % 12 / 11], 1)
    marks = marks - 0.5
    return torch.tensor(data, dtype=torch.float32), torch.tensor(marks, dtype=torch.float32)


def make_batch(data, marks, starts, args: InformerArgs):
    idx_x = torch.tensor(starts)[:, None] + torch.arange(args.seq_len)
    r_begin = idx_x[:, -1:] + 1 - args.label_len
    idx_y = r_begin + torch.arange(args.label_len + args.pred_len)
    return {"x": data[idx_x], "y": data[idx_y], "x_mark": marks[idx_x], "y_mark": marks[idx_y]}


def process_one_batch(model, batch, args: InformerArgs):
    batch_y = batch["y"]
    dec_inp = torch.zeros([batch_y.shape[0], args.pred_len, batch_y.shape[-1]]).float()
    dec_inp = torch.cat([batch_y[:, : args.label_len, :], dec_inp], dim=1)
    outputs = model(batch["x"], batch["x_mark"], dec_inp, batch["y_mark"])
    return outputs, batch_y[:, -args.pred_len :, :]


def main():
    torch.manual_seed(0)
    args = InformerArgs()
    data, marks = synthetic_hourly(2000, args.enc_in)
    model = Informer(args)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    for step in range(60):
        batch = make_batch(data, marks, rng.integers(0, 1500, 16).tolist(), args)
        pred, true = process_one_batch(model, batch, args)
        loss = F.mse_loss(pred, true)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            print(f"step {step} mse {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        batch = make_batch(data, marks, [1600, 1700, 1800], args)
        pred, true = process_one_batch(model, batch, args)
        print(f"test mse {F.mse_loss(pred, true).item():.4f}")


if __name__ == "__main__":
    main()
