"""GTrXL actor-critic for a memory maze (PPO with an episodic transformer memory).

Gated Transformer-XL blocks (identity-map reordering and GRU gating) read a
sliding window of the agent's own past hidden states.  During rollouts every
environment keeps its window and the number of steps since its last reset;
slots written before the reset belong to another episode.  The PPO update
replays stored windows together with the keep-flags saved at collection time.

Source: huggingface/transformers#32195 (conventions.md section 3 item 25); conventions.md
section 1 (HF 4.x AttentionMaskConverter row); seed self_attention_mask_guide.txt section 7 (Q5).
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def parse_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--num_envs", type=int, default=4)
    p.add_argument("--obs_dim", type=int, default=16)
    p.add_argument("--n_actions", type=int, default=4)
    p.add_argument("--embed_dim", type=int, default=32)
    p.add_argument("--n_heads", type=int, default=4)
    p.add_argument("--n_layers", type=int, default=2)
    p.add_argument("--memory_length", type=int, default=8)
    p.add_argument("--clip_coef", type=float, default=0.2)
    p.add_argument("--rollout", action="store_true")
    return p.parse_args(argv)


class GRUGate(nn.Module):
    def __init__(self, dim, bias=2.0):
        super().__init__()
        self.wr, self.ur = nn.Linear(dim, dim, bias=False), nn.Linear(dim, dim, bias=False)
        self.wz, self.uz = nn.Linear(dim, dim, bias=False), nn.Linear(dim, dim, bias=False)
        self.wg, self.ug = nn.Linear(dim, dim, bias=False), nn.Linear(dim, dim, bias=False)
        self.bg = nn.Parameter(torch.full((dim,), bias))

    def forward(self, x, y):
        r = torch.sigmoid(self.wr(y) + self.ur(x))
        z = torch.sigmoid(self.wz(y) + self.uz(x) - self.bg)
        h = torch.tanh(self.wg(y) + self.ug(r * x))
        return (1 - z) * x + z * h


class GTrXLBlock(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        self.ln_q, self.ln_kv, self.ln_ff = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, n_heads, batch_first=True)
        self.gate_attn, self.gate_ff = GRUGate(dim), GRUGate(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.ReLU(), nn.Linear(4 * dim, dim))
        self.n_heads = n_heads

    def forward(self, h, memory, mem_bias):
        kv = self.ln_kv(torch.cat([memory, h], dim=1))
        bias = torch.cat([mem_bias, torch.zeros_like(mem_bias[:, :1])], dim=1)
        bias = bias[:, None, None, :].expand(-1, self.n_heads, 1, -1).flatten(0, 1)
        y, _ = self.attn(self.ln_q(h), kv, kv, attn_mask=bias, need_weights=False)
        h = self.gate_attn(h, F.relu(y))
        return self.gate_ff(h, F.relu(self.ff(self.ln_ff(h))))


class GTrXLPolicy(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.mem_len = args.memory_length
        self.encoder = nn.Linear(args.obs_dim, args.embed_dim)
        self.pos_emb = nn.Parameter(torch.randn(args.memory_length + 1, args.embed_dim) * 0.02)
        self.blocks = nn.ModuleList([GTrXLBlock(args.embed_dim, args.n_heads) for _ in range(args.n_layers)])
        self.pi = nn.Linear(args.embed_dim, args.n_actions)
        self.v = nn.Linear(args.embed_dim, 1)

    def _forward(self, obs, memory, mem_bias):
        h = F.relu(self.encoder(obs)).unsqueeze(1) + self.pos_emb[-1]
        layer_inputs = []
        for i, block in enumerate(self.blocks):
            layer_inputs.append(h.squeeze(1))
            h = block(h, memory[:, :, i] + self.pos_emb[:-1], mem_bias)
        h = h.squeeze(1)
        return self.pi(h), self.v(h).squeeze(-1), torch.stack(layer_inputs, dim=1)

    @torch.no_grad()
    def act(self, obs, memory, episode_step):
        slots = torch.arange(self.mem_len)
        in_episode = slots >= self.mem_len - episode_step[:, None]
        mem_bias = (1 - in_episode.float()) * torch.finfo(obs.dtype).min
        logits, value, layer_inputs = self._forward(obs, memory, mem_bias)
        dist = torch.distributions.Categorical(logits=logits)
        action = dist.sample()
        return action, dist.log_prob(action), value, layer_inputs, in_episode.float()

    def evaluate(self, obs, memory, mem_keep, actions):
        mem_bias = (1.0 - mem_keep) * torch.finfo(obs.dtype).min
        logits, value, _ = self._forward(obs, memory, mem_bias)
        dist = torch.distributions.Categorical(logits=logits)
        return dist.log_prob(actions), dist.entropy(), value


def collect(policy, args, steps=12):
    B, M = args.num_envs, args.memory_length
    memory = torch.zeros(B, M, args.n_layers, args.embed_dim)
    episode_step = torch.zeros(B, dtype=torch.long)
    storage = {k: [] for k in ("obs", "memory", "mem_keep", "actions", "logp", "values", "rewards")}
    for _ in range(steps):
        obs = torch.randn(B, args.obs_dim)
        action, logp, value, layer_inputs, mem_keep = policy.act(obs, memory, episode_step)
        reward = (action == obs[:, :args.n_actions].argmax(-1)).float()
        for key, val in zip(storage, (obs, memory, mem_keep, action, logp, value, reward)):
            storage[key].append(val)
        memory = torch.cat([memory[:, 1:], layer_inputs.unsqueeze(1)], dim=1)
        done = torch.rand(B) < 0.15
        episode_step = torch.where(done, torch.zeros_like(episode_step), (episode_step + 1).clamp(max=M))
    return {k: torch.stack(v).flatten(0, 1) for k, v in storage.items()}


def ppo_update(policy, optimizer, batch, args):
    returns = batch["rewards"] + 0.5 * batch["values"]
    advantages = (returns - batch["values"])
    advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    logp, entropy, values = policy.evaluate(batch["obs"], batch["memory"], batch["mem_keep"], batch["actions"])
    ratio = (logp - batch["logp"]).exp()
    pg_loss = torch.max(-advantages * ratio, -advantages * ratio.clamp(1 - args.clip_coef, 1 + args.clip_coef)).mean()
    loss = pg_loss + 0.5 * F.mse_loss(values, returns) - 0.01 * entropy.mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def synthetic_batch(args, n=24):
    keep = (torch.arange(args.memory_length)[None] >= torch.randint(0, args.memory_length + 1, (n, 1))).float()
    return {"obs": torch.randn(n, args.obs_dim), "memory": torch.randn(n, args.memory_length, args.n_layers, args.embed_dim),
            "mem_keep": keep, "actions": torch.randint(args.n_actions, (n,)), "logp": torch.full((n,), -1.386),
            "values": torch.randn(n), "rewards": torch.randn(n)}


if __name__ == "__main__":
    torch.manual_seed(0)
    args = parse_args()
    policy = GTrXLPolicy(args)
    optimizer = torch.optim.Adam(policy.parameters(), lr=2.5e-4)
    batch = collect(policy, args) if args.rollout else synthetic_batch(args)
    print("ppo loss", round(ppo_update(policy, optimizer, batch, args), 4))
