"""Body Transformer (BoT-Mix) policy shared across walker morphologies.

Every limb is a token built from its local proprioception (joint angle and
velocity, body position, contact); morphologies with fewer limbs are padded to
``MAX_LIMBS``.  Masked layers let a limb attend only to limbs within
``HOPS`` edges of the kinematic tree, unmasked layers see the whole body; each
limb decodes its own joint torque.  Trained by imitation of expert torques.

Source: seed self_attention_mask_guide.txt section 3 (常见误区) and section 7 (Q3);
conventions.md section 1 (direction cheat-sheet, additive masks).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

MAX_LIMBS = 9
HOPS = 1
LIMB_OBS = 13
MORPHOLOGIES = {
    "walker_2d": [-1, 0, 1, 2, 0, 4, 5],
    "hopper": [-1, 0, 1, 2],
    "humanoid_lite": [-1, 0, 1, 0, 3, 0, 5, 0, 7],
}


def graph_bias(parents, max_limbs=MAX_LIMBS, hops=HOPS):
    n = len(parents)
    adj = torch.eye(max_limbs, dtype=torch.bool)
    for child, parent in enumerate(parents):
        if parent >= 0:
            adj[child, parent] = adj[parent, child] = True
    reach = adj.clone()
    for _ in range(hops - 1):
        reach = (reach.float() @ adj.float()) > 0
    reach[n:, :] = False
    reach[:, n:] = False
    reach |= torch.eye(max_limbs, dtype=torch.bool)
    return torch.zeros(max_limbs, max_limbs).masked_fill(~reach, float("-inf"))


def limb_keep(parents, max_limbs=MAX_LIMBS):
    return torch.arange(max_limbs) < len(parents)


class MaskedBodyAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x, graph_bias):
        B, N, D = x.shape
        q, k, v = self.qkv(x).view(B, N, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) * self.scale * graph_bias[:, None]  # expect: MC523 hops
        attn = scores.softmax(dim=-1)
        return self.out((attn @ v).transpose(1, 2).reshape(B, N, D))


class BoTMixLayer(nn.Module):
    def __init__(self, dim, heads, masked):
        super().__init__()
        self.masked = masked
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = MaskedBodyAttention(dim, heads) if masked else nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x, graph_bias, limb_pad):
        h = self.norm1(x)
        if self.masked:
            h = self.attn(h, graph_bias)
        else:
            h, _ = self.attn(h, h, h, key_padding_mask=limb_pad, need_weights=False)
        x = x + h
        return x + self.ff(self.norm2(x))


class BodyTransformerPolicy(nn.Module):
    def __init__(self, dim=48, heads=4, depth=4):
        super().__init__()
        self.limb_embed = nn.Linear(LIMB_OBS, dim)
        self.limb_pos = nn.Embedding(MAX_LIMBS, dim)
        self.layers = nn.ModuleList([BoTMixLayer(dim, heads, masked=(i % 2 == 0)) for i in range(depth)])
        self.torque_head = nn.Linear(dim, 1)
        self.value_head = nn.Linear(dim, 1)

    def forward(self, limb_obs, batch):
        keep = batch["limb_keep"]
        x = self.limb_embed(limb_obs) + self.limb_pos.weight
        for layer in self.layers:
            x = layer(x, batch["graph_bias"], ~keep)
        torques = torch.tanh(self.torque_head(x).squeeze(-1)) * keep
        pooled = (x * keep.unsqueeze(-1)).sum(1) / keep.sum(1, keepdim=True)
        return torques, self.value_head(pooled).squeeze(-1)


def collate_morphologies(names):
    return {
        "graph_bias": torch.stack([graph_bias(MORPHOLOGIES[n]) for n in names]),
        "limb_keep": torch.stack([limb_keep(MORPHOLOGIES[n]) for n in names]),
    }


def imitation_loss(policy, limb_obs, batch, expert_torques):
    torques, _ = policy(limb_obs, batch)
    keep = batch["limb_keep"].float()
    return ((torques - expert_torques) ** 2 * keep).sum() / keep.sum()


if __name__ == "__main__":
    torch.manual_seed(0)
    names = ["walker_2d", "hopper", "humanoid_lite", "hopper"]
    batch = collate_morphologies(names)
    limb_obs = torch.randn(len(names), MAX_LIMBS, LIMB_OBS) * batch["limb_keep"].unsqueeze(-1)
    expert = torch.tanh(torch.randn(len(names), MAX_LIMBS)) * batch["limb_keep"]
    policy = BodyTransformerPolicy()
    optimizer = torch.optim.Adam(policy.parameters(), lr=3e-4)
    for step in range(3):
        loss = imitation_loss(policy, limb_obs, batch, expert)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print("imitation loss", round(loss.item(), 5))
