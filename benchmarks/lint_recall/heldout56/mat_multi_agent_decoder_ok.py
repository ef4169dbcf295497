"""Multi-agent RL with a transformer over agents, in the layout of the Multi-Agent Transformer (MAT).

The encoder reads every agent's observation and gives per-agent values; the decoder emits the
agents' actions one agent after the other, agent i conditioned on the actions already chosen by
agents 0..i-1 (the advantage-decomposition ordering of MAT). The task is a cooperative target
assignment: agents must spread over distinct landmarks, nearest first. The actor is fitted to an
expert's assignments, then decoded autoregressively.

Source: pytorch/pytorch#29546 (conventions.md §3 item 9), rasbt/LLMs-from-scratch#1061 (item 14), §5 item 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn


@dataclass(slots=True, frozen=True)
class MATConfig:
    n_agents: int = 5
    n_landmarks: int = 5
    dim: int = 64
    heads: int = 4

    @property
    def obs_dim(self) -> int:
        return 2 + 2 * self.n_landmarks


@cache
def agent_order_mask(n: int) -> Bool[Tensor, "n n"]:
    return torch.tril(torch.ones(n, n, dtype=torch.bool))


class MaskedSelfAttention(nn.Module):
    def __init__(self, cfg: MATConfig, *, ordered: bool) -> None:
        super().__init__()
        self.heads, self.ordered = cfg.heads, ordered
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.proj = nn.Linear(cfg.dim, cfg.dim)

    def forward(self, x: Float[Tensor, "b n d"]) -> Float[Tensor, "b n d"]:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        mask = agent_order_mask(n) if self.ordered else None
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.proj(ctx.transpose(1, 2).reshape(b, n, d))


class Block(nn.Module):
    def __init__(self, cfg: MATConfig, *, ordered: bool) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(cfg.dim), nn.LayerNorm(cfg.dim)
        self.attn = MaskedSelfAttention(cfg, ordered=ordered)
        self.mlp = nn.Sequential(nn.Linear(cfg.dim, 2 * cfg.dim), nn.GELU(), nn.Linear(2 * cfg.dim, cfg.dim))

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class MultiAgentTransformer(nn.Module):
    def __init__(self, cfg: MATConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.obs_enc = nn.Linear(cfg.obs_dim, cfg.dim)
        self.encoder = nn.Sequential(Block(cfg, ordered=False), Block(cfg, ordered=False))
        self.value = nn.Linear(cfg.dim, 1)
        self.act_emb = nn.Embedding(cfg.n_landmarks + 1, cfg.dim)
        self.decoder = nn.ModuleList([Block(cfg, ordered=True), Block(cfg, ordered=True)])
        self.policy = nn.Linear(cfg.dim, cfg.n_landmarks)

    def encode(self, obs: Float[Tensor, "b n o"]) -> tuple[Tensor, Tensor]:
        rep = self.encoder(self.obs_enc(obs))
        return rep, self.value(rep).squeeze(-1)

    def decode(self, rep: Tensor, prev_actions: Int[Tensor, "b n"]) -> Float[Tensor, "b n a"]:
        x = self.act_emb(prev_actions) + rep
        for block in self.decoder:
            x = block(x)
        return self.policy(x)

    def shifted(self, actions: Int[Tensor, "b n"]) -> Int[Tensor, "b n"]:
        start = torch.full_like(actions[:, :1], self.cfg.n_landmarks)
        return torch.cat([start, actions[:, :-1]], dim=1)

    @torch.no_grad()
    def act(self, obs: Tensor) -> Int[Tensor, "b n"]:
        rep, _ = self.encode(obs)
        actions = torch.zeros(obs.shape[:2], dtype=torch.long)
        for i in range(self.cfg.n_agents):
            logits = self.decode(rep, self.shifted(actions))[:, i]
            taken = F.one_hot(actions[:, :i], self.cfg.n_landmarks).sum(1).bool()
            actions[:, i] = logits.masked_fill(taken, torch.finfo(logits.dtype).min).argmax(-1)
        return actions


def sample_episode(batch: int, cfg: MATConfig, gen: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
    agents = torch.rand(batch, cfg.n_agents, 2, generator=gen)
    marks = torch.rand(batch, cfg.n_landmarks, 2, generator=gen)
    rel = (marks[:, None] - agents[:, :, None]).flatten(2)
    obs = torch.cat([agents, rel], dim=-1)
    dist = torch.cdist(agents, marks)
    expert = torch.zeros(batch, cfg.n_agents, dtype=torch.long)
    for i in range(cfg.n_agents):
        taken = F.one_hot(expert[:, :i], cfg.n_landmarks).sum(1).bool()
        expert[:, i] = dist[:, i].masked_fill(taken, float("inf")).argmin(-1)
    reward = -dist.gather(2, expert[..., None]).squeeze(-1).sum(-1)
    return obs, expert, reward


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = MATConfig()
    mat = MultiAgentTransformer(cfg)
    opt = torch.optim.Adam(mat.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    for step in range(300):
        obs, expert, reward = sample_episode(64, cfg, gen)
        rep, value = mat.encode(obs)
        logits = mat.decode(rep, mat.shifted(expert))
        loss = F.cross_entropy(logits.flatten(0, 1), expert.flatten()) + F.mse_loss(value.sum(-1), reward)
        opt.zero_grad()
        loss.backward()
        opt.step()
    obs, expert, _ = sample_episode(500, cfg, torch.Generator().manual_seed(1))
    teacher = (mat.decode(mat.encode(obs)[0], mat.shifted(expert)).argmax(-1) == expert).float().mean().item()
    free = (mat.act(obs) == expert).float().mean().item()
    print(f"teacher-forced agreement {teacher:.3f}, autoregressive agreement {free:.3f}")
