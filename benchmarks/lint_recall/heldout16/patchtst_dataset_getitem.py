"""Held-out 16: a PatchTST-style forecaster (channel-independent patching, `W_P` patch projection,
learned `W_pos`, `_MultiheadAttention` / `_ScaledDotProductAttention` as in the PatchTST and tsai
backbones, post-norm encoder layers, a flatten head) trained on a sliding-window
`ForecastDataset`. Windows at the start of a series have less history than the lookback: the
dataset's `__getitem__` left-pads them with zeros and returns, with the window, a `pad_mask` over
the patches (True = patch made of padding), which the model hands to the attention as `attn_mask`.

Source: huggingface/pytorch-image-models PR #2674 (timm's `maybe_add_mask` added a bool mask to
the scores), timeseriesAI/tsai#171 ("When the attn_mask tensor is not boolean, the scores are not masked
properly" in tsai's `_ScaledDotProductAttention`), open-mmlab/mmdetection#11803 (a mask added to
`attn_weights` that amounts to adding 1 at every position). The attention adds the
dataset's bool `pad_mask` to the scores.
"""

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import Dataset


class _ScaledDotProductAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, attn_dropout: float = 0.0):
        super().__init__()
        self.attn_dropout = nn.Dropout(attn_dropout)
        self.scale = (d_model // n_heads) ** -0.5

    def forward(self, q: Tensor, k: Tensor, v: Tensor, attn_mask: Optional[Tensor] = None) -> Tensor:
        # q: (bs, n_heads, q_len, d_k), k: (bs, n_heads, d_k, seq_len), v: (bs, n_heads, seq_len, d_v)
        attn_scores = torch.matmul(q, k) * self.scale
        if attn_mask is not None:
            attn_scores = attn_scores + attn_mask  # expect: MC509 getitem
        attn_weights = self.attn_dropout(F.softmax(attn_scores, dim=-1))
        return torch.matmul(attn_weights, v)


class _MultiheadAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.n_heads, self.d_k = n_heads, d_model // n_heads
        self.W_Q, self.W_K, self.W_V = (nn.Linear(d_model, d_model) for _ in range(3))
        self.sdp_attn = _ScaledDotProductAttention(d_model, n_heads)
        self.to_out = nn.Linear(d_model, d_model)

    def forward(self, Q: Tensor, attn_mask: Optional[Tensor] = None) -> Tensor:
        bs = Q.size(0)
        q_s = self.W_Q(Q).view(bs, -1, self.n_heads, self.d_k).transpose(1, 2)
        k_s = self.W_K(Q).view(bs, -1, self.n_heads, self.d_k).permute(0, 2, 3, 1)
        v_s = self.W_V(Q).view(bs, -1, self.n_heads, self.d_k).transpose(1, 2)
        out = self.sdp_attn(q_s, k_s, v_s, attn_mask=attn_mask)
        return self.to_out(out.transpose(1, 2).contiguous().view(bs, -1, self.n_heads * self.d_k))


class TSTEncoderLayer(nn.Module):
    def __init__(self, d_model: int, n_heads: int, d_ff: int = 128, dropout: float = 0.0):
        super().__init__()
        self.self_attn = _MultiheadAttention(d_model, n_heads)
        self.norm_attn, self.norm_ffn = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model))
        self.dropout = nn.Dropout(dropout)

    def forward(self, src: Tensor, attn_mask: Optional[Tensor] = None) -> Tensor:
        src = self.norm_attn(src + self.dropout(self.self_attn(src, attn_mask=attn_mask)))
        return self.norm_ffn(src + self.dropout(self.ff(src)))


class PatchTST(nn.Module):
    def __init__(self, c_in: int, seq_len: int = 64, pred_len: int = 16, patch_len: int = 8, d_model: int = 32, n_heads: int = 4, n_layers: int = 2):
        super().__init__()
        self.patch_len, self.patch_num = patch_len, seq_len // patch_len
        self.W_P = nn.Linear(patch_len, d_model)
        self.W_pos = nn.Parameter(torch.empty(self.patch_num, d_model).uniform_(-0.02, 0.02))
        self.layers = nn.ModuleList([TSTEncoderLayer(d_model, n_heads) for _ in range(n_layers)])
        self.head = nn.Linear(self.patch_num * d_model, pred_len)

    def forward(self, x: Tensor, pad_mask: Optional[Tensor] = None) -> Tensor:
        # x: (bs, seq_len, c_in); pad_mask: (bs, patch_num), True = padded patch
        bs, _, c_in = x.shape
        patches = x.permute(0, 2, 1).unfold(-1, self.patch_len, self.patch_len)  # (bs, c_in, patch_num, patch_len)
        z = self.W_P(patches).reshape(bs * c_in, self.patch_num, -1) + self.W_pos
        attn_mask = None
        if pad_mask is not None:
            pad_mask = pad_mask.repeat_interleave(c_in, dim=0)
            attn_mask = pad_mask[:, None, None, :]
        for layer in self.layers:
            z = layer(z, attn_mask=attn_mask)
        if pad_mask is not None:
            z = z.masked_fill(pad_mask[..., None], 0.0)
        return self.head(z.flatten(1)).reshape(bs, c_in, -1).permute(0, 2, 1)


class ForecastDataset(Dataset):
    def __init__(self, series: Tensor, seq_len: int = 64, pred_len: int = 16, patch_len: int = 8, min_history: int = 16):
        self.series, self.seq_len, self.pred_len, self.patch_len = series, seq_len, pred_len, patch_len
        self.starts = list(range(min_history - seq_len, len(series) - seq_len - pred_len + 1, patch_len))

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, idx: int) -> Tuple[Tensor, Tensor, Tensor]:
        s = self.starts[idx]
        missing = max(0, -s)
        x = torch.zeros(self.seq_len, self.series.shape[1])
        x[missing:] = self.series[max(s, 0): s + self.seq_len]
        y = self.series[s + self.seq_len: s + self.seq_len + self.pred_len]
        pad_mask = torch.arange(self.seq_len // self.patch_len) < missing // self.patch_len  # also: MC509
        return x, y, pad_mask


if __name__ == "__main__":
    torch.manual_seed(0)
    ds = ForecastDataset(torch.randn(200, 3).cumsum(0))
    model = PatchTST(c_in=3).eval()
    x, y, pad_mask = (t.unsqueeze(0) for t in ds[0])
    print("padded patches of the first window:", int(pad_mask.sum()), "of", pad_mask.shape[1])
    noisy = x.clone()
    noisy[:, : 8 * int(pad_mask.sum())] = torch.randn(1, 8 * int(pad_mask.sum()), 3)
    with torch.no_grad():
        print("forecast changes with the padding content:", float((model(x, pad_mask) - model(noisy, pad_mask)).abs().max()))
