"""Job-shop scheduling policy cloned from a shortest-processing-time dispatcher.

A PyTorch port of the actor network InstaDeep's Jumanji trains on its JobShop environment
(jumanji/training/networks/job_shop/actor_critic.py, Haiku): the observation keeps Jumanji's
field names (`ops_machine_ids`, `ops_durations`, `ops_mask`, `machines_job_ids`,
`machines_remaining_times`, `action_mask` with the no-op as last column), operations attend to
the operations of their own job (the `jax.vmap` over jobs became one attention over all
operations with a job-block bias), machines cross-attend to jobs, and the logits are masked
with `jnp.where(action_mask, logits, jnp.finfo(jnp.float32).min)`.

Source: seed self_attention_mask_guide.txt 6 (create_block_mask)
"""

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class JobShopConfig:
    num_jobs: int = 5
    num_machines: int = 4
    max_num_ops: int = 4
    max_op_duration: int = 6
    embed_dim: int = 32
    num_heads: int = 4


def generate_instance(cfg, rng):
    machines = np.stack([rng.permutation(cfg.num_machines)[:cfg.max_num_ops] for _ in range(cfg.num_jobs)])
    durations = rng.integers(1, cfg.max_op_duration + 1, size=(cfg.num_jobs, cfg.max_num_ops))
    return {"ops_machine_ids": machines, "ops_durations": durations,
            "ops_mask": np.ones((cfg.num_jobs, cfg.max_num_ops), dtype=bool),
            "machines_job_ids": np.full(cfg.num_machines, cfg.num_jobs),
            "machines_remaining_times": np.zeros(cfg.num_machines, dtype=np.int64)}


def action_mask(state, cfg):
    mask = np.zeros((cfg.num_machines, cfg.num_jobs + 1), dtype=bool)
    mask[:, -1] = True
    running = set(state["machines_job_ids"][state["machines_remaining_times"] > 0].tolist())
    for j in range(cfg.num_jobs):
        pending = np.flatnonzero(state["ops_mask"][j])
        if len(pending) and j not in running:
            m = state["ops_machine_ids"][j, pending[0]]
            mask[m, j] = state["machines_remaining_times"][m] == 0
    return mask


def spt_actions(state, mask, cfg):
    actions = np.full(cfg.num_machines, cfg.num_jobs)
    for m in range(cfg.num_machines):
        jobs = np.flatnonzero(mask[m, :-1])
        if len(jobs):
            nxt = [state["ops_durations"][j, np.flatnonzero(state["ops_mask"][j])[0]] for j in jobs]
            actions[m] = jobs[int(np.argmin(nxt))]
    return actions


def step(state, actions, cfg):
    for m, j in enumerate(actions):
        if j < cfg.num_jobs:
            k = np.flatnonzero(state["ops_mask"][j])[0]
            state["ops_mask"][j, k] = False
            state["machines_job_ids"][m] = j
            state["machines_remaining_times"][m] = state["ops_durations"][j, k]
    state["machines_remaining_times"] = np.maximum(state["machines_remaining_times"] - 1, 0)
    state["machines_job_ids"][state["machines_remaining_times"] == 0] = cfg.num_jobs
    return state


def done(state):
    return not state["ops_mask"].any() and not state["machines_remaining_times"].any()


def job_block_bias(num_jobs, max_num_ops):
    n = num_jobs * max_num_ops
    bias = torch.full((n, n), float("-inf"))
    for j in range(num_jobs):
        ops = slice(j * max_num_ops, (j + 1) * max_num_ops)
        bias[ops, ops] = 0.0
    return bias


class MultiHeadAttention(nn.Module):
    def __init__(self, embed_dim, num_heads):
        super().__init__()
        self.num_heads, self.key_size = num_heads, embed_dim // num_heads
        self.query, self.key, self.value = (nn.Linear(embed_dim, embed_dim) for _ in range(3))
        self.linear = nn.Linear(embed_dim, embed_dim)

    def forward(self, query, key, value, bias=None, key_keep=None):
        b = query.shape[0]
        q = self.query(query).view(b, -1, self.num_heads, self.key_size).transpose(1, 2)
        k = self.key(key).view(b, -1, self.num_heads, self.key_size).transpose(1, 2)
        v = self.value(value).view(b, -1, self.num_heads, self.key_size).transpose(1, 2)
        attn_logits = q @ k.transpose(-1, -2) / math.sqrt(self.key_size)
        if bias is not None:
            attn_logits = attn_logits + bias
        if key_keep is not None:
            attn_logits = attn_logits.masked_fill(~key_keep[:, None, None, :], torch.finfo(attn_logits.dtype).min)
        attn = torch.softmax(attn_logits, dim=-1) @ v
        return self.linear(attn.transpose(1, 2).reshape(b, -1, self.num_heads * self.key_size))


