"""Held-out 15 (correct twin): a speech-recognition Conformer encoder (torchaudio / ESPnet style): 2-D
convolutional subsampling of log-mel features, macaron feed-forward modules, multi-head
self-attention with nn.MultiheadAttention, and a depthwise convolution module. The batch comes
from a feature extractor that returns `attention_mask` (1 = real frame, 0 = padding), which the
subsampling turns into a bool mask at the reduced frame rate.

Source: seed guide "key_padding_mask：处理变长序列的利器" (key_padding_mask: True = padding) and
Q1 ("该用True的地方用了False"), conventions.md §1 direction cheat-sheet, `maskcheck explain MC502`.
The encoder hands its keep-mask, under the name `attention_mask`, to nn.MultiheadAttention's
`key_padding_mask`, which hides where it is True.
Twin: the keep-mask is inverted where it meets nn.MultiheadAttention: `key_padding_mask=~attention_mask`.
"""

from typing import Tuple

import torch
from torch import nn


class Conv2dSubsampling(nn.Module):
    """Reduces the frame rate by 4 with two stride-2 convolutions (kernel 3, no padding)."""

    def __init__(self, n_mels: int, d_model: int):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, d_model, 3, 2), nn.ReLU(), nn.Conv2d(d_model, d_model, 3, 2), nn.ReLU())
        self.out = nn.Linear(d_model * (((n_mels - 1) // 2 - 1) // 2), d_model)

    def forward(self, features: torch.Tensor, attention_mask: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        x = self.conv(features.unsqueeze(1))  # (B, C, T', F')
        b, c, t, f = x.shape
        x = self.out(x.transpose(1, 2).reshape(b, t, c * f))
        lengths = attention_mask.sum(dim=-1)
        lengths = ((lengths - 1) // 2 - 1) // 2
        attention_mask = torch.arange(t, device=x.device)[None, :] < lengths[:, None]  # (B, T') True = real frame
        return x, attention_mask


class FeedForwardModule(nn.Module):
    def __init__(self, d_model: int, expansion: int = 4, dropout: float = 0.1):
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(d_model), nn.Linear(d_model, d_model * expansion), nn.SiLU(),
                                 nn.Dropout(dropout), nn.Linear(d_model * expansion, d_model), nn.Dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class ConvolutionModule(nn.Module):
    def __init__(self, d_model: int, kernel_size: int = 15, dropout: float = 0.1):
        super().__init__()
        self.layer_norm = nn.LayerNorm(d_model)
        self.pointwise_in = nn.Conv1d(d_model, 2 * d_model, 1)
        self.depthwise = nn.Conv1d(d_model, d_model, kernel_size, padding=kernel_size // 2, groups=d_model)
        self.norm = nn.BatchNorm1d(d_model)
        self.pointwise_out = nn.Conv1d(d_model, d_model, 1)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        x = nn.functional.glu(self.pointwise_in(self.layer_norm(x).transpose(1, 2)), dim=1)
        x = x.masked_fill(~attention_mask[:, None, :], 0.0)  # keep padding out of the depthwise conv
        x = self.pointwise_out(nn.functional.silu(self.norm(self.depthwise(x))))
        return self.dropout(x.transpose(1, 2))


class ConformerLayer(nn.Module):
    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.1):
        super().__init__()
        self.ffn1 = FeedForwardModule(d_model, dropout=dropout)
        self.self_attn_layer_norm = nn.LayerNorm(d_model)
        self.self_attn = nn.MultiheadAttention(d_model, num_heads, dropout=dropout, batch_first=True)
        self.self_attn_dropout = nn.Dropout(dropout)
        self.conv_module = ConvolutionModule(d_model, dropout=dropout)
        self.ffn2 = FeedForwardModule(d_model, dropout=dropout)
        self.final_layer_norm = nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        x = x + 0.5 * self.ffn1(x)
        residual = x
        x = self.self_attn_layer_norm(x)
        x, _ = self.self_attn(x, x, x, key_padding_mask=~attention_mask, need_weights=False)
        x = residual + self.self_attn_dropout(x)
        x = x + self.conv_module(x, attention_mask)
        x = x + 0.5 * self.ffn2(x)
        return self.final_layer_norm(x)


class ConformerEncoder(nn.Module):
    def __init__(self, n_mels: int = 80, d_model: int = 64, num_heads: int = 4, num_layers: int = 2, vocab_size: int = 32):
        super().__init__()
        self.subsampling = Conv2dSubsampling(n_mels, d_model)
        self.layers = nn.ModuleList([ConformerLayer(d_model, num_heads) for _ in range(num_layers)])
        self.ctc_head = nn.Linear(d_model, vocab_size)

    def forward(self, input_features: torch.Tensor, attention_mask: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """input_features: (B, T, n_mels) log-mel frames; attention_mask: (B, T) 1 = real frame."""
        x, attention_mask = self.subsampling(input_features, attention_mask)
        for layer in self.layers:
            x = layer(x, attention_mask)
        log_probs = self.ctc_head(x).log_softmax(dim=-1)
        return log_probs, attention_mask.sum(dim=-1)
