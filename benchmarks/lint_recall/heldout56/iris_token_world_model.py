"""A token world model for model-based RL in the style of IRIS (Micheli et al., ICLR 2023).

Each frame is quantised into K discrete tokens by a frozen codebook, and a step is the K frame
tokens followed by the action token. A causal transformer predicts the next frame's tokens, the
reward and the episode end. For imagination the real history is fed step by step into a
key/value cache, one step of K + 1 tokens at a time, and the policy then acts on imagined frames.

Source: conventions.md §1 (SDPA is_causal row), §2.7, §5 item 8; pytorch/pytorch PR #111007.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn

T = TypeVar("T", bound=Tensor)


@dataclass(slots=True, frozen=True)
class WorldModelConfig:
    tokens_per_frame: int = 4
    codebook: int = 32
    actions: int = 4
    dim: int = 64
    heads: int = 4
    layers: int = 2
    max_steps: int = 12

    @property
    def step_len(self) -> int:
        return self.tokens_per_frame + 1


@dataclass
class LayerCache(Generic[T]):
    keys: list[T] = field(default_factory=list)
    values: list[T] = field(default_factory=list)

    def update(self, k: T, v: T) -> tuple[Tensor, Tensor]:
        self.keys.append(k)
        self.values.append(v)
        return torch.cat(self.keys, dim=2), torch.cat(self.values, dim=2)


class CachedSelfAttention(nn.Module):
    def __init__(self, cfg: WorldModelConfig) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.proj = nn.Linear(cfg.dim, cfg.dim)

    def forward(self, x: Float[Tensor, "b l d"], cache: LayerCache[Tensor] | None) -> Float[Tensor, "b l d"]:
        b, l, d = x.shape
        q, k, v = self.qkv(x).view(b, l, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        if cache is not None:
            k, v = cache.update(k, v)
        ctx = F.scaled_dot_product_attention(q, k, v, is_causal=l > 1)  # expect: MC510 cache
        return self.proj(ctx.transpose(1, 2).reshape(b, l, d))


class Block(nn.Module):
    def __init__(self, cfg: WorldModelConfig) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(cfg.dim), nn.LayerNorm(cfg.dim)
        self.attn = CachedSelfAttention(cfg)
        self.mlp = nn.Sequential(nn.Linear(cfg.dim, 4 * cfg.dim), nn.GELU(), nn.Linear(4 * cfg.dim, cfg.dim))

    def forward(self, x: Tensor, cache: LayerCache[Tensor] | None) -> Tensor:
        x = x + self.attn(self.ln1(x), cache)
        return x + self.mlp(self.ln2(x))


class WorldModel(nn.Module):
    def __init__(self, cfg: WorldModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.obs_emb = nn.Embedding(cfg.codebook, cfg.dim)
        self.act_emb = nn.Embedding(cfg.actions, cfg.dim)
        self.pos = nn.Embedding(cfg.max_steps * cfg.step_len, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.ln = nn.LayerNorm(cfg.dim)
        self.next_obs = nn.Linear(cfg.dim, cfg.tokens_per_frame * cfg.codebook)
        self.reward = nn.Linear(cfg.dim, 3)
        self.end = nn.Linear(cfg.dim, 2)

    def embed_steps(self, obs: Int[Tensor, "b n k"], act: Int[Tensor, "b n"], start: int) -> Float[Tensor, "b l d"]:
        x = torch.cat([self.obs_emb(obs), self.act_emb(act)[:, :, None]], dim=2).flatten(1, 2)
        return x + self.pos(torch.arange(start, start + x.shape[1]))

    def forward(self, x: Tensor, caches: list[LayerCache[Tensor]] | None = None) -> Tensor:
        for i, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[i])
        return self.ln(x)

    def heads(self, h: Tensor) -> dict[str, Tensor]:
        act_out = h.view(h.shape[0], -1, self.cfg.step_len, h.shape[-1])[:, :, -1]
        obs = self.next_obs(act_out).unflatten(-1, (self.cfg.tokens_per_frame, self.cfg.codebook))
        return {"obs": obs, "reward": self.reward(act_out), "end": self.end(act_out)}

    @torch.no_grad()
    def burn_in(self, obs: Tensor, act: Tensor) -> tuple[list[LayerCache[Tensor]], Tensor]:
        caches: list[LayerCache[Tensor]] = [LayerCache() for _ in self.blocks]
        outs = [self(self.embed_steps(obs[:, t : t + 1], act[:, t : t + 1], t * self.cfg.step_len), caches) for t in range(obs.shape[1])]
        return caches, torch.cat(outs, dim=1)


def tokenize_frames(frames: Float[Tensor, "b n k e"], codebook: Tensor) -> Int[Tensor, "b n k"]:
    return torch.cdist(frames.flatten(0, 2)[None], codebook[None])[0].argmin(-1).view(frames.shape[:3])


def collect(n_episodes: int, cfg: WorldModelConfig, codebook: Tensor, gen: torch.Generator) -> dict[str, Tensor]:
    pos = torch.randint(0, cfg.codebook, (n_episodes, 1), generator=gen)
    act = torch.randint(0, cfg.actions, (n_episodes, cfg.max_steps), generator=gen)
    moves = torch.tensor([1, -1, 3, -3])[act]
    cells = (pos + torch.cumsum(moves, dim=1)) % cfg.codebook
    frames = codebook[(cells[..., None] + torch.arange(cfg.tokens_per_frame)) % cfg.codebook]
    frames = frames + 0.01 * torch.randn(frames.shape, generator=gen)
    reward = (cells % 7 == 0).long() + (cells % 11 == 0).long()
    return {"obs": tokenize_frames(frames, codebook), "act": act, "reward": reward}


def train_world_model(model: WorldModel, codebook: Tensor, *, steps: int = 150) -> float:
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        ep = collect(32, model.cfg, codebook, gen)
        out = model.heads(model(model.embed_steps(ep["obs"], ep["act"], 0)))
        loss = F.cross_entropy(out["obs"][:, :-1].flatten(0, 2), ep["obs"][:, 1:].flatten()) + F.cross_entropy(out["reward"].flatten(0, 1), ep["reward"].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss.item()


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = WorldModelConfig()
    codebook = torch.randn(cfg.codebook, 8, generator=torch.Generator().manual_seed(2))
    model = WorldModel(cfg)
    print(f"world-model loss {train_world_model(model, codebook):.3f}")
    model.eval()
    ep = collect(64, cfg, codebook, torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model.heads(model(model.embed_steps(ep["obs"], ep["act"], 0)))
        _, cached = model.burn_in(ep["obs"], ep["act"])
        stepwise = model.heads(cached)
    agree = (full["obs"].argmax(-1) == stepwise["obs"].argmax(-1)).float().mean().item()
    acc = (stepwise["obs"][:, :-1].argmax(-1) == ep["obs"][:, 1:]).float().mean().item()
    print(f"burn-in next-frame accuracy {acc:.3f}, agreement with the full pass {agree:.3f}")
