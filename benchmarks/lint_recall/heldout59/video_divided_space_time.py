"""Video action recognition with divided space-time attention over joint frame-patch tokens.

Clips of T frames are cut into P patches each and kept as one sequence of T * P tokens. Spatial
layers let a patch attend to the patches of its own frame, temporal layers to the same patch
position in every frame. FlexAttention block masks serve the GPU; the dense additive biases
serve the reference path used on CPU and when comparing against the kernel.

Source: seed self_attention_mask_guide.txt §6 (块状sparse attention, create_block_mask); conventions.md §2.3
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
except ImportError:
    create_block_mask = flex_attention = None


def spatial_temporal_layout(frames, patches, device=None):
    n = frames * patches
    idx = torch.arange(n, device=device)
    frame_of, slot_of = idx // patches, idx % patches
    spatial = torch.zeros(n, n, device=device)
    for f in range(frames):
        s = f * patches
        spatial[s:s + patches, s:s + patches] = 0
    spatial[spatial == 0] = float("-inf")  # expect: MC504 builder
    temporal = torch.full((n, n), float("-inf"), device=device)
    temporal.masked_fill_(slot_of[:, None] == slot_of[None, :], 0.0)
    return frame_of, slot_of, spatial, temporal


def make_block_masks(frame_of, slot_of):
    n = frame_of.numel()

    def same_frame(b, h, q_idx, kv_idx):
        return frame_of[q_idx] == frame_of[kv_idx]

    def same_slot(b, h, q_idx, kv_idx):
        return slot_of[q_idx] == slot_of[kv_idx]

    device = frame_of.device
    return {
        "spatial": create_block_mask(same_frame, None, None, n, n, device=device),
        "temporal": create_block_mask(same_slot, None, None, n, n, device=device),
    }


class FactorizedAttention(nn.Module):
    def __init__(self, dim, heads, kind):
        super().__init__()
        self.heads, self.kind = heads, kind
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, layout):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if layout["use_flex"]:
            y = flex_attention(q, k, v, block_mask=layout["block_masks"][self.kind])
        else:
            scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
            y = torch.softmax(scores + layout[self.kind], dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, n, d))


class DividedBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm_t = nn.LayerNorm(dim)
        self.temporal = FactorizedAttention(dim, heads, "temporal")
        self.norm_s = nn.LayerNorm(dim)
        self.spatial = FactorizedAttention(dim, heads, "spatial")
        self.norm_m = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, layout):
        x = x + self.temporal(self.norm_t(x), layout)
        x = x + self.spatial(self.norm_s(x), layout)
        return x + self.mlp(self.norm_m(x))


class VideoClassifier(nn.Module):
    def __init__(self, classes=10, frames=4, size=32, patch=8, dim=64, heads=4, depth=2):
        super().__init__()
        self.frames, self.patches = frames, (size // patch) ** 2
        self.embed = nn.Conv2d(3, dim, patch, stride=patch)
        self.space_pos = nn.Parameter(torch.zeros(1, 1, self.patches, dim))
        self.time_pos = nn.Parameter(torch.zeros(1, frames, 1, dim))
        nn.init.trunc_normal_(self.space_pos, std=0.02)
        nn.init.trunc_normal_(self.time_pos, std=0.02)
        self.blocks = nn.ModuleList(DividedBlock(dim, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)
        frame_of, slot_of, spatial, temporal = spatial_temporal_layout(frames, self.patches)
        self.register_buffer("frame_of", frame_of, persistent=False)
        self.register_buffer("slot_of", slot_of, persistent=False)
        self.register_buffer("spatial_bias", spatial, persistent=False)
        self.register_buffer("temporal_bias", temporal, persistent=False)

    def layout(self, device):
        use_flex = flex_attention is not None and device.type == "cuda"
        layout = {"use_flex": use_flex, "spatial": self.spatial_bias, "temporal": self.temporal_bias}
        if use_flex:
            layout["block_masks"] = make_block_masks(self.frame_of, self.slot_of)
        return layout

    def forward(self, clips):
        b, t = clips.shape[:2]
        x = self.embed(clips.flatten(0, 1)).flatten(2).transpose(1, 2)
        x = x.view(b, t, self.patches, -1) + self.space_pos + self.time_pos
        x = x.flatten(1, 2)
        layout = self.layout(clips.device)
        for block in self.blocks:
            x = block(x, layout)
        return self.head(self.norm(x).mean(dim=1))


def synthetic_clips(n, classes=10, frames=4, size=32):
    labels = torch.randint(0, classes, (n,))
    clips = torch.randn(n, frames, 3, size, size) * 0.1
    shift = (labels[:, None] * torch.arange(frames)[None]) % size
    for i in range(n):
        for f in range(frames):
            clips[i, f, :, :, shift[i, f]] += 1.0
    return clips, labels


def train(model, steps=50, batch=16, lr=1e-3):
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    for _ in range(steps):
        clips, labels = synthetic_clips(batch)
        loss = F.cross_entropy(model(clips), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return loss.item()


@torch.no_grad()
def top1(model, n=128):
    clips, labels = synthetic_clips(n)
    return (model(clips).argmax(-1) == labels).float().mean().item()
