"""GTrXL (Gated Transformer-XL) policy for a partially observable maze agent.

Parallel environments are rolled out in chunks of seq_len steps; each layer
attends over the previous mem_len steps kept as memory plus the current chunk,
with GRU-type gating in place of residuals and a learned relative-distance
bias; keys from an earlier episode of the same environment are masked, after
Parisotto et al. (2020) and the memory handling of RL ports of Transformer-XL.

Source: seed masked_fill_inplace.txt (与模型缓冲区的配合; 张量共享内存风险); conventions.md §2.3
"""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GTrXLConfig:
    n_envs: int = 4
    obs_dim: int = 9
    n_actions: int = 4
    d_model: int = 32
    n_heads: int = 4
    n_layers: int = 2
    mem_len: int = 6
    seq_len: int = 3
    gate_bias: float = 2.0


class GRUGate(nn.Module):
    def __init__(self, d, bias):
        super().__init__()
        self.Wr, self.Ur = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.Wz, self.Uz = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.Wg, self.Ug = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.bg = nn.Parameter(torch.full((d,), bias))

    def forward(self, x, y):
        r = torch.sigmoid(self.Wr(y) + self.Ur(x))
        z = torch.sigmoid(self.Wz(y) + self.Uz(x) - self.bg)
        h = torch.tanh(self.Wg(y) + self.Ug(r * x))
        return (1 - z) * x + z * h


class GatedXLLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.h, self.dh = cfg.n_heads, cfg.d_model // cfg.n_heads
        self.norm1, self.norm2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.q = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.kv = nn.Linear(cfg.d_model, 2 * cfg.d_model, bias=False)
        self.o = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.rel_bias = nn.Embedding(cfg.mem_len + cfg.seq_len, cfg.n_heads)
        self.gate1, self.gate2 = GRUGate(cfg.d_model, cfg.gate_bias), GRUGate(cfg.d_model, cfg.gate_bias)
        self.ff = nn.Sequential(nn.Linear(cfg.d_model, 2 * cfg.d_model), nn.ReLU(), nn.Linear(2 * cfg.d_model, cfg.d_model))

    def forward(self, x, mem, attn_bias):
        b, t, d = x.shape
        cat = torch.cat([mem, x], dim=1)
        q = self.q(self.norm1(x)).view(b, t, self.h, self.dh).transpose(1, 2)
        k, v = self.kv(self.norm1(cat)).view(b, -1, 2, self.h, self.dh).permute(2, 0, 3, 1, 4)
        klen = k.shape[2]
        dist = (torch.arange(t, device=x.device)[:, None] + klen - t) - torch.arange(klen, device=x.device)[None]
        rel = self.rel_bias(dist.clamp(min=0)).permute(2, 0, 1)
        scores = q @ k.transpose(-1, -2) / self.dh ** 0.5 + rel + attn_bias
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = self.gate1(x, F.relu(self.o(y)))
        return self.gate2(x, F.relu(self.ff(self.norm2(x))))


class GTrXLAgent(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        M, T = cfg.mem_len, cfg.seq_len
        self.embed = nn.Linear(cfg.obs_dim, cfg.d_model)
        self.layers = nn.ModuleList([GatedXLLayer(cfg) for _ in range(cfg.n_layers)])
        self.policy = nn.Linear(cfg.d_model, cfg.n_actions)
        self.value = nn.Linear(cfg.d_model, 1)
        window = torch.full((T, M + T), float("-inf")).triu(M + 1)
        self.register_buffer("window_bias", window.expand(cfg.n_envs, 1, T, M + T).clone())

    def init_memory(self):
        cfg = self.cfg
        mems = [torch.zeros(cfg.n_envs, cfg.mem_len, cfg.d_model) for _ in range(cfg.n_layers)]
        return mems, torch.full((cfg.n_envs, cfg.mem_len), -1, dtype=torch.long)

    def forward(self, obs, mems, mem_episode, episode):
        T = obs.shape[1]
        key_episode = torch.cat([mem_episode, episode], dim=1)
        stale = key_episode[:, None, None, :] != episode[:, None, :, None]
        attn_bias = self.window_bias.masked_fill_(stale, float("-inf"))  # expect: MC524 episode
        x = self.embed(obs)
        new_mems = []
        for layer, mem in zip(self.layers, mems):
            new_mems.append(torch.cat([mem, x], dim=1)[:, -self.cfg.mem_len:].detach())
            x = layer(x, mem, attn_bias)
        new_mem_episode = key_episode[:, -self.cfg.mem_len:]
        return self.policy(x), self.value(x).squeeze(-1), new_mems, new_mem_episode


def rollout(agent, n_chunks, generator):
    cfg = agent.cfg
    mems, mem_episode = agent.init_memory()
    episode = torch.zeros(cfg.n_envs, dtype=torch.long)
    logps, values, rewards = [], [], []
    for _ in range(n_chunks):
        obs = torch.randn(cfg.n_envs, cfg.seq_len, cfg.obs_dim, generator=generator)
        dones = torch.rand(cfg.n_envs, cfg.seq_len, generator=generator) < 0.2
        ep = episode[:, None] + torch.cumsum(dones.long(), dim=1) - dones.long()
        logits, value, mems, mem_episode = agent(obs, mems, mem_episode, ep)
        action = torch.distributions.Categorical(logits=logits).sample()
        logps.append(torch.distributions.Categorical(logits=logits).log_prob(action))
        values.append(value)
        rewards.append((action == 0).float() - 0.1)
        episode = ep[:, -1] + dones[:, -1].long()
    return torch.cat(logps, 1), torch.cat(values, 1), torch.cat(rewards, 1)


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = GTrXLConfig()
    agent = GTrXLAgent(cfg)
    optimizer = torch.optim.Adam(agent.parameters(), lr=3e-4)
    for update in range(3):
        logp, value, reward = rollout(agent, n_chunks=4, generator=torch.Generator().manual_seed(update))
        returns = reward.flip(1).cumsum(1).flip(1)
        advantage = (returns - value).detach()
        loss = -(logp * advantage).mean() + 0.5 * F.mse_loss(value, returns)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"update {update} loss {loss.item():.4f} return {returns[:, 0].mean().item():.3f}")
