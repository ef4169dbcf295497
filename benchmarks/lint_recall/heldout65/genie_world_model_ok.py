"""
Genie-style dynamics model (Bruce et al., 2024): a spatiotemporal transformer
over video tokenizer codes that predicts the next frame's tokens MaskGIT-style,
conditioned on discrete latent actions. Spatial attention is bidirectional
within a frame, temporal attention is causal across frames at each spatial
position; episodes of different lengths are padded at the end.

Source: NVIDIA/apex#1052 (conventions.md §3 item 18); huggingface/lerobot PR #710 (conventions.md §3 item 19); conventions.md §2.3
"""

import math
import re
import sys

import torch
import torch.nn.functional as F
from torch import nn, einsum


def exists(val):
    return val is not None


def rearrange(t, pattern, **sizes):
    left, right = ([g.split() if g else ([] if s == '1' else [s]) for g, s in re.findall(r'\(([^)]*)\)|(\S+)', side)] for side in pattern.split('->'))
    for group, dim in zip(left, t.shape):
        unknown = [name for name in group if name not in sizes]
        if unknown:
            sizes[unknown[0]] = dim // math.prod(sizes[name] for name in group if name in sizes)
    names = [name for group in left for name in group]
    t = t.reshape(*[sizes[name] for name in names]).permute(*[names.index(name) for group in right for name in group])
    return t.reshape(*[math.prod(sizes[name] for name in group) for group in right])


class Attention(nn.Module):
    def __init__(self, dim, *, dim_head=32, heads=4, bf16_logits=False):
        super().__init__()
        self.heads = heads
        self.scale = dim_head ** -0.5
        self.bf16_logits = bf16_logits
        self.norm = nn.LayerNorm(dim)
        self.to_qkv = nn.Linear(dim, dim_head * heads * 3, bias=False)
        self.to_out = nn.Linear(dim_head * heads, dim, bias=False)

    def forward(self, x, attn_mask=None):
        q, k, v = self.to_qkv(self.norm(x)).chunk(3, dim=-1)
        q, k, v = map(lambda t: rearrange(t, 'b n (h d) -> b h n d', h=self.heads), (q, k, v))

        with torch.autocast(device_type=x.device.type, dtype=torch.bfloat16, enabled=self.bf16_logits):
            sim = einsum('b h i d, b h j d -> b h i j', q, k) * self.scale

        if exists(attn_mask):
            sim = sim.masked_fill(~attn_mask, torch.finfo(sim.dtype).min)

        attn = sim.float().softmax(dim=-1)
        out = einsum('b h i j, b h j d -> b h i d', attn, v)
        return self.to_out(rearrange(out, 'b h n d -> b n (h d)'))


class STBlock(nn.Module):
    def __init__(self, dim, *, dim_head, heads, ff_mult=4, bf16_logits=False):
        super().__init__()
        self.spatial_attn = Attention(dim, dim_head=dim_head, heads=heads, bf16_logits=bf16_logits)
        self.temporal_attn = Attention(dim, dim_head=dim_head, heads=heads, bf16_logits=bf16_logits)
        self.ff = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim * ff_mult), nn.GELU(), nn.Linear(dim * ff_mult, dim))

    def forward(self, x, temporal_mask):
        b, t, h, w, _ = x.shape
        x = rearrange(x, 'b t h w d -> (b t) (h w) d')
        x = self.spatial_attn(x) + x
        x = rearrange(x, '(b t) (h w) d -> (b h w) t d', b=b, h=h)
        x = self.temporal_attn(x, attn_mask=temporal_mask) + x
        x = self.ff(x) + x
        return rearrange(x, '(b h w) t d -> b t h w d', b=b, h=h)


class DynamicsModel(nn.Module):
    def __init__(self, *, codebook_size=64, num_actions=8, dim=32, depth=2, dim_head=16, heads=2, max_frames=16, frame_size=(4, 4), bf16_logits=False):
        super().__init__()
        self.codebook_size = codebook_size
        self.mask_token_id = codebook_size
        self.token_emb = nn.Embedding(codebook_size + 1, dim)
        self.action_emb = nn.Embedding(num_actions, dim)
        self.time_pos_emb = nn.Parameter(torch.randn(max_frames, 1, 1, dim) * 0.02)
        self.space_pos_emb = nn.Parameter(torch.randn(1, *frame_size, dim) * 0.02)
        self.blocks = nn.ModuleList([STBlock(dim, dim_head=dim_head, heads=heads, bf16_logits=bf16_logits) for _ in range(depth)])
        self.to_logits = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, codebook_size))

    def forward(self, video_ids, actions, frame_mask=None):
        b, t, h, w = video_ids.shape
        x = self.token_emb(video_ids) + self.time_pos_emb[:t] + self.space_pos_emb
        x[:, 1:] = x[:, 1:] + self.action_emb(actions)[:, :, None, None, :]

        causal = torch.ones((t, t), dtype=torch.bool, device=video_ids.device).tril()
        temporal_mask = causal[None, None]
        if exists(frame_mask):
            frame_keep = frame_mask[:, None, None, :].expand(-1, h * w, -1, -1).reshape(b * h * w, 1, 1, t)
            temporal_mask = temporal_mask & frame_keep

        for block in self.blocks:
            x = block(x, temporal_mask)
        return self.to_logits(x)

    def loss(self, video_ids, actions, frame_mask, mask_prob=0.5):
        b, t, h, w = video_ids.shape
        token_mask = torch.rand(b, t, h, w) < mask_prob
        token_mask[:, 0] = False
        inputs = video_ids.masked_fill(token_mask, self.mask_token_id)
        logits = self.forward(inputs, actions, frame_mask=frame_mask)
        labels = video_ids.masked_fill(~token_mask | ~frame_mask[:, :, None, None], -100)
        return F.cross_entropy(logits.float().reshape(-1, self.codebook_size), labels.reshape(-1), ignore_index=-100)

    @torch.no_grad()
    def predict_next_frame(self, past_ids, actions, steps=4):
        b, t, h, w = past_ids.shape
        frame = torch.full((b, 1, h, w), self.mask_token_id, dtype=torch.long)
        for step in range(steps):
            logits = self.forward(torch.cat((past_ids, frame), dim=1), actions)[:, -1].float()
            confidence, pred = logits.softmax(dim=-1).max(dim=-1)
            still_masked = frame[:, 0] == self.mask_token_id
            num_reveal = math.ceil(h * w * (step + 1) / steps) - int((~still_masked[0]).sum())
            confidence = confidence.masked_fill(~still_masked, -1.)
            reveal = confidence.flatten(1).topk(max(num_reveal, 0), dim=-1).indices
            frame[:, 0].view(b, -1).scatter_(1, reveal, pred.flatten(1).gather(1, reveal))
        return frame


if __name__ == '__main__':
    torch.manual_seed(0)
    model = DynamicsModel(bf16_logits='--bf16' in sys.argv[1:])
    video_ids = torch.randint(0, 64, (2, 6, 4, 4))
    actions = torch.randint(0, 8, (2, 5))
    frame_mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    loss = model.loss(video_ids, actions, frame_mask)
    loss.backward()
    next_frame = model.predict_next_frame(video_ids[:1, :3], actions[:1, :3])
    print('loss', round(loss.item(), 4), 'next frame', tuple(next_frame.shape), 'all revealed', bool((next_frame != model.mask_token_id).all()))