class JobShopActor(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg, d = cfg, cfg.embed_dim
        self.op_embed = nn.Linear(cfg.num_machines + 2, d)
        self.op_position = nn.Parameter(torch.randn(cfg.max_num_ops, d) * 0.1)
        self.register_buffer("job_bias", job_block_bias(cfg.num_jobs, cfg.max_num_ops))
        self.ops_attention = MultiHeadAttention(d, cfg.num_heads)
        self.machine_embed = nn.Linear(cfg.num_jobs + 2, d)
        self.machines_to_jobs = MultiHeadAttention(d, cfg.num_heads)
        self.no_op = nn.Parameter(torch.zeros(d))
        self.machine_head, self.job_head = nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, obs):
        cfg = self.cfg
        b = obs["ops_mask"].shape[0]
        feats = torch.cat([F.one_hot(obs["ops_machine_ids"], cfg.num_machines).float(),
                           obs["ops_durations"].float()[..., None] / cfg.max_op_duration,
                           obs["ops_mask"].float()[..., None]], dim=-1)
        ops = (self.op_embed(feats) + self.op_position).view(b, -1, cfg.embed_dim)
        pending = obs["ops_mask"].view(b, -1)
        ops = ops + self.ops_attention(ops, ops, ops, bias=self.job_bias, key_keep=pending)
        jobs = ops.view(b, cfg.num_jobs, cfg.max_num_ops, -1).mean(dim=2)
        machine_feats = torch.cat([F.one_hot(obs["machines_job_ids"], cfg.num_jobs + 1).float(),
                                   obs["machines_remaining_times"].float()[..., None] / cfg.max_op_duration], dim=-1)
        machines = self.machine_embed(machine_feats)
        machines = machines + self.machines_to_jobs(machines, jobs, jobs)
        targets = torch.cat([jobs, self.no_op.expand(b, 1, -1)], dim=1)
        logits = torch.einsum("bmd,bjd->bmj", self.machine_head(machines), self.job_head(targets))
        return torch.where(obs["action_mask"], logits, torch.finfo(logits.dtype).min)


def to_batch(observations):
    return {k: torch.as_tensor(np.stack([o[k] for o in observations])) for k in observations[0]}


def collect(cfg, rng, episodes):
    observations, actions = [], []
    for _ in range(episodes):
        state = generate_instance(cfg, rng)
        while not done(state):
            mask = action_mask(state, cfg)
            act = spt_actions(state, mask, cfg)
            observations.append({**{k: v.copy() for k, v in state.items()}, "action_mask": mask})
            actions.append(act)
            state = step(state, act, cfg)
    return observations, np.stack(actions)


def makespan(cfg, seed, policy=None):
    state, t = generate_instance(cfg, np.random.default_rng(seed)), 0
    while not done(state) and t < 100:
        mask = action_mask(state, cfg)
        if policy is None:
            act = spt_actions(state, mask, cfg)
        else:
            with torch.no_grad():
                act = policy(to_batch([{**state, "action_mask": mask}]))[0].argmax(-1).numpy()
        state, t = step(state, act, cfg), t + 1
    return t


def main():
    cfg, rng = JobShopConfig(), np.random.default_rng(0)
    torch.manual_seed(0)
    observations, actions = collect(cfg, rng, 200)
    actor = JobShopActor(cfg)
    optimizer = torch.optim.Adam(actor.parameters(), lr=3e-3)
    for epoch in range(4):
        order = rng.permutation(len(observations))
        for i in range(0, len(order), 64):
            idx = order[i:i + 64]
            logits = actor(to_batch([observations[j] for j in idx]))
            loss = F.cross_entropy(logits.flatten(0, 1), torch.as_tensor(actions[idx]).flatten())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print("epoch %d loss %.4f" % (epoch, loss.item()))
    spans = [(makespan(cfg, 10_000 + s, actor), makespan(cfg, 10_000 + s)) for s in range(20)]
    print("makespan policy %.2f  spt %.2f" % tuple(np.mean(spans, axis=0)))


if __name__ == "__main__":
    main()
