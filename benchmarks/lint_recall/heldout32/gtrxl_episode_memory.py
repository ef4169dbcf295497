"""Gated Transformer-XL (GTrXL) actor-critic with episodic memory.

Parisotto et al.'s GTrXL: pre-norm attention and MLP sub-layers joined to the
residual stream by GRU-type gates, and a per-layer memory of the last
``mem_len`` inputs carried across rollout segments (detached). Environments
reset at different times, so every step carries an episode id and a step may
attend only to memory and segment steps of its own episode, up to itself.

Source: seed masked_fill_inplace.txt (区别, 作用), seed self_attention_mask_guide.txt §3 and §4
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GTrXLConfig:
    obs_dim: int = 8
    n_actions: int = 4
    d_model: int = 32
    n_heads: int = 4
    n_layers: int = 2
    mem_len: int = 16
    max_distance: int = 64
    gru_bias: float = 2.0
    dropout: float = 0.0


class GRUGate(nn.Module):
    def __init__(self, d, bg=2.0):
        super().__init__()
        self.Wr, self.Ur = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.Wz, self.Uz = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.Wg, self.Ug = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.bg = bg

    def forward(self, x, y):
        r = torch.sigmoid(self.Wr(y) + self.Ur(x))
        z = torch.sigmoid(self.Wz(y) + self.Uz(x) - self.bg)
        h = torch.tanh(self.Wg(y) + self.Ug(r * x))
        return (1 - z) * x + z * h


class MemoryAttention(nn.Module):
    def __init__(self, cfg: GTrXLConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.head_dim = cfg.d_model // cfg.n_heads
        self.q = nn.Linear(cfg.d_model, cfg.d_model)
        self.kv = nn.Linear(cfg.d_model, 2 * cfg.d_model)
        self.out = nn.Linear(cfg.d_model, cfg.d_model)
        self.rel_bias = nn.Embedding(cfg.max_distance + 1, cfg.n_heads)
        self.max_distance = cfg.max_distance

    def forward(self, x, mem, allowed):
        b, L, d = x.shape
        M = mem.size(1)
        kv = torch.cat([mem, x], dim=1)
        q = self.q(x).view(b, L, self.n_heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(kv).view(b, M + L, 2, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q_pos = torch.arange(M, M + L, device=x.device)[:, None]
        k_pos = torch.arange(M + L, device=x.device)[None, :]
        distance = (q_pos - k_pos).clamp(0, self.max_distance)
        scores = q @ k.transpose(-1, -2) * self.head_dim ** -0.5
        scores = scores + self.rel_bias(distance).permute(2, 0, 1)[None]
        scores.masked_fill(~allowed[:, None], torch.finfo(scores.dtype).min)  # expect: MC525 gtrxl
        probs = scores.softmax(dim=-1)
        out = (probs @ v).transpose(1, 2).reshape(b, L, d)
        return self.out(out)


class GTrXLLayer(nn.Module):
    def __init__(self, cfg: GTrXLConfig):
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.d_model)
        self.attn = MemoryAttention(cfg)
        self.gate1 = GRUGate(cfg.d_model, cfg.gru_bias)
        self.norm2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.ReLU(), nn.Linear(4 * cfg.d_model, cfg.d_model))
        self.gate2 = GRUGate(cfg.d_model, cfg.gru_bias)

    def forward(self, x, mem, allowed):
        y = F.relu(self.attn(self.norm1(x), self.norm1(mem), allowed))
        x = self.gate1(x, y)
        y = F.relu(self.mlp(self.norm2(x)))
        return self.gate2(x, y)


class GTrXLAgent(nn.Module):
    def __init__(self, cfg: GTrXLConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Linear(cfg.obs_dim, cfg.d_model)
        self.layers = nn.ModuleList([GTrXLLayer(cfg) for _ in range(cfg.n_layers)])
        self.policy = nn.Linear(cfg.d_model, cfg.n_actions)
        self.value = nn.Linear(cfg.d_model, 1)

    def initial_state(self, batch_size):
        cfg = self.cfg
        mems = [torch.zeros(batch_size, cfg.mem_len, cfg.d_model) for _ in range(cfg.n_layers)]
        return {"mems": mems, "mem_episode": torch.full((batch_size, cfg.mem_len), -1, dtype=torch.long),
                "episode": torch.zeros(batch_size, dtype=torch.long)}

    def forward(self, obs, is_first, state):
        b, L, _ = obs.shape
        M = self.cfg.mem_len
        episode = state["episode"][:, None] + torch.cumsum(is_first.long(), dim=1)
        key_episode = torch.cat([state["mem_episode"], episode], dim=1)
        same_episode = episode[:, :, None] == key_episode[:, None, :]
        causal = torch.ones(L, M + L, dtype=torch.bool, device=obs.device).tril(diagonal=M)
        allowed = same_episode & causal[None]

        x = self.embed(obs)
        new_mems = []
        for layer, mem in zip(self.layers, state["mems"]):
            new_mems.append(torch.cat([mem, x], dim=1)[:, -M:].detach())
            x = layer(x, mem, allowed)
        new_state = {"mems": new_mems, "mem_episode": key_episode[:, -M:], "episode": episode[:, -1]}
        return self.policy(x), self.value(x).squeeze(-1), new_state


def rollout(agent, obs, is_first, state, step_by_step):
    if not step_by_step:
        return agent(obs, is_first, state)
    logits, values = [], []
    for t in range(obs.size(1)):
        lg, v, state = agent(obs[:, t: t + 1], is_first[:, t: t + 1], state)
        logits.append(lg)
        values.append(v)
    return torch.cat(logits, 1), torch.cat(values, 1), state


def make_segments(cfg: GTrXLConfig, b=6, T=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(b, T, cfg.obs_dim, generator=g)
    is_first = torch.rand(b, T, generator=g) < 0.1
    is_first[:, 0] = True
    actions = (obs[..., :cfg.n_actions].cumsum(1) > 0).long().argmax(-1)
    returns = obs[..., 0].flip(1).cumsum(1).flip(1)
    return obs, is_first, actions, returns


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = GTrXLConfig()
    agent = GTrXLAgent(cfg)
    opt = torch.optim.Adam(agent.parameters(), lr=1e-3)
    state = agent.initial_state(6)
    for it in range(10):
        obs, is_first, actions, returns = make_segments(cfg, seed=it)
        logits, values, state = agent(obs, is_first, state)
        loss = F.cross_entropy(logits.reshape(-1, cfg.n_actions), actions.reshape(-1)) + 0.5 * F.mse_loss(values, returns)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("loss", round(loss.item(), 4))

    with torch.no_grad():
        obs, is_first, _, _ = make_segments(cfg, seed=99)
        whole, _, _ = rollout(agent, obs, is_first, state, step_by_step=False)
        steps, _, _ = rollout(agent, obs, is_first, state, step_by_step=True)
        later = obs.clone()
        later[:, -1] += 1.0
        moved, _, _ = rollout(agent, later, is_first, state, step_by_step=False)
        fresh = agent.initial_state(6)
        first = torch.ones_like(is_first)
        a, _, _ = rollout(agent, obs[:, :1], first[:, :1], state, step_by_step=False)
        c, _, _ = rollout(agent, obs[:, :1], first[:, :1], fresh, step_by_step=False)
        print("segment vs step-by-step:", (whole - steps).abs().max().item(),
              "earlier steps moved by the last:", (whole[:, :-1] - moved[:, :-1]).abs().max().item(),
              "new episode moved by old memory:", (a - c).abs().max().item())
