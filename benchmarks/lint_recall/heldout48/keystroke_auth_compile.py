"""Continuous authentication from keystroke dynamics, with the attention kernel under torch.compile.

A typing session is a sequence of key events (key code, hold time, flight time, down-down
latency); sessions are cut to 128 events and padded to a fixed bucket (32, 64 or 128) so the
compiled kernel sees three shapes only. Training classifies the enrolled users; verification
compares a session's L2-normalised embedding with the user's enrolment template and reports the
equal error rate.

Source: pytorch/pytorch#103963 (conventions.md section 3 item 6), huggingface/transformers#32195 (item 25), section 2.9.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

BUCKETS = (32, 64, 128)
N_KEYS = 48
torch._dynamo.config.cache_size_limit = 16


@torch.compile(dynamic=False)
def keystroke_attention(q, k, v, pad):
    scores = (q @ k.transpose(-2, -1)) * (q.size(-1) ** -0.5)
    scores = scores + pad[:, None, None, :]  # expect: MC509 compiled
    return scores.softmax(dim=-1) @ v


def bucket_collate(sessions):
    lengths = torch.tensor([min(len(s["keys"]), BUCKETS[-1]) for s in sessions])
    width = next(b for b in BUCKETS if b >= lengths.max())
    keys = torch.zeros(len(sessions), width, dtype=torch.long)
    timing = torch.zeros(len(sessions), width, 3)
    for i, s in enumerate(sessions):
        n = int(lengths[i])
        keys[i, :n] = s["keys"][:n]
        timing[i, :n] = s["timing"][:n]
    pad = torch.arange(width)[None, :] >= lengths[:, None]
    users = torch.tensor([s["user"] for s in sessions])
    return keys, timing, pad, users


class TypingLayer(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.GELU(), nn.Linear(2 * d_model, d_model))

    def forward(self, x, pad):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        x = x + self.out(keystroke_attention(q, k, v, pad).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x))


class KeystrokeEncoder(nn.Module):
    def __init__(self, n_users, d_model=64, n_heads=4, n_layers=2, emb_dim=64):
        super().__init__()
        self.key_emb = nn.Embedding(N_KEYS, d_model)
        self.timing = nn.Linear(3, d_model)
        self.pos = nn.Embedding(BUCKETS[-1], d_model)
        self.layers = nn.ModuleList([TypingLayer(d_model, n_heads) for _ in range(n_layers)])
        self.proj = nn.Linear(d_model, emb_dim)
        self.classifier = nn.Linear(emb_dim, n_users)

    def embed(self, keys, timing, pad):
        x = self.key_emb(keys) + self.timing(timing) + self.pos(torch.arange(keys.size(1), device=keys.device))
        for layer in self.layers:
            x = layer(x, pad)
        keep = (~pad).unsqueeze(-1).to(x.dtype)
        return F.normalize(self.proj((x * keep).sum(1) / keep.sum(1)), dim=-1)

    def forward(self, keys, timing, pad):
        return self.classifier(self.embed(keys, timing, pad) * 16.0)


def synth_sessions(n_users, per_user, seed):
    g = torch.Generator().manual_seed(seed)
    hold_mu = 0.08 + 0.06 * torch.rand(n_users, N_KEYS, generator=g)
    flight_mu = 0.10 + 0.15 * torch.rand(n_users, N_KEYS, generator=g)
    sessions = []
    for user in range(n_users):
        for _ in range(per_user):
            n = int(torch.randint(20, 140, (1,), generator=g))
            keys = torch.randint(0, N_KEYS, (n,), generator=g)
            hold = hold_mu[user, keys] * (1 + 0.15 * torch.randn(n, generator=g))
            flight = flight_mu[user, keys] * (1 + 0.2 * torch.randn(n, generator=g))
            timing = torch.stack([hold, flight, hold + flight], dim=-1) * 10
            sessions.append({"keys": keys, "timing": timing, "user": user})
    return sessions


def equal_error_rate(genuine, impostor):
    scores = torch.cat([genuine, impostor])
    labels = torch.cat([torch.ones_like(genuine), torch.zeros_like(impostor)])
    order = scores.argsort(descending=True)
    tpr = labels[order].cumsum(0) / labels.sum()
    fpr = (1 - labels[order]).cumsum(0) / (1 - labels).sum()
    i = int(((1 - tpr) - fpr).abs().argmin())
    return float((fpr[i] + 1 - tpr[i]) / 2)


def verify(model, enrol, probe):
    model.eval()
    with torch.no_grad():
        e_keys, e_timing, e_pad, e_users = bucket_collate(enrol)
        p_keys, p_timing, p_pad, p_users = bucket_collate(probe)
        e, p = model.embed(e_keys, e_timing, e_pad), model.embed(p_keys, p_timing, p_pad)
        templates = torch.stack([F.normalize(e[e_users == u].mean(0), dim=0) for u in range(int(e_users.max()) + 1)])
        sims = p @ templates.T
        same = p_users[:, None] == torch.arange(templates.size(0))[None, :]
        return equal_error_rate(sims[same], sims[~same])


def train(n_users=20, epochs=8, batch_size=32, lr=2e-3):
    torch.manual_seed(0)
    everything = synth_sessions(n_users, 40, seed=0)
    sessions = [s for i, s in enumerate(everything) if i % 40 < 30]
    model = KeystrokeEncoder(n_users)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    for epoch in range(epochs):
        model.train()
        perm = torch.randperm(len(sessions)).tolist()
        for i in range(0, len(perm), batch_size):
            keys, timing, pad, users = bucket_collate([sessions[j] for j in perm[i:i + batch_size]])
            loss = F.cross_entropy(model(keys, timing, pad), users)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}: loss {loss.item():.3f}")
    enrol = [s for i, s in enumerate(everything) if 30 <= i % 40 < 35]
    probe = [s for i, s in enumerate(everything) if i % 40 >= 35]
    print(f"EER {verify(model, enrol, probe):.3f}")
    return model


if __name__ == "__main__":
    train()
