"""Held-out 9: MIST's pairwise-feature transformer over mass-spectrum peaks (DiffMS copy:
`src/mist/models/transformer_layer.py` `TransformerEncoderLayer` / `MultiheadAttention` with
`multi_head_attention_forward` and `_scaled_dot_product_attention`, and the peak encoder in
`src/mist/models/modules.py` that builds the padding mask from the number of peaks).

Source: coleygroup/DiffMS#25 and PR #26 ("Incorrect masking for 0-padded peak-positions": in
`_scaled_dot_product_attention` the boolean key-padding mask is converted to `new_attn_mask`
(-inf at the padding) but the bool `attn_mask` itself is added to the scores, so the padded peaks are
not masked, they get +1; the same report is samgoldman97/mist#17).
Surroundings: a bool padding mask built in the encoder, passed as `src_key_padding_mask` through a
layer list, reshaped per head in `multi_head_attention_forward` (which asserts its dtype is bool) and
handed to a helper method that adds it.
"""

import math
from typing import Optional, Tuple

import torch
import torch.nn as nn
from torch import Tensor
from torch.nn import Dropout, LayerNorm, Linear, Module, Parameter
from torch.nn import functional as F
from torch.nn.init import constant_, xavier_uniform_


class TransformerEncoderLayer(Module):
    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation=F.relu, layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, pairwise_featurization: bool = False) -> None:
        super().__init__()
        self.pairwise_featurization = pairwise_featurization
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, batch_first=batch_first,
                                            pairwise_featurization=self.pairwise_featurization)
        self.linear1 = Linear(d_model, dim_feedforward)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.activation = activation

    def forward(self, src: Tensor, pairwise_features: Optional[Tensor] = None,
                src_key_padding_mask: Optional[Tensor] = None) -> Tensor:
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), pairwise_features, src_key_padding_mask)
            x = x + self._ff_block(self.norm2(x))
        else:
            x = self.norm1(x + self._sa_block(x, pairwise_features, src_key_padding_mask))
            x = self.norm2(x + self._ff_block(x))
        return x, pairwise_features

    def _sa_block(self, x: Tensor, pairwise_features: Optional[Tensor],
                  key_padding_mask: Optional[Tensor]) -> Tensor:
        x = self.self_attn(x, x, x, key_padding_mask=key_padding_mask,
                           pairwise_features=pairwise_features)[0]
        return self.dropout1(x)

    def _ff_block(self, x: Tensor) -> Tensor:
        x = self.linear2(self.dropout(self.activation(self.linear1(x))))
        return self.dropout2(x)


