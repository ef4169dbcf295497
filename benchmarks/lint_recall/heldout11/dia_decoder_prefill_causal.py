"""Held-out 11: nari-labs dia as forked by RobertAgee/dia (dia/layers.py `Attention` with
`scaled_dot_product_attention`, `DecoderLayer` self-attention on the prefill, dia/state.py
`DecoderInferenceState` holding the decoder's masks, `create_attn_mask`).

Source: RobertAgee/dia PR #1 ("Fix RuntimeError by ensuring attn_mask is None when is_causal=True":
"avoid passing an explicit attn_mask to F.scaled_dot_product_attention when is_causal=True",
raised during the decoder prefill as `_scaled_dot_product_attention: Explicit attn_mask should not
be set when is_causal=True`). The bug is the fork's call passing the state's mask and
`is_causal=True` together on the prefill; the twin is the PR's change.
Surroundings: the mask built by a helper into an inference-state dataclass, read from it in the
decoder layer and passed by keyword with the flag set from the `prefill` argument.
"""

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


def create_attn_mask(q_padding_mask_1d, k_padding_mask_1d, device, is_causal=False):
    B1, Tq = q_padding_mask_1d.shape
    B2, Tk = k_padding_mask_1d.shape
    p_mask_q = q_padding_mask_1d.unsqueeze(2)  # Shape [B, Tq, 1]
    p_mask_k = k_padding_mask_1d.unsqueeze(1)  # Shape [B, 1, Tk]
    non_pad_attends_non_pad = p_mask_q & p_mask_k
    pad_attends_pad = (~p_mask_q) & (~p_mask_k)
    mask = non_pad_attends_non_pad | pad_attends_pad  # Shape [B, Tq, Tk]
    if is_causal:
        causal_mask_2d = torch.tril(torch.ones((Tq, Tk), dtype=torch.bool, device=device))
        mask = mask & causal_mask_2d
    return mask.unsqueeze(1)  # Shape [B, 1, Tq, Tk]


@dataclass
class DecoderInferenceState:
    device: torch.device
    casual_attn_mask: torch.Tensor

    @classmethod
    def new(cls, dec_padding_mask):
        casual_attn_mask = create_attn_mask(dec_padding_mask, dec_padding_mask, dec_padding_mask.device,
                                            is_causal=True)
        return cls(device=dec_padding_mask.device, casual_attn_mask=casual_attn_mask)


class Attention(nn.Module):
    def __init__(self, embed_dim, num_heads, head_dim):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.q_proj = nn.Linear(embed_dim, num_heads * head_dim, bias=False)
        self.k_proj = nn.Linear(embed_dim, num_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(embed_dim, num_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(num_heads * head_dim, embed_dim, bias=False)

    def forward(self, Xq, Xkv, attn_mask=None, prefill=False, is_causal=False):
        B, T, _ = Xq.shape
        Xq_BxNxTxH = self.q_proj(Xq).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)
        attn_k = self.k_proj(Xkv).view(B, -1, self.num_heads, self.head_dim).transpose(1, 2)
        attn_v = self.v_proj(Xkv).view(B, -1, self.num_heads, self.head_dim).transpose(1, 2)
        attn_output = F.scaled_dot_product_attention(
            Xq_BxNxTxH,
            attn_k,
            attn_v,
            attn_mask=attn_mask,  # expect: MC506 flag
            scale=1.0,
            is_causal=is_causal,
        )
        attn_output = attn_output.transpose(1, 2).contiguous()
        return self.o_proj(attn_output.view(B, T, -1))


class DecoderLayer(nn.Module):
    def __init__(self, embed_dim=32, num_heads=4, head_dim=8):
        super().__init__()
        self.pre_sa_norm = nn.RMSNorm(embed_dim, eps=1e-5)
        self.self_attention = Attention(embed_dim, num_heads, head_dim)
        self.pre_mlp_norm = nn.RMSNorm(embed_dim, eps=1e-5)
        self.mlp = nn.Sequential(nn.Linear(embed_dim, 4 * embed_dim), nn.SiLU(), nn.Linear(4 * embed_dim, embed_dim))

    def forward(self, x, state, prefill=False):
        residual = x
        x_norm = self.pre_sa_norm(x)
        self_attn_mask = state.casual_attn_mask
        sa_out = self.self_attention(
            Xq=x_norm,
            Xkv=x_norm,
            attn_mask=self_attn_mask,
            prefill=prefill,
            is_causal=prefill,
        )
        x = residual + sa_out
        return x + self.mlp(self.pre_mlp_norm(x))
