"""MotionLM-style autoregressive motion-token decoder.

Future trajectories are turned into discrete motion tokens (per-step
displacement bins on a uniform grid). A small Transformer decoder predicts the
next token from the previous ones and from the encoded scene, which arrives
padded from the upstream scene encoder together with its padding flags.
Rollouts draw several futures per agent with Gumbel-max sampling.

Source: seed self_attention_mask_guide.txt §3 (generate_causal_mask); pytorch/pytorch#103749 (conventions.md §3 item 5), pytorch/pytorch#41508 (item 1); conventions.md §2.3 and §2.4.
"""
import functools

import torch
import torch.nn as nn
import torch.nn.functional as F

NUM_BINS = 13
MAX_DELTA = 3.0
BOS = NUM_BINS * NUM_BINS
VOCAB = BOS + 1


def tokenize(future, origin):
    deltas = torch.diff(torch.cat([origin[:, None], future], dim=1), dim=1)
    bins = ((deltas.clamp(-MAX_DELTA, MAX_DELTA) + MAX_DELTA) / (2 * MAX_DELTA) * (NUM_BINS - 1)).round().long()
    return bins[..., 0] * NUM_BINS + bins[..., 1]


def detokenize(tokens, origin):
    tokens = tokens.clamp(max=BOS - 1)
    bins = torch.stack([tokens // NUM_BINS, tokens % NUM_BINS], dim=-1).float()
    deltas = bins / (NUM_BINS - 1) * (2 * MAX_DELTA) - MAX_DELTA
    return origin[:, None] + deltas.cumsum(dim=1)


@functools.lru_cache(maxsize=8)
def causal_mask(n):
    return torch.triu(torch.full((n, n), float("-inf")))  # expect: MC503 diagonal


class DecoderLayer(nn.Module):
    def __init__(self, d_model, nhead, dropout=0.1):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout, batch_first=True)
        self.cross_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout, batch_first=True)
        self.ffn = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.ReLU(), nn.Dropout(dropout), nn.Linear(4 * d_model, d_model))
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)

    def forward(self, x, scene, scene_pad, tgt_mask):
        h = self.norm1(x)
        x = x + self.self_attn(h, h, h, attn_mask=tgt_mask)[0]
        h = self.norm2(x)
        x = x + self.cross_attn(h, scene, scene, key_padding_mask=scene_pad)[0]
        return x + self.ffn(self.norm3(x))


class MotionTokenDecoder(nn.Module):
    def __init__(self, d_model=64, nhead=4, num_layers=2, max_steps=16):
        super().__init__()
        self.token_embed = nn.Embedding(VOCAB, d_model)
        self.step_embed = nn.Embedding(max_steps + 1, d_model)
        self.layers = nn.ModuleList([DecoderLayer(d_model, nhead) for _ in range(num_layers)])
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, VOCAB)

    def forward(self, prev_tokens, scene, scene_pad):
        n = prev_tokens.size(1)
        steps = torch.arange(n, device=prev_tokens.device)
        x = self.token_embed(prev_tokens) + self.step_embed(steps)
        tgt_mask = causal_mask(n).to(x.device)
        for layer in self.layers:
            x = layer(x, scene, scene_pad, tgt_mask)
        return self.head(self.norm(x))

    def loss(self, future, origin, future_valid, scene, scene_pad):
        targets = tokenize(future, origin)
        bos = torch.full_like(targets[:, :1], BOS)
        logits = self(torch.cat([bos, targets[:, :-1]], dim=1), scene, scene_pad)
        targets = targets.masked_fill(~future_valid, -100)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)

    @torch.no_grad()
    def rollout(self, scene, scene_pad, origin, steps, num_samples=4, temperature=1.0):
        b = scene.size(0)
        scene = scene.repeat_interleave(num_samples, dim=0)
        scene_pad = scene_pad.repeat_interleave(num_samples, dim=0)
        tokens = torch.full((b * num_samples, 1), BOS, dtype=torch.long)
        for _ in range(steps):
            logits = self(tokens, scene, scene_pad)[:, -1] / temperature
            gumbel = -torch.empty_like(logits).exponential_().log()
            nxt = (logits + gumbel).argmax(dim=-1, keepdim=True)
            tokens = torch.cat([tokens, nxt], dim=1)
        trajs = detokenize(tokens[:, 1:], origin.repeat_interleave(num_samples, dim=0))
        return trajs.view(b, num_samples, steps, 2)


def min_ade(samples, future, future_valid):
    err = (samples - future[:, None]).norm(dim=-1)
    w = future_valid[:, None].float()
    return ((err * w).sum(-1) / w.sum(-1).clamp(min=1)).min(dim=1).values.mean()


def encode_scene(num_tokens, d_model, lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    scene = torch.randn(len(lengths), num_tokens, d_model, generator=g)
    scene_pad = torch.arange(num_tokens)[None, :] >= torch.tensor(lengths)[:, None]
    return scene.masked_fill(scene_pad[..., None], 0.0), scene_pad


if __name__ == "__main__":
    torch.manual_seed(0)
    steps = 8
    model = MotionTokenDecoder(d_model=64, nhead=4, num_layers=2, max_steps=steps)
    opt = torch.optim.Adam(model.parameters(), lr=3e-4)
    scene, scene_pad = encode_scene(10, 64, lengths=[10, 6, 3])
    origin = torch.randn(3, 2)
    future = origin[:, None] + torch.randn(3, steps, 2).clamp(-2, 2).cumsum(1)
    future_valid = torch.ones(3, steps, dtype=torch.bool)
    future_valid[2, 5:] = False
    for it in range(3):
        loss = model.loss(future, origin, future_valid, scene, scene_pad)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"iter {it} nll {loss.item():.4f}")
    model.eval()
    samples = model.rollout(scene, scene_pad, origin, steps, num_samples=4)
    print("samples", tuple(samples.shape), "minADE", round(min_ade(samples, future, future_valid).item(), 3))
