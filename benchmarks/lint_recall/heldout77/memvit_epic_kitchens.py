"""MeMViT-style memory-augmented video transformer for EPIC-Kitchens action anticipation.

A long video is read online clip by clip; every layer caches its keys and
values, compresses them with a learned temporal pooling and attends over the
cached memory of the previous clips plus the current clip. Videos in a batch
have different numbers of clips, so padded clips and frames are masked as keys
and carry their padding into the pooled memory, after Wu et al. (2022) and the
PySlowFast MViT layout. An optional --bf16 path runs under CPU autocast.

Source: NVIDIA/apex#1052, #1105 (conventions.md §3 item 18); huggingface/lerobot PR #710 (conventions.md §3 item 19); conventions.md §2.3
"""
import argparse
import contextlib

import torch
import torch.nn as nn
import torch.nn.functional as F

MASK_VALUE = -torch.finfo(torch.float32).max
NUM_VERBS, NUM_NOUNS = 12, 20


class MemoryAttention(nn.Module):
    def __init__(self, dim, num_heads, tokens_per_frame, mem_clips=2, pool_stride=2):
        super().__init__()
        self.h, self.dh = num_heads, dim // num_heads
        self.tokens_per_frame, self.mem_clips = tokens_per_frame, mem_clips
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mem_pool = nn.Conv1d(dim, dim, kernel_size=pool_stride, stride=pool_stride, groups=dim)

    def compress(self, x, keep):
        b, n, d = x.shape
        frames = x.view(b, -1, self.tokens_per_frame, d).permute(0, 2, 3, 1).reshape(-1, d, n // self.tokens_per_frame)
        pooled = self.mem_pool(frames).view(b, self.tokens_per_frame, d, -1).permute(0, 3, 1, 2).reshape(b, -1, d)
        frame_keep = keep.view(b, -1, self.tokens_per_frame)[..., 0]
        pooled_keep = F.max_pool1d(frame_keep[:, None].float(), self.mem_pool.stride[0]).squeeze(1) > 0
        return pooled, pooled_keep.repeat_interleave(self.tokens_per_frame, dim=1)

    def forward(self, x, keep, cache):
        b, n, d = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        if cache:
            mem_k = torch.cat([c["k"] for c in cache], dim=1)
            mem_v = torch.cat([c["v"] for c in cache], dim=1)
            mem_keep = torch.cat([c["keep"] for c in cache], dim=1)
            k_all, v_all = torch.cat([mem_k, k], dim=1), torch.cat([mem_v, v], dim=1)
            key_keep = torch.cat([mem_keep, keep], dim=1)
        else:
            k_all, v_all, key_keep = k, v, keep
        split = lambda t: t.view(b, -1, self.h, self.dh).transpose(1, 2)
        attn = (split(q) * self.dh ** -0.5) @ split(k_all).transpose(-2, -1)
        attn = attn.masked_fill(~key_keep[:, None, None, :], MASK_VALUE)  # expect: MC517 autocast
        out = (attn.softmax(dim=-1) @ split(v_all)).transpose(1, 2).reshape(b, n, d)

        pk, pkeep = self.compress(k.detach(), keep)
        pv, _ = self.compress(v.detach(), keep)
        cache = (cache + [{"k": pk, "v": pv, "keep": pkeep}])[-self.mem_clips:]
        return self.proj(out), cache


class MeMViTBlock(nn.Module):
    def __init__(self, dim, num_heads, tokens_per_frame):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = MemoryAttention(dim, num_heads, tokens_per_frame)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, keep, cache):
        y, cache = self.attn(self.norm1(x), keep, cache)
        x = x + y
        return x + self.mlp(self.norm2(x)), cache


class MeMViTAnticipation(nn.Module):
    def __init__(self, dim=32, depth=2, num_heads=4, patch=4, frame_size=8, frames_per_clip=4):
        super().__init__()
        self.tokens_per_frame = (frame_size // patch) ** 2
        self.patch_embed = nn.Conv3d(3, dim, kernel_size=(1, patch, patch), stride=(1, patch, patch))
        self.pos_embed = nn.Parameter(torch.zeros(1, frames_per_clip * self.tokens_per_frame, dim))
        self.blocks = nn.ModuleList([MeMViTBlock(dim, num_heads, self.tokens_per_frame) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.verb_head, self.noun_head = nn.Linear(dim, NUM_VERBS), nn.Linear(dim, NUM_NOUNS)

    def forward(self, clips, frame_keep, noun_vocab_mask):
        caches = [[] for _ in self.blocks]
        pooled_sum = pooled_count = 0
        for clip, fk in zip(clips.unbind(1), frame_keep.unbind(1)):
            x = self.patch_embed(clip).flatten(3).permute(0, 2, 3, 1).flatten(1, 2) + self.pos_embed
            keep = fk.repeat_interleave(self.tokens_per_frame, dim=1)
            for i, blk in enumerate(self.blocks):
                x, caches[i] = blk(x, keep, caches[i])
            pooled_sum = pooled_sum + (self.norm(x) * keep[..., None]).sum(1)
            pooled_count = pooled_count + keep.sum(1, keepdim=True)
        feat = pooled_sum / pooled_count.clamp(min=1)
        verb_logits = self.verb_head(feat)
        noun_logits = self.noun_head(feat).float().masked_fill(~noun_vocab_mask, MASK_VALUE)
        return verb_logits, noun_logits


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--bf16", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    b, n_clips, frames = 2, 3, 4
    clips = torch.randn(b, n_clips, 3, frames, 8, 8)
    frame_keep = torch.ones(b, n_clips, frames, dtype=torch.bool)
    frame_keep[1, 2:] = False
    frame_keep[0, 2, 3:] = False
    noun_vocab_mask = torch.ones(b, NUM_NOUNS, dtype=torch.bool)
    noun_vocab_mask[:, -4:] = False
    verbs, nouns = torch.tensor([3, 7]), torch.tensor([1, 5])
    model = MeMViTAnticipation()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if args.bf16 else contextlib.nullcontext()
    for step in range(3):
        with autocast:
            verb_logits, noun_logits = model(clips, frame_keep, noun_vocab_mask)
            loss = F.cross_entropy(verb_logits.float(), verbs) + F.cross_entropy(noun_logits, nouns)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")
