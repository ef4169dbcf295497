"""Diffusion Policy (transformer variant) on low-dimensional observations with a padded history.

Layout after real-stanford/diffusion_policy's `TransformerForDiffusion` and
`DiffusionTransformerLowdimPolicy`, with the episode-boundary padding of
huggingface/lerobot's datasets (`observation.state_is_pad`, `action_is_pad` from
`delta_timestamps`): a condition encoder over the diffusion-step token and the `n_obs_steps`
observation tokens, a decoder over the `horizon` action tokens with causal self-attention and
cross-attention to the condition memory, a `LinearNormalizer` to [-1, 1], a DDPM scheduler,
`compute_loss` masked by `action_is_pad` and `predict_action` returning `n_action_steps`.
The demo task is reaching a goal in the plane.

Source: conventions.md §2.6, §1 (SDPA row) and §5 item 6.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class PolicyConfig:
    obs_dim: int = 4
    action_dim: int = 2
    horizon: int = 16
    n_obs_steps: int = 4
    n_action_steps: int = 8
    n_emb: int = 64
    n_head: int = 4
    n_layer: int = 2
    num_train_timesteps: int = 50
    batch_size: int = 16


class SinusoidalPosEmb(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        half = self.dim // 2
        freqs = torch.exp(torch.arange(half, device=x.device) * -(math.log(10000) / (half - 1)))
        emb = x.float()[:, None] * freqs[None]
        return torch.cat((emb.sin(), emb.cos()), dim=-1)


class Attention(nn.Module):
    def __init__(self, n_emb: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.q = nn.Linear(n_emb, n_emb)
        self.kv = nn.Linear(n_emb, 2 * n_emb)
        self.proj = nn.Linear(n_emb, n_emb)

    def _heads(self, x):
        B, T, C = x.shape
        return x.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)

    def forward(self, x, memory=None, memory_keep=None, is_causal=False):
        src = x if memory is None else memory
        q = self._heads(self.q(x))
        k, v = (self._heads(t) for t in self.kv(src).chunk(2, dim=-1))
        if memory_keep is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=memory_keep)
        return self.proj(y.transpose(1, 2).reshape(x.shape))


class CondEncoderLayer(nn.Module):
    def __init__(self, cfg: PolicyConfig):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(cfg.n_emb), nn.LayerNorm(cfg.n_emb)
        self.attn = Attention(cfg.n_emb, cfg.n_head)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.n_emb, 4 * cfg.n_emb), nn.Mish(), nn.Linear(4 * cfg.n_emb, cfg.n_emb)
        )

    def forward(self, x, cond_keep):
        h = self.norm1(x)
        x = x + self.attn(h, memory=h, memory_keep=cond_keep[:, None, None, :])
        return x + self.mlp(self.norm2(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: PolicyConfig):
        super().__init__()
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(cfg.n_emb) for _ in range(3))
        self.self_attn = Attention(cfg.n_emb, cfg.n_head)
        self.cross_attn = Attention(cfg.n_emb, cfg.n_head)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.n_emb, 4 * cfg.n_emb), nn.Mish(), nn.Linear(4 * cfg.n_emb, cfg.n_emb)
        )

    def forward(self, x, memory, memory_keep):
        x = x + self.self_attn(self.norm1(x), is_causal=True)
        x = x + self.cross_attn(self.norm2(x), memory=memory, memory_keep=memory_keep[:, None, None, :])
        return x + self.mlp(self.norm3(x))


class TransformerForDiffusion(nn.Module):
    def __init__(self, cfg: PolicyConfig):
        super().__init__()
        self.input_emb = nn.Linear(cfg.action_dim, cfg.n_emb)
        self.pos_emb = nn.Parameter(torch.zeros(1, cfg.horizon, cfg.n_emb))
        self.time_emb = SinusoidalPosEmb(cfg.n_emb)
        self.cond_obs_emb = nn.Linear(cfg.obs_dim, cfg.n_emb)
        self.cond_pos_emb = nn.Parameter(torch.zeros(1, 1 + cfg.n_obs_steps, cfg.n_emb))
        self.encoder = CondEncoderLayer(cfg)
        self.decoder = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_emb)
        self.head = nn.Linear(cfg.n_emb, cfg.action_dim)

    def forward(self, sample, timestep, cond, cond_is_pad):
        B = sample.shape[0]
        time_token = self.time_emb(timestep.expand(B))[:, None]
        cond_embeddings = (
            torch.cat([time_token, self.cond_obs_emb(cond)], dim=1) + self.cond_pos_emb
        )
        cond_keep = torch.cat([cond_is_pad.new_ones(B, 1), ~cond_is_pad], dim=1)
        memory = self.encoder(cond_embeddings, cond_keep)
        x = self.input_emb(sample) + self.pos_emb
        for layer in self.decoder:
            x = layer(x, memory, cond_keep)
        return self.head(self.ln_f(x))


class DDPMScheduler:
    def __init__(self, num_train_timesteps: int):
        steps = torch.arange(num_train_timesteps + 1) / num_train_timesteps
        alphas_cumprod = torch.cos((steps + 0.008) / 1.008 * math.pi / 2) ** 2
        betas = (1 - alphas_cumprod[1:] / alphas_cumprod[:-1]).clamp(max=0.999)
        self.num_train_timesteps = num_train_timesteps
        self.betas = betas
        self.alphas_cumprod = torch.cumprod(1.0 - betas, dim=0)

    def add_noise(self, x0, noise, t):
        a = self.alphas_cumprod[t].view(-1, 1, 1)
        return a.sqrt() * x0 + (1 - a).sqrt() * noise

    def step(self, eps, t: int, x_t, generator=None):
        a_t = self.alphas_cumprod[t]
        a_prev = self.alphas_cumprod[t - 1] if t > 0 else torch.tensor(1.0)
        x0 = ((x_t - (1 - a_t).sqrt() * eps) / a_t.sqrt()).clamp(-1, 1)
        mean = (
            a_prev.sqrt() * self.betas[t] * x0 + (1 - self.betas[t]).sqrt() * (1 - a_prev) * x_t
        ) / (1 - a_t)
        if t == 0:
            return mean
        var = self.betas[t] * (1 - a_prev) / (1 - a_t)
        return mean + var.sqrt() * torch.randn(x_t.shape, generator=generator)


class LinearNormalizer:
    def __init__(self, data: torch.Tensor):
        self.lo, self.hi = data.amin(0), data.amax(0)

    def normalize(self, x):
        return (x - self.lo) / (self.hi - self.lo) * 2 - 1

    def unnormalize(self, x):
        return (x + 1) / 2 * (self.hi - self.lo) + self.lo


def make_episodes(n: int, length: int, gen: torch.Generator):
    episodes = []
    for _ in range(n):
        pos, goal = torch.rand(2, generator=gen), torch.rand(2, generator=gen)
        states, actions = [], []
        for _ in range(length):
            target = pos + (goal - pos).clamp(-0.08, 0.08)
            states.append(torch.cat([pos, goal]))
            actions.append(target)
            pos = target + 0.005 * torch.randn(2, generator=gen)
        episodes.append((torch.stack(states), torch.stack(actions)))
    return episodes


def sample_window(episode, start: int, cfg: PolicyConfig):
    states, actions = episode
    idx = torch.arange(start - cfg.n_obs_steps + 1, start - cfg.n_obs_steps + 1 + cfg.horizon)
    clamped = idx.clamp(0, len(states) - 1)
    obs_idx = clamped[: cfg.n_obs_steps]
    return {
        "obs": states[obs_idx],
        "obs_is_pad": idx[: cfg.n_obs_steps] < 0,
        "action": actions[clamped],
        "action_is_pad": (idx < 0) | (idx >= len(states)),
    }


class DiffusionTransformerLowdimPolicy(nn.Module):
    def __init__(self, cfg: PolicyConfig, normalizer_obs, normalizer_action):
        super().__init__()
        self.cfg = cfg
        self.model = TransformerForDiffusion(cfg)
        self.noise_scheduler = DDPMScheduler(cfg.num_train_timesteps)
        self.obs_norm, self.action_norm = normalizer_obs, normalizer_action

    def compute_loss(self, batch):
        obs = self.obs_norm.normalize(batch["obs"])
        trajectory = self.action_norm.normalize(batch["action"])
        noise = torch.randn_like(trajectory)
        t = torch.randint(0, self.cfg.num_train_timesteps, (trajectory.shape[0],))
        noisy = self.noise_scheduler.add_noise(trajectory, noise, t)
        pred = self.model(noisy, t, obs, batch["obs_is_pad"])
        loss = F.mse_loss(pred, noise, reduction="none")
        valid = (~batch["action_is_pad"]).float()[..., None]
        return (loss * valid).sum() / (valid.sum() * self.cfg.action_dim)

    @torch.no_grad()
    def predict_action(self, obs, obs_is_pad, generator=None):
        obs = self.obs_norm.normalize(obs)
        x = torch.randn(obs.shape[0], self.cfg.horizon, self.cfg.action_dim, generator=generator)
        for t in reversed(range(self.cfg.num_train_timesteps)):
            eps = self.model(x, torch.tensor([t]), obs, obs_is_pad)
            x = self.noise_scheduler.step(eps, t, x, generator)
        start = self.cfg.n_obs_steps - 1
        return self.action_norm.unnormalize(x[:, start : start + self.cfg.n_action_steps])


def collate(samples):
    return {k: torch.stack([s[k] for s in samples]) for k in samples[0]}


def main():
    torch.manual_seed(0)
    cfg = PolicyConfig()
    gen = torch.Generator().manual_seed(0)
    episodes = make_episodes(64, 30, gen)
    all_states = torch.cat([s for s, _ in episodes])
    all_actions = torch.cat([a for _, a in episodes])
    policy = DiffusionTransformerLowdimPolicy(
        cfg, LinearNormalizer(all_states), LinearNormalizer(all_actions)
    )
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-3, weight_decay=1e-6)
    for step in range(300):
        picks = torch.randint(0, len(episodes), (cfg.batch_size,), generator=gen).tolist()
        starts = torch.randint(0, 30, (cfg.batch_size,), generator=gen).tolist()
        batch = collate([sample_window(episodes[e], s, cfg) for e, s in zip(picks, starts)])
        loss = policy.compute_loss(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0:
            print(f"step {step}: diffusion loss {loss.item():.4f}")
    policy.eval()
    test = make_episodes(cfg.batch_size, 30, torch.Generator().manual_seed(1))
    batch = collate([sample_window(ep, i % cfg.n_obs_steps, cfg) for i, ep in enumerate(test)])
    actions = policy.predict_action(
        batch["obs"], batch["obs_is_pad"], torch.Generator().manual_seed(2)
    )
    start = cfg.n_obs_steps - 1
    expert = batch["action"][:, start : start + cfg.n_action_steps]
    print(f"action MSE near episode start: {F.mse_loss(actions, expert).item():.5f}")
    with torch.no_grad():
        obs = policy.obs_norm.normalize(batch["obs"])
        x = torch.randn(cfg.batch_size, cfg.horizon, cfg.action_dim)
        t = torch.tensor([10])
        together = policy.model(x, t, obs, batch["obs_is_pad"])
        alone = policy.model(x[1:2], t, obs[1:2], batch["obs_is_pad"][1:2])
    print(f"episode 1 alone vs in its batch: {(together[1] - alone[0]).abs().max().item():.2e}")


if __name__ == "__main__":
    main()
