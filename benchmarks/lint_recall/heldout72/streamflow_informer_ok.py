"""Informer with ProbSparse self-attention for daily streamflow forecasting.

Catchments with forcing data (precipitation, temperature, PET) and gauged
discharge, CAMELS-style; the decoder is fed a start token of the last
`label_len` days followed by zeros for the forecast horizon. `--half` runs the
evaluation in float16 the way the gauge-network inference job does.

Source: NVIDIA/apex#1052, NVIDIA/apex#1105, facebookresearch/fairseq#3575
(conventions.md section 3 item 18); conventions.md section 2.3.
"""
import argparse
from math import sqrt

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class TriangularCausalMask:
    def __init__(self, B, L, device="cpu"):
        self._mask = torch.triu(torch.ones([B, 1, L, L], dtype=torch.bool), diagonal=1).to(device)

    @property
    def mask(self):
        return self._mask


class ProbMask:
    def __init__(self, B, H, L, index, scores, device="cpu"):
        _mask = torch.ones(L, scores.shape[-1], dtype=torch.bool).to(device).triu(1)
        _mask_ex = _mask[None, None, :].expand(B, H, L, scores.shape[-1])
        indicator = _mask_ex[torch.arange(B)[:, None, None], torch.arange(H)[None, :, None], index, :]
        self._mask = indicator.view(scores.shape).to(device)

    @property
    def mask(self):
        return self._mask


class FullAttention(nn.Module):
    def __init__(self, mask_flag=True, factor=5, scale=None, attention_dropout=0.05):
        super().__init__()
        self.mask_flag = mask_flag
        self.factor = factor
        self.scale = scale
        self.dropout = nn.Dropout(attention_dropout)

    def forward(self, queries, keys, values, attn_mask):
        B, L, H, E = queries.shape
        scale = self.scale or 1.0 / sqrt(E)
        scores = torch.einsum("blhe,bshe->bhls", queries, keys)
        if self.mask_flag:
            if attn_mask is None:
                attn_mask = TriangularCausalMask(B, L, device=queries.device)
            scores = scores.masked_fill(attn_mask.mask, float("-inf"))
        A = self.dropout(torch.softmax(scale * scores, dim=-1))
        return torch.einsum("bhls,bshd->blhd", A, values).contiguous()


class ProbAttention(nn.Module):
    def __init__(self, mask_flag=True, factor=5, scale=None, attention_dropout=0.05):
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
        return V.cumsum(dim=-2)

    def _update_context(self, context_in, V, scores, index, L_Q):
        B, H, L_V, D = V.shape
        if self.mask_flag:
            attn_mask = ProbMask(B, H, L_Q, index, scores, device=V.device)
            scores = scores.masked_fill(attn_mask.mask, torch.finfo(scores.dtype).min)
        attn = self.dropout(torch.softmax(scores, dim=-1))
        rows = (torch.arange(B)[:, None, None], torch.arange(H)[None, :, None], index)
        context_in[rows] = torch.matmul(attn, V).type_as(context_in)
        return context_in

    def forward(self, queries, keys, values, attn_mask):
        B, L_Q, H, D = queries.shape
        _, L_K, _, _ = keys.shape
        queries, keys, values = (t.transpose(2, 1) for t in (queries, keys, values))
        U_part = min(self.factor * int(np.ceil(np.log(L_K))), L_K)
        u = min(self.factor * int(np.ceil(np.log(L_Q))), L_Q)
        scores_top, index = self._prob_QK(queries, keys, sample_k=U_part, n_top=u)
        scores_top = scores_top * (self.scale or 1.0 / sqrt(D))
        context = self._get_initial_context(values, L_Q)
        context = self._update_context(context, values, scores_top, index, L_Q)
        return context.transpose(2, 1).contiguous()


