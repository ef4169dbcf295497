"""timm-style ViT for images of different sizes: patches of each image padded to a common count,
a `patch_valid` keep-mask (True = real patch), a class token, timm's `Attention` with `fused_attn`
(F.scaled_dot_product_attention) and the eager path that adds `attn_mask` to the scores.

timm's eager path expects an additive float mask (`create_attention_mask` fills `finfo(dtype).min`
where a key is not valid); the helper here returns the bool keep-mask, which SDPA accepts and the
eager path adds.

Source: conventions.md §2.9 (a 4-D bool mask given to eager attention is added: True adds +1 and
masks nothing), huggingface/transformers#32113 (boolean masks reaching code that adds the mask).
"""
import os
from typing import Final, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


def use_fused_attn() -> bool:
    return int(os.environ.get("TIMM_FUSED_ATTN", "1")) > 0


def create_attention_mask(patch_valid: torch.Tensor, num_prefix_tokens: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """(B, N) patch validity -> (B, 1, Q, K) attention mask over prefix + patch tokens."""
    patch_valid = patch_valid.bool()
    B = patch_valid.shape[0]
    if num_prefix_tokens > 0:
        prefix_valid = patch_valid.new_ones((B, num_prefix_tokens), dtype=torch.bool)
        patch_valid = torch.cat([prefix_valid, patch_valid], dim=1)
    kv_len = patch_valid.shape[1]
    mask_bool = patch_valid[:, None, None, :].expand(B, 1, kv_len, kv_len)
    return mask_bool  # expect: MC509 timm


class Attention(nn.Module):
    fused_attn: Final[bool]

    def __init__(self, dim: int, num_heads: int = 4, qkv_bias: bool = True, attn_drop: float = 0.0):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.fused_attn = use_fused_attn()
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, attn_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        if self.fused_attn:
            x = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=self.attn_drop.p if self.training else 0.0)
        else:
            q = q * self.scale
            attn = q @ k.transpose(-2, -1)
            if attn_mask is not None:
                attn = attn + attn_mask  # also: MC509
            attn = attn.softmax(dim=-1)
            attn = self.attn_drop(attn)
            x = attn @ v
        return self.proj(x.transpose(1, 2).reshape(B, N, C))


class Block(nn.Module):
    def __init__(self, dim: int, num_heads: int, mlp_ratio: float = 4.0):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim, eps=1e-6), Attention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, int(dim * mlp_ratio)), nn.GELU(), nn.Linear(int(dim * mlp_ratio), dim))

    def forward(self, x: torch.Tensor, attn_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), attn_mask=attn_mask)
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    def __init__(self, patch_size=4, in_chans=3, embed_dim=32, depth=2, num_heads=4, num_classes=10, max_patches=64):
        super().__init__()
        self.patch_size, self.num_prefix_tokens = patch_size, 1
        self.patch_embed = nn.Linear(patch_size * patch_size * in_chans, embed_dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.randn(1, max_patches, embed_dim) * 0.02)
        self.blocks = nn.ModuleList([Block(embed_dim, num_heads) for _ in range(depth)])
        self.norm, self.head = nn.LayerNorm(embed_dim, eps=1e-6), nn.Linear(embed_dim, num_classes)

    def forward(self, patches: torch.Tensor, patch_valid: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(patches) + self.pos_embed[:, : patches.shape[1]]
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        attn_mask = create_attention_mask(patch_valid, self.num_prefix_tokens, dtype=x.dtype)
        for blk in self.blocks:
            x = blk(x, attn_mask=attn_mask)
        return self.head(self.norm(x)[:, 0])


def patchify(img: torch.Tensor, p: int) -> torch.Tensor:
    c, h, w = img.shape
    return img.reshape(c, h // p, p, w // p, p).permute(1, 3, 2, 4, 0).reshape((h // p) * (w // p), p * p * c)


if __name__ == "__main__":
    torch.manual_seed(0)
    model = VisionTransformer().eval()
    small, large = patchify(torch.randn(3, 8, 12), 4), patchify(torch.randn(3, 16, 16), 4)
    patches = torch.zeros(2, large.shape[0], large.shape[1])
    patches[0, : small.shape[0]], patches[1] = small, large
    patch_valid = torch.arange(large.shape[0])[None] < torch.tensor([[small.shape[0]], [large.shape[0]]])
    with torch.no_grad():
        fused = model(patches, patch_valid)
        alone = model(small[None], torch.ones(1, small.shape[0], dtype=torch.bool))
        for blk in model.blocks:
            blk.attn.fused_attn = False
        eager = model(patches, patch_valid)
    print("fused: padded vs alone:", (fused[0] - alone[0]).abs().max().item())
    print("eager vs fused:", (eager - fused).abs().max().item())
