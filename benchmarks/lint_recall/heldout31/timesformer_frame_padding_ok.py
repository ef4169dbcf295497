"""TimeSformer video classifier with divided space-time attention, written the way
facebookresearch/TimeSformer writes it (timesformer/models/vit.py: ``Block`` with
``attention_type='divided_space_time'``, ``temporal_fc``, the [CLS] token repeated per frame for
the spatial attention and averaged back), for clips with different numbers of frames padded
to the longest, with a ``VideoConfig`` dataclass and a registry of attention types.

Source: conventions.md §1 (HF 4-D masks row) and §2.9, seed self_attention_mask_guide.txt §3 (常见误区) and §7 Q3
"""
from dataclasses import dataclass

import torch
from torch import nn

ATTENTION_TYPES = {}


def register(name):
    def wrap(cls):
        ATTENTION_TYPES[name] = cls
        return cls
    return wrap


@dataclass
class VideoConfig:
    img_size: int = 16
    patch_size: int = 8
    num_frames: int = 4
    embed_dim: int = 32
    num_heads: int = 4
    depth: int = 2
    num_classes: int = 7
    attention_type: str = "divided_space_time"


class Attention(nn.Module):
    def __init__(self, dim, num_heads):
        super().__init__()
        self.num_heads, self.scale = num_heads, (dim // num_heads) ** -0.5
        self.qkv, self.proj = nn.Linear(dim, dim * 3), nn.Linear(dim, dim)

    def forward(self, x, pad_mask=None):
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        attn = (q @ k.transpose(-2, -1)) * self.scale
        if pad_mask is not None:
            attn = attn.masked_fill(pad_mask[:, None, None, :], float("-inf"))
        attn = attn.softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(B, N, C))


@register("divided_space_time")
class Block(nn.Module):
    def __init__(self, dim, num_heads):
        super().__init__()
        self.temporal_norm1, self.temporal_attn = nn.LayerNorm(dim), Attention(dim, num_heads)
        self.temporal_fc = nn.Linear(dim, dim)
        self.norm1, self.attn = nn.LayerNorm(dim), Attention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, B, T, W, frame_pad, frame_keep):
        HW, D = (x.size(1) - 1) // T, x.size(2)
        xt = x[:, 1:, :].reshape(B * HW, T, D)
        res_temporal = self.temporal_attn(self.temporal_norm1(xt), frame_pad.repeat_interleave(HW, dim=0))
        xt = x[:, 1:, :] + self.temporal_fc(res_temporal.reshape(B, HW * T, D))
        init_cls_token = x[:, 0, :].unsqueeze(1)
        cls_token = init_cls_token.repeat(1, T, 1).reshape(B * T, 1, D)
        xs = xt.reshape(B, HW, T, D).transpose(1, 2).reshape(B * T, HW, D)
        res_spatial = self.attn(self.norm1(torch.cat((cls_token, xs), 1)))
        weights = frame_keep.to(x.dtype).unsqueeze(-1)
        cls_token = (res_spatial[:, 0, :].reshape(B, T, D) * weights).sum(1, keepdim=True) / weights.sum(1, keepdim=True)
        res_spatial = res_spatial[:, 1:, :].reshape(B, T, HW, D).transpose(1, 2).reshape(B, HW * T, D)
        x = torch.cat((init_cls_token, xt), 1) + torch.cat((cls_token, res_spatial), 1)
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    def __init__(self, cfg: VideoConfig):
        super().__init__()
        self.cfg = cfg
        num_patches = (cfg.img_size // cfg.patch_size) ** 2
        self.patch_embed = nn.Conv2d(3, cfg.embed_dim, kernel_size=cfg.patch_size, stride=cfg.patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, cfg.embed_dim))
        self.pos_embed = nn.Parameter(torch.randn(1, num_patches + 1, cfg.embed_dim) * 0.02)
        self.time_embed = nn.Parameter(torch.randn(1, cfg.num_frames, cfg.embed_dim) * 0.02)
        block = ATTENTION_TYPES[cfg.attention_type]
        self.blocks = nn.ModuleList(block(cfg.embed_dim, cfg.num_heads) for _ in range(cfg.depth))
        self.norm, self.head = nn.LayerNorm(cfg.embed_dim), nn.Linear(cfg.embed_dim, cfg.num_classes)

    def forward(self, video, num_frames):
        B, T = video.shape[:2]
        frame_keep = torch.arange(T, device=video.device)[None, :] < num_frames[:, None]
        frame_pad = ~frame_keep
        x = self.patch_embed(video.flatten(0, 1))
        W = x.size(-1)
        x = x.flatten(2).transpose(1, 2)
        x = torch.cat((self.cls_token.expand(x.size(0), -1, -1), x), dim=1) + self.pos_embed
        cls_tokens = x[:B, 0, :].unsqueeze(1)
        x = x[:, 1:].reshape(B, T, -1, x.size(-1)).transpose(1, 2)
        x = (x + self.time_embed[:, None, :T]).reshape(B, -1, x.size(-1))
        x = torch.cat((cls_tokens, x), dim=1)
        for blk in self.blocks:
            x = blk(x, B, T, W, frame_pad, frame_keep)
        return self.head(self.norm(x)[:, 0])


if __name__ == "__main__":
    torch.manual_seed(0)
    model = VisionTransformer(VideoConfig()).eval()
    video, num_frames = torch.randn(2, 4, 3, 16, 16), torch.tensor([4, 2])
    video[1, 2:] = 0.0
    with torch.no_grad():
        logits = model(video, num_frames)
        alone = model(video[1:, :2], num_frames[1:])
        print("short clip batched vs alone:", (logits[1] - alone[0]).abs().max().item())
        noisy = video.clone()
        noisy[1, 2:] = torch.randn(2, 3, 16, 16)
        print("padded frames leak:", (model(noisy, num_frames)[1] - logits[1]).abs().max().item())
        print("predicted classes:", logits.argmax(-1).tolist())