class MultiheadAttention(Module):
    def __init__(self, embed_dim, num_heads, dropout=0.0, batch_first=False,
                 pairwise_featurization: bool = False) -> None:
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        self.pairwise_featurization = pairwise_featurization
        self.in_proj_weight = Parameter(torch.empty((3 * embed_dim, embed_dim)))
        self.in_proj_bias = Parameter(torch.empty(3 * embed_dim))
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        if self.pairwise_featurization:
            self.bias_u = Parameter(torch.zeros(self.num_heads, self.head_dim))
            self.bias_v = Parameter(torch.zeros(self.num_heads, self.head_dim))
        self._reset_parameters()

    def _reset_parameters(self):
        xavier_uniform_(self.in_proj_weight)
        constant_(self.in_proj_bias, 0.0)
        constant_(self.out_proj.bias, 0.0)

    def forward(self, query: Tensor, key: Tensor, value: Tensor,
                key_padding_mask: Optional[Tensor] = None,
                pairwise_features: Optional[Tensor] = None) -> Tuple[Tensor, Optional[Tensor]]:
        if self.batch_first:
            query, key, value = [x.transpose(1, 0) for x in (query, key, value)]
        attn_output, attn_output_weights = self.multi_head_attention_forward(
            query, key, value, self.embed_dim, self.num_heads, self.in_proj_weight,
            self.in_proj_bias, self.dropout, self.out_proj.weight, self.out_proj.bias,
            training=self.training, key_padding_mask=key_padding_mask,
            pairwise_features=pairwise_features,
        )
        if self.batch_first:
            return attn_output.transpose(1, 0), attn_output_weights
        return attn_output, attn_output_weights

    def multi_head_attention_forward(self, query, key, value, embed_dim_to_check, num_heads,
                                     in_proj_weight, in_proj_bias, dropout_p, out_proj_weight,
                                     out_proj_bias, training=True, key_padding_mask=None,
                                     pairwise_features=None):
        tgt_len, bsz, embed_dim = query.shape
        head_dim = embed_dim // num_heads
        q, k, v = F.linear(query, in_proj_weight, in_proj_bias).chunk(3, dim=-1)
        q = q.contiguous().view(tgt_len, bsz * num_heads, head_dim).transpose(0, 1)
        k = k.contiguous().view(k.shape[0], bsz * num_heads, head_dim).transpose(0, 1)
        v = v.contiguous().view(v.shape[0], bsz * num_heads, head_dim).transpose(0, 1)

        if pairwise_features is not None:
            pairwise_features = pairwise_features.permute(1, 2, 0, 3).contiguous()
            pairwise_features = pairwise_features.view(tgt_len, tgt_len, bsz * num_heads, head_dim)
            pairwise_features = pairwise_features.permute(2, 0, 1, 3)

        src_len = k.size(1)
        attn_mask = None
        if key_padding_mask is not None:
            assert key_padding_mask.shape == (bsz, src_len), \
                f"expecting key_padding_mask shape of {(bsz, src_len)}, but got {key_padding_mask.shape}"
            key_padding_mask = (
                key_padding_mask.view(bsz, 1, 1, src_len)
                .expand(-1, num_heads, -1, -1)
                .reshape(bsz * num_heads, 1, src_len)
            )
            attn_mask = key_padding_mask
            assert attn_mask.dtype == torch.bool

        if not training:
            dropout_p = 0.0

        attn_output, attn_output_weights = self._scaled_dot_product_attention(
            q, k, v, attn_mask, dropout_p, pairwise_features=pairwise_features
        )
        attn_output = attn_output.transpose(0, 1).contiguous().view(tgt_len * bsz, embed_dim)
        attn_output = F.linear(attn_output, out_proj_weight, out_proj_bias)
        attn_output = attn_output.view(tgt_len, bsz, attn_output.size(1))
        attn_output_weights = attn_output_weights.view(bsz, num_heads, tgt_len, src_len)
        return attn_output, attn_output_weights

    def _scaled_dot_product_attention(self, q: Tensor, k: Tensor, v: Tensor,
                                      attn_mask: Optional[Tensor] = None, dropout_p: float = 0.0,
                                      pairwise_features: Optional[Tensor] = None
                                      ) -> Tuple[Tensor, Tensor]:
        B, Nt, E = q.shape
        q = q / math.sqrt(E)

        if self.pairwise_featurization:
            if pairwise_features is None:
                raise ValueError()
            q = q.view(-1, self.num_heads, Nt, E)
            q_1 = (q + self.bias_u[None, :, None, :]).view(-1, Nt, E)
            q_2 = (q + self.bias_v[None, :, None, :]).view(-1, Nt, E)
            a_c = torch.einsum("ble,bwe->blw", q_1, k)
            b_d = torch.einsum("ble,blwe->blw", q_2, pairwise_features)
            attn = a_c + b_d
        else:
            # (B, Nt, E) x (B, E, Ns) -> (B, Nt, Ns)
            attn = torch.bmm(q, k.transpose(-2, -1))

        if attn_mask is not None:
            new_attn_mask = torch.zeros_like(attn_mask, dtype=q.dtype)
            new_attn_mask.masked_fill_(attn_mask, float("-inf"))
            attn += attn_mask  # expect: MC509 helper

        attn = F.softmax(attn, dim=-1)
        if dropout_p > 0.0:
            attn = F.dropout(attn, p=dropout_p)
        output = torch.bmm(attn, v)
        return output, attn


class FormulaTransformer(nn.Module):
    """Peak encoder: embeds the peaks of a spectrum and runs the pairwise transformer over them."""

    def __init__(self, hidden_size: int, peak_attn_layers: int, num_heads: int = 8,
                 dropout: float = 0.0, pairwise_featurization: bool = False):
        super().__init__()
        self.intermediate_layer = nn.Linear(hidden_size, hidden_size)
        self.pairwise_featurization = pairwise_featurization
        self.peak_attn_layers = nn.ModuleList([
            TransformerEncoderLayer(d_model=hidden_size, nhead=num_heads,
                                    dim_feedforward=hidden_size * 4, dropout=dropout,
                                    pairwise_featurization=pairwise_featurization)
            for _ in range(peak_attn_layers)
        ])

    def forward(self, peak_features: Tensor, num_peaks: Tensor, pairwise_features=None):
        device = peak_features.device
        peak_tensor = self.intermediate_layer(peak_features)

        # B x Np x d -> Np x B x d
        peak_tensor = peak_tensor.transpose(0, 1)
        peak_dim = peak_tensor.shape[0]
        peaks_aranged = torch.arange(peak_dim).to(device)

        # batch x num peaks
        attn_mask = ~(peaks_aranged[None, :] < num_peaks[:, None])

        for peak_attn_layer in self.peak_attn_layers:
            peak_tensor, pairwise_features = peak_attn_layer(
                peak_tensor, pairwise_features=pairwise_features, src_key_padding_mask=attn_mask,
            )

        # Np x B x d -> B x Np x d, zero the padded peaks before pooling
        peak_tensor = peak_tensor.transpose(0, 1)
        peak_tensor = peak_tensor.masked_fill(attn_mask[:, :, None], 0.0)
        return peak_tensor.sum(1) / num_peaks[:, None].clamp(min=1)
