"""TimeSformer with divided space-time attention, fine-tuned on clips of different lengths.

Written after facebookresearch/TimeSformer (timesformer/models/vit.py: PatchEmbed over
the frames, ``cls_token``, ``pos_embed`` and ``time_embed``, Attention, Block with
``attention_type='divided_space_time'`` running temporal attention, ``temporal_fc`` and
spatial attention with the class token repeated per frame and averaged back,
VisionTransformer.forward_features). Short clips are zero-padded to the longest clip of
the batch and carry a frame mask; the class token is averaged over real frames only.

Source: seed masked_fill_inplace.txt (注意, 梯度计算风险), conventions.md §1 (direction cheat-sheet).
"""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

DIRECTIONS = {"right": (0, 1), "left": (0, -1), "down": (1, 0), "up": (-1, 0)}


class PatchEmbed(nn.Module):
    def __init__(self, img_size=32, patch_size=8, in_chans=3, embed_dim=64):
        super().__init__()
        self.num_patches = (img_size // patch_size) ** 2
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x):
        B, C, T, H, W = x.shape
        x = x.permute(0, 2, 1, 3, 4).reshape(B * T, C, H, W)
        x = self.proj(x)
        W = x.size(-1)
        return x.flatten(2).transpose(1, 2), T, W


class Attention(nn.Module):
    def __init__(self, dim, num_heads=4, qkv_bias=True, attn_drop=0.0):
        super().__init__()
        self.num_heads, self.scale = num_heads, (dim // num_heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, frame_keep=None):
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        attn = (q @ k.transpose(-2, -1)) * self.scale
        if frame_keep is not None:
            attn = attn.masked_fill(~frame_keep[:, None, None, :], torch.finfo(attn.dtype).min)
        attn = attn.softmax(dim=-1)
        if frame_keep is not None:
            attn.masked_fill_(~frame_keep[:, None, :, None], 0.0)  # expect: MC505 timesformer
        attn = self.attn_drop(attn)
        return self.proj((attn @ v).transpose(1, 2).reshape(B, N, C))


class Block(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=4.0):
        super().__init__()
        self.temporal_norm1 = nn.LayerNorm(dim)
        self.temporal_attn = Attention(dim, num_heads)
        self.temporal_fc = nn.Linear(dim, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, int(dim * mlp_ratio)), nn.GELU(), nn.Linear(int(dim * mlp_ratio), dim))

    def forward(self, x, B, T, W, frame_mask=None):
        num_spatial_tokens = (x.size(1) - 1) // T
        H = num_spatial_tokens // W
        M = x.size(-1)
        # Temporal: 'b (h w t) m -> (b h w) t m'
        xt = x[:, 1:, :].reshape(B * H * W, T, M)
        frame_keep = frame_mask.repeat_interleave(H * W, dim=0) if frame_mask is not None else None
        res_temporal = self.temporal_attn(self.temporal_norm1(xt), frame_keep=frame_keep)
        res_temporal = self.temporal_fc(res_temporal.reshape(B, H * W * T, M))
        xt = x[:, 1:, :] + res_temporal
        # Spatial: 'b (h w t) m -> (b t) (h w) m'
        init_cls_token = x[:, 0, :].unsqueeze(1)
        cls_token = init_cls_token.repeat(1, T, 1).reshape(B * T, 1, M)
        xs = xt.reshape(B, H * W, T, M).transpose(1, 2).reshape(B * T, H * W, M)
        res_spatial = self.attn(self.norm1(torch.cat((cls_token, xs), 1)))
        cls_token = res_spatial[:, 0, :].reshape(B, T, M)
        if frame_mask is not None:
            cls_token = (cls_token * frame_mask[..., None]).sum(1, keepdim=True) / frame_mask.sum(1)[:, None, None]
        else:
            cls_token = torch.mean(cls_token, 1, True)
        res_spatial = res_spatial[:, 1:, :].reshape(B, T, H * W, M).transpose(1, 2).reshape(B, H * W * T, M)
        x = torch.cat((init_cls_token, xt), 1) + torch.cat((cls_token, res_spatial), 1)
        return x + self.mlp(self.norm2(x))


@dataclass
class TimeSformerConfig:
    img_size: int = 32
    patch_size: int = 8
    num_classes: int = len(DIRECTIONS)
    num_frames: int = 8
    embed_dim: int = 64
    depth: int = 2
    num_heads: int = 4


