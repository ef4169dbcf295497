"""Generalist robot policy over long episode histories, attention heads split across tensor-parallel ranks.

Every control step adds one proprioception token and three camera tokens to the context; the
action is read from the step's last token. Training runs teacher-forced over whole episodes; the
rollout keeps a per-layer key/value cache so that each step only encodes its new tokens. Heads
are sharded over tensor-parallel ranks (column-parallel QKV, row-parallel output with an
all-reduce); without torch.distributed the shards run one after the other in this process.

Source: conventions.md §1 (SDPA is_causal row), §2.7, §5 item 8; pytorch/pytorch PR #111007
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

TOKENS_PER_STEP = 4


def tp_info(simulated_tp):
    if dist.is_available() and dist.is_initialized():
        return [dist.get_rank()], dist.get_world_size()
    return list(range(simulated_tp)), simulated_tp


class KVCache:
    def __init__(self):
        self.k = self.v = None

    def update(self, k, v):
        if self.k is not None:
            k = torch.cat([self.k, k], dim=2)
            v = torch.cat([self.v, v], dim=2)
        self.k, self.v = k, v
        return k, v


class AttentionShard(nn.Module):
    def __init__(self, dim, local_heads, head_dim):
        super().__init__()
        self.local_heads, self.head_dim = local_heads, head_dim
        self.qkv = nn.Linear(dim, 3 * local_heads * head_dim)
        self.out = nn.Linear(local_heads * head_dim, dim, bias=False)

    def forward(self, x, cache=None):
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.local_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        if cache is not None:
            k, v = cache.update(k, v)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(n, k.shape[2], dtype=torch.bool, device=q.device).tril(diagonal=k.shape[2] - n))
        return self.out(y.transpose(1, 2).reshape(b, n, -1))


class TensorParallelAttention(nn.Module):
    def __init__(self, dim, heads, simulated_tp=2):
        super().__init__()
        ranks, tp = tp_info(simulated_tp)
        self.shards = nn.ModuleList(AttentionShard(dim, heads // tp, dim // heads) for _ in ranks)

    def forward(self, x, caches=None):
        partial = [s(x, None if caches is None else caches[i]) for i, s in enumerate(self.shards)]
        y = torch.stack(partial).sum(0)
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(y)
        return y


class PolicyBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = TensorParallelAttention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, caches=None):
        x = x + self.attn(self.ln1(x), caches)
        return x + self.mlp(self.ln2(x))


class EpisodePolicy(nn.Module):
    def __init__(self, proprio_dim=7, camera_dim=16, action_dim=7, dim=32, heads=4, depth=2, max_steps=64):
        super().__init__()
        self.proprio = nn.Linear(proprio_dim, dim)
        self.camera = nn.Linear(camera_dim, dim)
        self.slot = nn.Parameter(torch.randn(TOKENS_PER_STEP, dim) * 0.02)
        self.step_emb = nn.Embedding(max_steps, dim)
        self.blocks = nn.ModuleList(PolicyBlock(dim, heads) for _ in range(depth))
        self.action_head = nn.Linear(dim, action_dim)

    def tokens(self, proprio, cameras, first_step):
        b, t, _ = proprio.shape
        x = torch.cat([self.proprio(proprio)[:, :, None], self.camera(cameras)], dim=2) + self.slot
        x = x + self.step_emb(torch.arange(first_step, first_step + t))[None, :, None]
        return x.reshape(b, t * TOKENS_PER_STEP, -1)

    def forward(self, proprio, cameras, first_step=0, caches=None):
        x = self.tokens(proprio, cameras, first_step)
        for i, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[i])
        return self.action_head(x[:, TOKENS_PER_STEP - 1:: TOKENS_PER_STEP])

    def new_caches(self):
        return [[KVCache() for _ in block.attn.shards] for block in self.blocks]


@torch.no_grad()
def rollout(policy, proprio, cameras):
    caches = policy.new_caches()
    actions = [policy(proprio[:, s: s + 1], cameras[:, s: s + 1], first_step=s, caches=caches) for s in range(proprio.shape[1])]
    return torch.cat(actions, dim=1)


def demonstrations(n, steps, seed=0):
    g = torch.Generator().manual_seed(seed)
    proprio = torch.randn(n, steps, 7, generator=g).cumsum(1) * 0.1
    cameras = torch.randn(n, steps, 3, 16, generator=g)
    actions = torch.roll(proprio, -1, dims=1) - proprio + 0.1 * cameras[:, :, 0, :7]
    return proprio, cameras, actions


def train(steps=150, episode_len=12, seed=0):
    torch.manual_seed(seed)
    policy = EpisodePolicy()
    opt = torch.optim.AdamW(policy.parameters(), lr=2e-3)
    proprio, cameras, actions = demonstrations(256, episode_len, seed)
    for step in range(steps):
        idx = torch.arange(step * 16, step * 16 + 16) % 256
        loss = F.mse_loss(policy(proprio[idx], cameras[idx]), actions[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    policy.eval()
    p, c, a = demonstrations(32, episode_len, seed + 1)
    with torch.no_grad():
        teacher = policy(p, c)
    online = rollout(policy, p, c)
    return loss.item(), F.mse_loss(online, a).item(), (online - teacher).abs().max().item()


if __name__ == "__main__":
    print("train mse %.4f  rollout mse %.4f  rollout vs full pass %.2e" % train())
