"""Wayformer-style early-fusion scene encoder with a multimodal trajectory decoder.

Agent histories, roadgraph polylines and traffic-light states are projected to
a shared width and concatenated into one token set. A Perceiver-style latent
query encoder reads that set, and learned mode queries decode a mixture of
future trajectories for the target agent. The attention layer is a drop-in
for ``nn.MultiheadAttention(batch_first=True)`` running on
``F.scaled_dot_product_attention``.

Source: rasbt/LLMs-from-scratch#1061 (conventions.md §3 item 14); conventions.md §1 (direction cheat-sheet), §4.1, §5 item 1.
"""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class WayformerConfig:
    hidden: int = 64
    heads: int = 4
    num_latents: int = 16
    num_modes: int = 6
    history_steps: int = 11
    future_steps: int = 16
    agent_dim: int = 10
    road_dim: int = 9
    light_dim: int = 4
    encoder_layers: int = 2
    decoder_layers: int = 2
    dropout: float = 0.1


class Attention(nn.Module):
    def __init__(self, dim, heads, dropout=0.0):
        super().__init__()
        self.heads = heads
        self.dropout = dropout
        self.q_proj = nn.Linear(dim, dim)
        self.kv_proj = nn.Linear(dim, 2 * dim)
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, x, context=None, key_padding_mask=None):
        context = x if context is None else context
        b, n, c = x.shape
        m = context.size(1)
        q = self.q_proj(x).view(b, n, self.heads, c // self.heads).transpose(1, 2)
        k, v = self.kv_proj(context).view(b, m, 2, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask[:, None, None, :]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=None if key_padding_mask is None else ~key_padding_mask, dropout_p=self.dropout if self.training else 0.0)
        return self.out_proj(out.transpose(1, 2).reshape(b, n, c))


class Block(nn.Module):
    def __init__(self, dim, heads, dropout, cross=False):
        super().__init__()
        self.cross = cross
        self.norm_q = nn.LayerNorm(dim)
        self.norm_kv = nn.LayerNorm(dim) if cross else None
        self.attn = Attention(dim, heads, dropout)
        self.norm_ff = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Dropout(dropout), nn.Linear(4 * dim, dim))

    def forward(self, x, context=None, key_padding_mask=None):
        h = self.norm_q(x)
        ctx = self.norm_kv(context) if self.cross else None
        x = x + self.attn(h, ctx, key_padding_mask=key_padding_mask)
        return x + self.ff(self.norm_ff(x))


class Wayformer(nn.Module):
    def __init__(self, cfg: WayformerConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.hidden
        self.agent_proj = nn.Linear(cfg.agent_dim, d)
        self.road_proj = nn.Linear(cfg.road_dim, d)
        self.light_proj = nn.Linear(cfg.light_dim, d)
        self.time_embed = nn.Parameter(torch.randn(cfg.history_steps, d) * 0.02)
        self.modality_embed = nn.Parameter(torch.randn(3, d) * 0.02)
        self.latents = nn.Parameter(torch.randn(cfg.num_latents, d) * 0.02)
        self.read_in = Block(d, cfg.heads, cfg.dropout, cross=True)
        self.encoder = nn.ModuleList([Block(d, cfg.heads, cfg.dropout) for _ in range(cfg.encoder_layers)])
        self.mode_queries = nn.Parameter(torch.randn(cfg.num_modes, d) * 0.02)
        self.decoder = nn.ModuleList([Block(d, cfg.heads, cfg.dropout, cross=True) for _ in range(cfg.decoder_layers)])
        self.traj_head = nn.Linear(d, cfg.future_steps * 4)
        self.mode_head = nn.Linear(d, 1)

    def tokenize(self, batch):
        b, a, t, _ = batch["agents"].shape
        agents = self.agent_proj(batch["agents"]) + self.time_embed[:t] + self.modality_embed[0]
        lights = self.light_proj(batch["lights"]) + self.time_embed[:t] + self.modality_embed[2]
        roads = self.road_proj(batch["roads"]) + self.modality_embed[1]
        tokens = torch.cat([agents.flatten(1, 2), roads, lights.flatten(1, 2)], dim=1)
        valid = torch.cat([batch["agents_valid"].flatten(1), batch["roads_valid"], batch["lights_valid"].flatten(1)], dim=1)
        return tokens, valid

    def forward(self, batch):
        tokens, valid = self.tokenize(batch)
        b = tokens.size(0)
        latents = self.latents.unsqueeze(0).expand(b, -1, -1)
        latents = self.read_in(latents, tokens, key_padding_mask=~valid)
        for block in self.encoder:
            latents = block(latents)
        modes = self.mode_queries.unsqueeze(0).expand(b, -1, -1)
        for block in self.decoder:
            modes = block(modes, latents)
        traj = self.traj_head(modes).view(b, self.cfg.num_modes, self.cfg.future_steps, 4)
        return traj, self.mode_head(modes).squeeze(-1)


def wta_loss(traj, mode_logits, future, future_valid):
    mean, log_scale = traj[..., :2], traj[..., 2:].clamp(-5.0, 5.0)
    w = future_valid[:, None, :].float()
    disp = (mean - future[:, None]).norm(dim=-1)
    ade = (disp * w).sum(-1) / w.sum(-1).clamp(min=1.0)
    best = ade.argmin(dim=-1)
    idx = torch.arange(traj.size(0))
    nll = ((mean[idx, best] - future).abs() / log_scale[idx, best].exp() + log_scale[idx, best]).sum(-1)
    reg = (nll * future_valid).sum() / future_valid.sum().clamp(min=1)
    return reg + F.cross_entropy(mode_logits, best), ade.min(-1).values.mean()


def random_scene(cfg, b, num_agents, num_roads, num_lights, seed=0):
    g = torch.Generator().manual_seed(seed)
    t = cfg.history_steps
    batch = {
        "agents": torch.randn(b, num_agents, t, cfg.agent_dim, generator=g),
        "roads": torch.randn(b, num_roads, cfg.road_dim, generator=g),
        "lights": torch.randn(b, num_lights, t, cfg.light_dim, generator=g),
        "agents_valid": torch.rand(b, num_agents, t, generator=g) > 0.2,
        "roads_valid": torch.rand(b, num_roads, generator=g) > 0.3,
        "lights_valid": torch.rand(b, num_lights, t, generator=g) > 0.5,
        "future": torch.randn(b, cfg.future_steps, 2, generator=g).cumsum(1),
        "future_valid": torch.ones(b, cfg.future_steps, dtype=torch.bool),
    }
    batch["agents_valid"][:, 0] = True
    for key in ("agents", "lights"):
        batch[key] = batch[key].masked_fill(~batch[key + "_valid"][..., None], 0.0)
    batch["roads"] = batch["roads"].masked_fill(~batch["roads_valid"][..., None], 0.0)
    return batch


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = WayformerConfig()
    model = Wayformer(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = random_scene(cfg, b=3, num_agents=4, num_roads=12, num_lights=2)
    batch["future_valid"][1, 10:] = False
    for step in range(3):
        traj, logits = model(batch)
        loss, min_ade = wta_loss(traj, logits, batch["future"], batch["future_valid"])
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.4f} minADE {min_ade.item():.3f}")