class VisionTransformer(nn.Module):
    def __init__(self, cfg: TimeSformerConfig):
        super().__init__()
        self.patch_embed = PatchEmbed(cfg.img_size, cfg.patch_size, 3, cfg.embed_dim)
        num_patches = self.patch_embed.num_patches
        self.cls_token = nn.Parameter(torch.zeros(1, 1, cfg.embed_dim))
        self.pos_embed = nn.Parameter(torch.randn(1, num_patches + 1, cfg.embed_dim) * 0.02)
        self.time_embed = nn.Parameter(torch.randn(1, cfg.num_frames, cfg.embed_dim) * 0.02)
        self.blocks = nn.ModuleList(Block(cfg.embed_dim, cfg.num_heads) for _ in range(cfg.depth))
        self.norm = nn.LayerNorm(cfg.embed_dim)
        self.head = nn.Linear(cfg.embed_dim, cfg.num_classes)

    def forward_features(self, x, frame_mask=None):
        B = x.shape[0]
        x, T, W = self.patch_embed(x)
        x = torch.cat((self.cls_token.expand(x.size(0), -1, -1), x), dim=1) + self.pos_embed
        cls_tokens = x[:B, 0, :].unsqueeze(1)
        n, m = x.size(1) - 1, x.size(2)
        # '(b t) n m -> (b n) t m', add time_embed, then '(b n) t m -> b (n t) m'
        x = x[:, 1:].reshape(B, T, n, m).transpose(1, 2).reshape(B * n, T, m) + self.time_embed[:, :T]
        x = torch.cat((cls_tokens, x.reshape(B, n * T, m)), dim=1)
        for blk in self.blocks:
            x = blk(x, B, T, W, frame_mask=frame_mask)
        return self.norm(x)[:, 0]

    def forward(self, pixel_values, frame_mask=None, labels=None):
        logits = self.head(self.forward_features(pixel_values, frame_mask))
        return {"logits": logits, "loss": F.cross_entropy(logits, labels) if labels is not None else None}


def moving_square_clip(direction, num_frames, generator, size=32, side=8):
    clip = torch.zeros(3, num_frames, size, size)
    y, x = (int(v) for v in torch.randint(8, size - 16, (2,), generator=generator))
    dy, dx = DIRECTIONS[direction]
    colour = torch.rand(3, generator=generator)[:, None, None] * 0.5 + 0.5
    for t in range(num_frames):
        clip[:, t, y + 2 * dy * t : y + 2 * dy * t + side, x + 2 * dx * t : x + 2 * dx * t + side] = colour
    return clip


def collate_clips(examples):
    T = max(e["video"].shape[1] for e in examples)
    pixel_values = torch.zeros(len(examples), 3, T, *examples[0]["video"].shape[2:])
    frame_mask = torch.zeros(len(examples), T, dtype=torch.bool)
    for i, e in enumerate(examples):
        pixel_values[i, :, : e["video"].shape[1]] = e["video"]
        frame_mask[i, : e["video"].shape[1]] = True
    return {"pixel_values": pixel_values, "frame_mask": frame_mask, "labels": torch.tensor([e["label"] for e in examples])}


if __name__ == "__main__":
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    names = list(DIRECTIONS)
    data = [{"video": moving_square_clip(names[i % 4], int(torch.randint(3, 9, (1,), generator=g)), g), "label": i % 4} for i in range(160)]
    model = VisionTransformer(TimeSformerConfig())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    try:
        for epoch in range(8):
            for b in range(0, 128, 16):
                out = model(**collate_clips(data[b : b + 16]))
                optimizer.zero_grad()
                out["loss"].backward()
                optimizer.step()
            if epoch % 2 == 0:
                print(f"epoch {epoch} loss {out['loss'].item():.4f}")
    except RuntimeError as err:
        print("training failed:", err)
    model.eval()
    with torch.no_grad():
        batch = collate_clips(data[128:])
        acc = (model(batch["pixel_values"], batch["frame_mask"])["logits"].argmax(-1) == batch["labels"]).float().mean()
        print(f"eval accuracy {acc.item():.3f}")
        short = min(data, key=lambda e: e["video"].shape[1])
        long = max(data, key=lambda e: e["video"].shape[1])
        both, alone = collate_clips([short, long]), collate_clips([short])
        diff = model(both["pixel_values"], both["frame_mask"])["logits"][0] - model(alone["pixel_values"], alone["frame_mask"])["logits"][0]
        print("short clip padded vs alone:", diff.abs().max().item())
