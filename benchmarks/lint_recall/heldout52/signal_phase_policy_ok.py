"""Phase switching policy for a four-approach signalised intersection.

The policy is cloned from a max-pressure controller: at every step it reads
the queue lengths, the current phase and the time spent in it, and decides to
hold or switch.  Episodes start at different points of the day, so histories
have different lengths and are right-padded.  Attention functions are built by
a factory from the config dict.

Source: conventions.md sections 2.7 and 5; pytorch/pytorch PR #111007.
"""
from __future__ import annotations

import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from einops import rearrange

CONFIG = {"dim": 32, "heads": 4, "layers": 2, "attn_dropout": 0.1, "history": 24, "min_green": 3}


def make_attention(cfg):
    p = cfg["attn_dropout"]

    def attend(q, k, v, keep, training):
        causal = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep & causal, dropout_p=p if training else 0.0)

    return attend


class PolicyLayer(nn.Module):
    def __init__(self, cfg, attend):
        super().__init__()
        self.heads, self.attend = cfg["heads"], attend
        self.norm = nn.LayerNorm(cfg["dim"])
        self.qkv = nn.Linear(cfg["dim"], 3 * cfg["dim"])
        self.proj = nn.Linear(cfg["dim"], cfg["dim"])
        self.ff = nn.Sequential(nn.LayerNorm(cfg["dim"]), nn.Linear(cfg["dim"], 2 * cfg["dim"]), nn.ReLU(), nn.Linear(2 * cfg["dim"], cfg["dim"]))

    def forward(self, x, keep):
        q, k, v = rearrange(self.qkv(self.norm(x)), "b t (n h d) -> n b h t d", n=3, h=self.heads)
        x = x + self.proj(rearrange(self.attend(q, k, v, keep, self.training), "b h t d -> b t (h d)"))
        return x + self.ff(x)


class SignalPolicy(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        attend = make_attention(cfg)
        self.embed = nn.Linear(7, cfg["dim"])
        self.step = nn.Embedding(cfg["history"], cfg["dim"])
        self.layers = nn.ModuleList(PolicyLayer(cfg, attend) for _ in range(cfg["layers"]))
        self.head = nn.Linear(cfg["dim"], 2)

    def forward(self, obs, valid):
        keep = rearrange(valid, "b t -> b 1 1 t")
        x = self.embed(obs) + self.step.weight[: obs.shape[1]]
        for layer in self.layers:
            x = layer(x, keep)
        return self.head(x)


def simulate(rng, steps, min_green):
    queues, phase, elapsed = [rng.randint(0, 5) for _ in range(4)], 0, 0
    obs, acts = [], []
    for _ in range(steps):
        green = (0, 2) if phase == 0 else (1, 3)
        red = (1, 3) if phase == 0 else (0, 2)
        pressure = sum(queues[i] for i in red) - sum(queues[i] for i in green)
        switch = int(elapsed >= min_green and pressure > 2)
        obs.append([q / 10 for q in queues] + [float(phase), 1.0 - phase, elapsed / 10])
        acts.append(switch)
        for i in range(4):
            queues[i] = max(0, queues[i] + rng.randint(0, 2) - (3 if i in green else 0))
        phase, elapsed = (1 - phase, 0) if switch else (phase, elapsed + 1)
    return obs, acts


def batch(rng, n, cfg):
    lengths = [rng.randint(6, cfg["history"]) for _ in range(n)]
    obs = torch.zeros(n, cfg["history"], 7)
    acts = torch.full((n, cfg["history"]), -100)
    for row, length in enumerate(lengths):
        o, a = simulate(rng, length, cfg["min_green"])
        obs[row, :length], acts[row, :length] = torch.tensor(o), torch.tensor(a)
    valid = torch.arange(cfg["history"])[None] < torch.tensor(lengths)[:, None]
    return obs, valid, acts


def main():
    rng = random.Random(5)
    torch.manual_seed(5)
    policy = SignalPolicy(CONFIG)
    opt = torch.optim.AdamW(policy.parameters(), lr=2e-3)
    for it in range(150):
        obs, valid, acts = batch(rng, 32, CONFIG)
        loss = F.cross_entropy(rearrange(policy(obs, valid), "b t c -> (b t) c"), acts.flatten(), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        opt.step()
    policy.eval()
    obs, valid, acts = batch(rng, 400, CONFIG)
    with torch.no_grad():
        pred = policy(obs, valid).argmax(-1)
    agree = (pred == acts)[valid].float().mean().item()
    print(f"loss {loss.item():.3f}  agreement with max-pressure {agree:.3f}")


if __name__ == "__main__":
    main()
