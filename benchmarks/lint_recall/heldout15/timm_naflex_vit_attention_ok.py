"""Held-out 15 (correct twin): a timm-style Vision Transformer for images of native aspect ratio (NaFlex-like):
each image gives a different number of patches, the batch is padded to the longest patch
sequence, and a `patch_valid` mask marks the real patches. The `Attention` block has timm's
`fused_attn` switch (SDPA when available, an explicit softmax when `TIMM_FUSED_ATTN=0`, e.g. for
export), and the mask is applied in the explicit path by a `maybe_add_mask` helper.

Source: huggingface/pytorch-image-models PR #2674 (timm's `maybe_add_mask` adds the mask to the
scores and expects a float mask; a bool mask is added as 0/1), huggingface/transformers PR #41443
(bool attention_mask added in eager_attention_forward), conventions.md §2.9. The model builds a
bool keep-mask, which SDPA reads correctly, and the non-fused path adds it to the logits.
Twin: the model builds a float additive mask (0 / -inf) from `patch_valid`, which both the fused and the explicit path can take.
"""

import os
from typing import Final, Optional

import torch
import torch.nn.functional as F
from torch import nn


def use_fused_attn() -> bool:
    return hasattr(F, "scaled_dot_product_attention") and os.environ.get("TIMM_FUSED_ATTN", "1") != "0"


def maybe_add_mask(scores: torch.Tensor, attn_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    return scores if attn_mask is None else scores + attn_mask


class Attention(nn.Module):
    fused_attn: Final[bool]

    def __init__(self, dim: int, num_heads: int = 8, qkv_bias: bool = True, qk_norm: bool = False,
                 attn_drop: float = 0.0, proj_drop: float = 0.0):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.fused_attn = use_fused_attn()
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.q_norm = nn.LayerNorm(self.head_dim) if qk_norm else nn.Identity()
        self.k_norm = nn.LayerNorm(self.head_dim) if qk_norm else nn.Identity()
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x: torch.Tensor, attn_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q, k = self.q_norm(q), self.k_norm(k)
        if self.fused_attn:
            x = F.scaled_dot_product_attention(
                q, k, v, attn_mask=attn_mask, dropout_p=self.attn_drop.p if self.training else 0.0)
        else:
            q = q * self.scale
            attn = q @ k.transpose(-2, -1)
            attn = maybe_add_mask(attn, attn_mask)
            attn = self.attn_drop(attn.softmax(dim=-1))
            x = attn @ v
        x = x.transpose(1, 2).reshape(B, N, C)
        return self.proj_drop(self.proj(x))


class Block(nn.Module):
    def __init__(self, dim: int, num_heads: int, mlp_ratio: float = 4.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        hidden = int(dim * mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

    def forward(self, x: torch.Tensor, attn_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), attn_mask=attn_mask)
        return x + self.mlp(self.norm2(x))


class NaFlexVit(nn.Module):
    def __init__(self, patch_size: int = 8, in_chans: int = 3, embed_dim: int = 64, depth: int = 2,
                 num_heads: int = 4, num_classes: int = 10, max_patches: int = 256):
        super().__init__()
        self.patch_embed = nn.Linear(in_chans * patch_size * patch_size, embed_dim)
        self.pos_embed = nn.Parameter(torch.randn(1, max_patches, embed_dim) * 0.02)
        self.blocks = nn.ModuleList([Block(embed_dim, num_heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(embed_dim, eps=1e-6)
        self.head = nn.Linear(embed_dim, num_classes)

    def forward_features(self, patches: torch.Tensor, patch_valid: torch.Tensor) -> torch.Tensor:
        # patches: (B, N, C*P*P) flattened patches, padded; patch_valid: (B, N) bool, True = real patch
        x = self.patch_embed(patches) + self.pos_embed[:, : patches.shape[1]]
        attn_mask = torch.zeros_like(patch_valid, dtype=x.dtype).masked_fill(~patch_valid, float("-inf"))[:, None, None, :]
        for blk in self.blocks:
            x = blk(x, attn_mask=attn_mask)
        return self.norm(x)

    def forward(self, patches: torch.Tensor, patch_valid: torch.Tensor) -> torch.Tensor:
        x = self.forward_features(patches, patch_valid)
        keep = patch_valid.unsqueeze(-1).to(x.dtype)
        pooled = (x * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1.0)
        return self.head(pooled)
