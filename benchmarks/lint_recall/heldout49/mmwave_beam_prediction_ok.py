"""Proactive mmWave beam prediction for vehicle-to-infrastructure links.

A base station with a 64-beam codebook logs the best beam of a passing
vehicle every 100 ms (DeepSense 6G-style scenario). A small GPT decoder reads
the observed beam sequence and rolls out the next beams with a key/value
cache, so the radio can switch beams before the link degrades.

Source: pytorch/pytorch PR #111007 (conventions.md §1 SDPA is_causal row, §2.7, §5 item 8)
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

N_BEAMS = 64
OBSERVED = 8
HORIZON = 3


def vehicle_passes(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    seqs = []
    for _ in range(n):
        start = torch.empty(1).uniform_(-60.0, 0.0, generator=g)
        speed = torch.empty(1).uniform_(2.0, 7.0, generator=g)
        accel = torch.empty(1).uniform_(-0.2, 0.2, generator=g)
        t = torch.arange(OBSERVED + HORIZON, dtype=torch.float32)
        angle = start + speed * t + accel * t**2 + 0.8 * torch.randn(t.shape, generator=g)
        beam = ((angle + 60.0) / 120.0 * (N_BEAMS - 1)).round().clamp(0, N_BEAMS - 1).long()
        seqs.append(beam)
    return torch.stack(seqs)


class CachedSelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)

    def forward(self, x, past=None):
        b, t, d = x.shape
        q, k, v = self.c_attn(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=past is None)
        return self.c_proj(y.transpose(1, 2).reshape(b, t, d)), (k, v)


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim)
        self.attn = CachedSelfAttention(dim, heads)
        self.ln_2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, past=None):
        a, present = self.attn(self.ln_1(x), past)
        x = x + a
        return x + self.mlp(self.ln_2(x)), present


class BeamGPT(nn.Module):
    def __init__(self, dim=64, heads=4, layers=2, max_len=32):
        super().__init__()
        self.wte = nn.Embedding(N_BEAMS, dim)
        self.wpe = nn.Embedding(max_len, dim)
        self.h = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, N_BEAMS, bias=False)

    def forward(self, beams, past_key_values=None):
        offset = 0 if past_key_values is None else past_key_values[0][0].shape[2]
        pos = torch.arange(offset, offset + beams.shape[1], device=beams.device)
        x = self.wte(beams) + self.wpe(pos)
        presents = []
        for i, block in enumerate(self.h):
            x, present = block(x, None if past_key_values is None else past_key_values[i])
            presents.append(present)
        return self.lm_head(self.ln_f(x)), presents

    @torch.no_grad()
    def rollout(self, observed, steps):
        logits, past = self(observed)
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        out = [nxt]
        for _ in range(steps - 1):
            logits, past = self(nxt, past)
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            out.append(nxt)
        return torch.cat(out, dim=1)


def beam_accuracy(model, seqs, tolerance=1):
    model.eval()
    pred = model.rollout(seqs[:, :OBSERVED], HORIZON)
    err = (pred - seqs[:, OBSERVED:]).abs()
    return (err == 0).float().mean().item(), (err <= tolerance).float().mean().item()


def main():
    torch.manual_seed(0)
    train, test = vehicle_passes(4000, seed=1), vehicle_passes(500, seed=2)
    model = BeamGPT()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for epoch in range(6):
        model.train()
        for i in range(0, len(train), 128):
            seq = train[i : i + 128]
            logits, _ = model(seq[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, N_BEAMS), seq[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
        top1, top1_tol = beam_accuracy(model, test)
        print(f"epoch {epoch} loss {loss.item():.3f} top-1 {top1:.3f} within one beam {top1_tol:.3f}")


if __name__ == "__main__":
    main()
