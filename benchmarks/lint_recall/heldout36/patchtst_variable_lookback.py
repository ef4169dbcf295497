"""PatchTST: channel-independent patch transformer for long-term forecasting (ICLR 2023).

Written in the layout of yuqinie98/PatchTST (PatchTST_supervised/layers: `RevIN`,
`PatchTST_backbone` with `padding_patch='end'` and `unfold`, `TSTiEncoder` with `W_P` and
`W_pos`, `TSTEncoder` / `TSTEncoderLayer` with residual attention and BatchNorm,
`_MultiheadAttention`, `_ScaledDotProductAttention` with `key_padding_mask` and `attn_mask`,
`Flatten_Head`), extended to batches of series whose observed history is shorter than the
lookback window (new products, newly installed meters), left-padded and normalised over the
observed steps only.

Source: hyunwoongko/transformer PR #40 and bentrevett/pytorch-seq2seq#96 (conventions.md §3
item 21); conventions.md §1 (nn.MultiheadAttention row, direction cheat-sheet).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass
class PatchTSTConfig:
    enc_in: int = 3
    seq_len: int = 96
    pred_len: int = 24
    patch_len: int = 16
    stride: int = 8
    e_layers: int = 2
    n_heads: int = 4
    d_model: int = 32
    d_ff: int = 64
    dropout: float = 0.1
    res_attention: bool = True


class RevIN(nn.Module):
    def __init__(self, num_features: int, eps=1e-5, affine=True):
        super().__init__()
        self.eps = eps
        self.affine_weight = nn.Parameter(torch.ones(num_features))
        self.affine_bias = nn.Parameter(torch.zeros(num_features))
        self.affine = affine

    def forward(self, x, mode: str, observed=None):
        if mode == "norm":
            self._get_statistics(x, observed)
            x = (x - self.mean) / self.stdev
            return x * self.affine_weight + self.affine_bias if self.affine else x
        if self.affine:
            x = (x - self.affine_bias) / (self.affine_weight + self.eps * self.eps)
        return x * self.stdev + self.mean

    def _get_statistics(self, x, observed):
        count = observed.sum(dim=1, keepdim=True).clamp(min=1)
        self.mean = ((x * observed).sum(dim=1, keepdim=True) / count).detach()
        var = (((x - self.mean) * observed) ** 2).sum(dim=1, keepdim=True) / count
        self.stdev = torch.sqrt(var + self.eps).detach()


class _ScaledDotProductAttention(nn.Module):
    def __init__(self, d_model, n_heads, attn_dropout=0.0, res_attention=False, lsa=False):
        super().__init__()
        self.attn_dropout = nn.Dropout(attn_dropout)
        self.res_attention = res_attention
        head_dim = d_model // n_heads
        self.scale = nn.Parameter(torch.tensor(head_dim**-0.5), requires_grad=lsa)

    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, prev=None, key_padding_mask=None, attn_mask=None
    ):
        attn_scores = torch.matmul(q, k) * self.scale
        if prev is not None:
            attn_scores = attn_scores + prev
        if attn_mask is not None:
            if attn_mask.dtype == torch.bool:
                attn_scores = attn_scores.masked_fill(attn_mask, -np.inf)
            else:
                attn_scores = attn_scores + attn_mask
        if key_padding_mask is not None:
            attn_scores = attn_scores.masked_fill(key_padding_mask.unsqueeze(1).unsqueeze(3), -np.inf)  # expect: MC514 patchtst
        attn_weights = self.attn_dropout(F.softmax(attn_scores, dim=-1))
        output = torch.matmul(attn_weights, v)
        return output, attn_weights, attn_scores


class _MultiheadAttention(nn.Module):
    def __init__(self, d_model, n_heads, res_attention=False, attn_dropout=0.0, proj_dropout=0.0):
        super().__init__()
        self.n_heads, self.d_k = n_heads, d_model // n_heads
        self.W_Q = nn.Linear(d_model, d_model)
        self.W_K = nn.Linear(d_model, d_model)
        self.W_V = nn.Linear(d_model, d_model)
        self.res_attention = res_attention
        self.sdp_attn = _ScaledDotProductAttention(d_model, n_heads, attn_dropout, res_attention)
        self.to_out = nn.Sequential(nn.Linear(d_model, d_model), nn.Dropout(proj_dropout))

    def forward(self, Q, K=None, V=None, prev=None, key_padding_mask=None, attn_mask=None):
        bs = Q.size(0)
        K = Q if K is None else K
        V = Q if V is None else V
        q_s = self.W_Q(Q).view(bs, -1, self.n_heads, self.d_k).transpose(1, 2)
        k_s = self.W_K(K).view(bs, -1, self.n_heads, self.d_k).permute(0, 2, 3, 1)
        v_s = self.W_V(V).view(bs, -1, self.n_heads, self.d_k).transpose(1, 2)
        output, attn_weights, attn_scores = self.sdp_attn(
            q_s, k_s, v_s, prev=prev, key_padding_mask=key_padding_mask, attn_mask=attn_mask
        )
        output = output.transpose(1, 2).contiguous().view(bs, -1, self.n_heads * self.d_k)
        return self.to_out(output), attn_weights, attn_scores


class Transpose(nn.Module):
    def __init__(self, *dims):
        super().__init__()
        self.dims = dims

    def forward(self, x):
        return x.transpose(*self.dims)


class TSTEncoderLayer(nn.Module):
    def __init__(self, d_model, n_heads, d_ff=256, dropout=0.0, res_attention=False):
        super().__init__()
        self.res_attention = res_attention
        self.self_attn = _MultiheadAttention(d_model, n_heads, res_attention, proj_dropout=dropout)
        self.dropout_attn = nn.Dropout(dropout)
        self.norm_attn = nn.Sequential(Transpose(1, 2), nn.BatchNorm1d(d_model), Transpose(1, 2))
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.GELU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model)
        )
        self.dropout_ffn = nn.Dropout(dropout)
        self.norm_ffn = nn.Sequential(Transpose(1, 2), nn.BatchNorm1d(d_model), Transpose(1, 2))

    def forward(self, src, prev=None, key_padding_mask=None, attn_mask=None):
        src2, attn, scores = self.self_attn(
            src, src, src, prev, key_padding_mask=key_padding_mask, attn_mask=attn_mask
        )
        src = self.norm_attn(src + self.dropout_attn(src2))
        src = self.norm_ffn(src + self.dropout_ffn(self.ff(src)))
        return (src, scores) if self.res_attention else src


class TSTiEncoder(nn.Module):
    def __init__(self, patch_num, patch_len, cfg: PatchTSTConfig):
        super().__init__()
        self.W_P = nn.Linear(patch_len, cfg.d_model)
        self.W_pos = nn.Parameter(torch.empty(patch_num, cfg.d_model).uniform_(-0.02, 0.02))
        self.dropout = nn.Dropout(cfg.dropout)
        self.res_attention = cfg.res_attention
        self.layers = nn.ModuleList(
            TSTEncoderLayer(cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.dropout, cfg.res_attention)
            for _ in range(cfg.e_layers)
        )

    def forward(self, x, key_padding_mask=None):
        n_vars = x.shape[1]
        x = self.W_P(x.permute(0, 1, 3, 2))
        u = torch.reshape(x, (x.shape[0] * x.shape[1], x.shape[2], x.shape[3]))
        output = self.dropout(u + self.W_pos)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.repeat_interleave(n_vars, dim=0)
        scores = None
        for mod in self.layers:
            if self.res_attention:
                output, scores = mod(output, prev=scores, key_padding_mask=key_padding_mask)
            else:
                output = mod(output, key_padding_mask=key_padding_mask)
        z = torch.reshape(output, (-1, n_vars, output.shape[-2], output.shape[-1]))
        return z.permute(0, 1, 3, 2)


class Flatten_Head(nn.Module):
    def __init__(self, nf, target_window, head_dropout=0.0):
        super().__init__()
        self.flatten = nn.Flatten(start_dim=-2)
        self.linear = nn.Linear(nf, target_window)
        self.dropout = nn.Dropout(head_dropout)

    def forward(self, x):
        return self.dropout(self.linear(self.flatten(x)))


class PatchTST_backbone(nn.Module):
    def __init__(self, cfg: PatchTSTConfig):
        super().__init__()
        self.revin_layer = RevIN(cfg.enc_in)
        self.patch_len, self.stride, self.seq_len = cfg.patch_len, cfg.stride, cfg.seq_len
        patch_num = (cfg.seq_len - cfg.patch_len) // cfg.stride + 2
        self.padding_patch_layer = nn.ReplicationPad1d((0, cfg.stride))
        self.backbone = TSTiEncoder(patch_num, cfg.patch_len, cfg)
        self.head = Flatten_Head(cfg.d_model * patch_num, cfg.pred_len, cfg.dropout)

    @staticmethod
    def patch_padding_mask(observed_len, seq_len, patch_len, stride, patch_num):
        patch_end = torch.arange(patch_num, device=observed_len.device) * stride + patch_len
        return patch_end[None, :] <= (seq_len - observed_len)[:, None]

    def forward(self, z, observed_len):
        steps = torch.arange(self.seq_len, device=z.device)
        observed = (steps[None, :] >= (self.seq_len - observed_len)[:, None]).float()
        z = self.revin_layer(z.permute(0, 2, 1), "norm", observed=observed[:, :, None])
        z = (z * observed[:, :, None]).permute(0, 2, 1)
        z = self.padding_patch_layer(z)
        z = z.unfold(dimension=-1, size=self.patch_len, step=self.stride)
        patch_pad = self.patch_padding_mask(
            observed_len, self.seq_len, self.patch_len, self.stride, z.shape[2]
        )
        z = self.backbone(z.permute(0, 1, 3, 2), key_padding_mask=patch_pad)
        z = self.head(z)
        return self.revin_layer(z.permute(0, 2, 1), "denorm").permute(0, 2, 1)


class Model(nn.Module):
    def __init__(self, configs: PatchTSTConfig):
        super().__init__()
        self.model = PatchTST_backbone(configs)

    def forward(self, x, observed_len):
        x = self.model(x.permute(0, 2, 1), observed_len)
        return x.permute(0, 2, 1)


def make_batch(cfg: PatchTSTConfig, batch_size, rng):
    t = np.arange(cfg.seq_len + cfg.pred_len)[None, :, None]
    phase = rng.uniform(0, 2 * np.pi, (batch_size, 1, cfg.enc_in))
    level = rng.uniform(-2, 2, (batch_size, 1, cfg.enc_in))
    series = level + np.sin(2 * np.pi * t / 24 + phase) + 0.1 * rng.normal(size=phase.shape)
    observed_len = rng.integers(cfg.patch_len, cfg.seq_len + 1, batch_size)
    x = series[:, : cfg.seq_len].copy()
    for i, n in enumerate(observed_len):
        x[i, : cfg.seq_len - n] = 0.0
    return {
        "x": torch.tensor(x, dtype=torch.float32),
        "observed_len": torch.tensor(observed_len),
        "y": torch.tensor(series[:, cfg.seq_len :], dtype=torch.float32),
    }


def main():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    cfg = PatchTSTConfig()
    model = Model(cfg)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(80):
        batch = make_batch(cfg, 32, rng)
        target = batch.pop("y")
        loss = F.mse_loss(model(**batch), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            print(f"step {step} mse {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        batch = make_batch(cfg, 64, rng)
        target = batch.pop("y")
        print(f"test mse {F.mse_loss(model(**batch), target).item():.4f}")


if __name__ == "__main__":
    main()