class AttentionLayer(nn.Module):
    def __init__(self, attention, d_model, n_heads):
        super().__init__()
        self.inner_attention = attention
        self.query_projection = nn.Linear(d_model, d_model)
        self.key_projection = nn.Linear(d_model, d_model)
        self.value_projection = nn.Linear(d_model, d_model)
        self.out_projection = nn.Linear(d_model, d_model)
        self.n_heads = n_heads

    def forward(self, queries, keys, values, attn_mask=None):
        (B, L, _), S, H = queries.shape, keys.shape[1], self.n_heads
        q = self.query_projection(queries).view(B, L, H, -1)
        k, v = self.key_projection(keys).view(B, S, H, -1), self.value_projection(values).view(B, S, H, -1)
        return self.out_projection(self.inner_attention(q, k, v, attn_mask).view(B, L, -1))


class Block(nn.Module):
    def __init__(self, self_attn, d_model, cross_attn=None):
        super().__init__()
        self.self_attn, self.cross_attn = self_attn, cross_attn
        self.ff = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))
        self.norms = nn.ModuleList([nn.LayerNorm(d_model) for _ in range(3)])

    def forward(self, x, memory=None):
        x = self.norms[0](x + self.self_attn(x, x, x))
        if self.cross_attn is not None:
            x = self.norms[1](x + self.cross_attn(x, memory, memory))
        return self.norms[2](x + self.ff(x))


class StreamflowInformer(nn.Module):
    def __init__(self, n_forcings, d_model=32, n_heads=4, factor=3, label_len=16, pred_len=7, attn="prob"):
        super().__init__()
        Attn = ProbAttention if attn == "prob" else FullAttention
        self.label_len, self.pred_len = label_len, pred_len
        self.enc_embedding = nn.Conv1d(n_forcings + 1, d_model, 3, padding=1, padding_mode="circular")
        self.dec_embedding = nn.Conv1d(n_forcings + 1, d_model, 3, padding=1, padding_mode="circular")
        enc_attn = [AttentionLayer(Attn(False, factor), d_model, n_heads) for _ in range(2)]
        self.encoder = nn.ModuleList([Block(a, d_model) for a in enc_attn])
        cross = AttentionLayer(FullAttention(False, factor), d_model, n_heads)
        self.decoder = Block(AttentionLayer(Attn(True, factor), d_model, n_heads), d_model, cross_attn=cross)
        self.projection = nn.Linear(d_model, 1)

    def forward(self, x_enc, x_dec):
        enc = self.enc_embedding(x_enc.transpose(1, 2)).transpose(1, 2)
        for layer in self.encoder:
            enc = layer(enc)
        dec = self.dec_embedding(x_dec.transpose(1, 2)).transpose(1, 2)
        dec = self.decoder(dec, memory=enc)
        return self.projection(dec)[:, -self.pred_len :, 0]


def make_decoder_input(forcing, discharge, label_len, pred_len):
    known = torch.cat([forcing, discharge.unsqueeze(-1)], dim=-1)
    start = known[:, -label_len - pred_len : -pred_len]
    future = torch.cat([forcing[:, -pred_len:], torch.zeros_like(discharge[:, -pred_len:, None])], -1)
    return torch.cat([start, future], dim=1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--half", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    seq_len, label_len, pred_len = 48, 16, 7
    forcing = torch.randn(3, seq_len + pred_len, 3)
    discharge = torch.randn(3, seq_len + pred_len).cumsum(-1).div(10)
    observed = torch.rand(3, pred_len) > 0.1
    x_enc = torch.cat([forcing[:, :seq_len], discharge[:, :seq_len, None]], -1)
    x_dec = make_decoder_input(forcing, discharge, label_len, pred_len)
    losses = {}
    for attn in ("full", "prob"):
        model = StreamflowInformer(n_forcings=3, label_len=label_len, pred_len=pred_len, attn=attn)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        for _ in range(3):
            pred = model(x_enc, x_dec)
            loss = F.mse_loss(pred[observed], discharge[:, -pred_len:][observed])
            opt.zero_grad()
            loss.backward()
            opt.step()
        losses[attn] = round(loss.item(), 4)
    model.eval()
    if args.half:
        model, x_enc, x_dec = model.half(), x_enc.to(torch.float16), x_dec.to(torch.float16)
    with torch.no_grad():
        pred = model(x_enc, x_dec)
    print("train loss", losses, "forecast", tuple(pred.shape), pred.dtype)
