"""Held-out 16 (correct twin): a timm-style NaFlex ViT with its data collator in one file. Images keep their
aspect ratio: each is cut into a different number of patches, the `NaFlexCollator` at the bottom
pads the batch to the longest patch sequence and returns `patches`, `patch_coord` and a
`patch_valid` mask (1 = real patch). The model embeds the patches with 2-D learned positions
looked up from `patch_coord`, prepends a class token, turns `patch_valid` into an additive mask
with the module-level `create_attention_mask` (as in timm's naflexvit.py) and pools over the real
patches.

Source: conventions.md §1 (masks from data pipelines and tokenizers are int64; "only bool and
floating types" are accepted by the attention APIs), ZikangZhou/HiVT#44 (on `~` applied to a
padding mask: "~True=-2 and ~False=-1"). The collator builds `patch_valid` as int64 and
`create_attention_mask` inverts it with `~` without converting it to bool first.
Twin: `create_attention_mask` inverts `~patch_valid.bool()` (timm converts the mask to bool first).
"""

from typing import Dict, List, Tuple

import torch
import torch.nn.functional as F
from torch import nn


def create_attention_mask(patch_valid: torch.Tensor, num_prefix_tokens: int = 1,
                          dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """(B, N) patch validity -> (B, 1, 1, num_prefix_tokens + N) additive mask."""
    if num_prefix_tokens > 0:
        prefix_valid = patch_valid.new_ones((patch_valid.shape[0], num_prefix_tokens))
        patch_valid = torch.cat([prefix_valid, patch_valid], dim=1)
    mask_float = torch.zeros(patch_valid.shape, dtype=dtype, device=patch_valid.device)
    mask_float = mask_float.masked_fill(~patch_valid.bool(), torch.finfo(dtype).min)
    return mask_float[:, None, None, :]


class Attention(nn.Module):
    def __init__(self, dim: int, num_heads: int = 4):
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor) -> torch.Tensor:
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4).unbind(0)
        x = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        return self.proj(x.transpose(1, 2).reshape(B, N, C))


class Block(nn.Module):
    def __init__(self, dim: int, num_heads: int):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim, eps=1e-6), Attention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), attn_mask)
        return x + self.mlp(self.norm2(x))


class NaFlexVit(nn.Module):
    def __init__(self, patch_size: int = 8, in_chans: int = 3, embed_dim: int = 64, depth: int = 2,
                 num_heads: int = 4, num_classes: int = 10, max_grid: int = 16):
        super().__init__()
        self.patch_embed = nn.Linear(in_chans * patch_size * patch_size, embed_dim)
        self.pos_embed = nn.Parameter(torch.randn(max_grid, max_grid, embed_dim) * 0.02)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.blocks = nn.ModuleList([Block(embed_dim, num_heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(embed_dim, eps=1e-6)
        self.head = nn.Linear(embed_dim, num_classes)

    def forward(self, patches: torch.Tensor, patch_coord: torch.Tensor, patch_valid: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(patches) + self.pos_embed[patch_coord[..., 0], patch_coord[..., 1]]
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        attn_mask = create_attention_mask(patch_valid, num_prefix_tokens=1, dtype=x.dtype)
        for blk in self.blocks:
            x = blk(x, attn_mask)
        x = self.norm(x)
        keep = patch_valid.unsqueeze(-1).to(x.dtype)
        pooled = (x[:, 1:] * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1.0)
        return self.head(pooled)


class NaFlexCollator:
    def __init__(self, patch_size: int = 8):
        self.patch_size = patch_size

    def patchify(self, img: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        p = self.patch_size
        c, h, w = img.shape
        gh, gw = h // p, w // p
        patches = img[:, : gh * p, : gw * p].reshape(c, gh, p, gw, p).permute(1, 3, 0, 2, 4).reshape(gh * gw, c * p * p)
        coord = torch.stack(torch.meshgrid(torch.arange(gh), torch.arange(gw), indexing="ij"), dim=-1).reshape(-1, 2)
        return patches, coord

    def __call__(self, batch: List[Tuple[torch.Tensor, int]]) -> Tuple[Dict[str, torch.Tensor], torch.Tensor]:
        items = [self.patchify(img) for img, _ in batch]
        max_len = max(p.shape[0] for p, _ in items)
        patches = torch.zeros(len(batch), max_len, items[0][0].shape[1])
        patch_coord = torch.zeros(len(batch), max_len, 2, dtype=torch.long)
        patch_valid = torch.zeros(len(batch), max_len, dtype=torch.long)
        for i, (p, coord) in enumerate(items):
            patches[i, : p.shape[0]], patch_coord[i, : p.shape[0]] = p, coord
            patch_valid[i, : p.shape[0]] = 1
        targets = torch.tensor([t for _, t in batch])
        return {"patches": patches, "patch_coord": patch_coord, "patch_valid": patch_valid}, targets


if __name__ == "__main__":
    torch.manual_seed(0)
    collate, model = NaFlexCollator(), NaFlexVit().eval()
    wide, tall = torch.randn(3, 32, 64), torch.randn(3, 48, 16)
    inputs, targets = collate([(wide, 3), (tall, 7)])
    with torch.no_grad():
        try:
            logits = model(**inputs)
            alone = model(**collate([(tall, 7)])[0])
            print("tall image padded vs alone:", float((logits[1] - alone[0]).abs().max()))
        except RuntimeError as err:
            print("forward:", err)
