"""Game outcome from Go openings (baduk, 9x9 records).

Move sequences of different lengths are embedded as board points, encoded by a
stack of attention blocks and pooled into a win probability for Black.  The
attention implementation is looked up by name in a registry, the way the model
config selects it.

Source: seed self_attention_mask_guide.txt (section 2); conventions.md section 1.
"""
from __future__ import annotations

import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from einops import rearrange, reduce

BOARD = 9
PASS = BOARD * BOARD + 1
PAD = 0
ATTENTION: dict[str, type[nn.Module]] = {}

CONFIG = {
    "attention": "torch_mha",
    "dim": 48,
    "heads": 4,
    "depth": 2,
    "dropout": 0.0,
    "max_moves": 40,
}


def register(name):
    def wrap(cls):
        ATTENTION[name] = cls
        return cls
    return wrap


@register("torch_mha")
class TorchAttention(nn.Module):
    def __init__(self, dim, heads, dropout):
        super().__init__()
        self.mha = nn.MultiheadAttention(dim, heads, dropout=dropout, batch_first=True)

    def forward(self, x, attention_mask):
        out, _ = self.mha(x, x, x, key_padding_mask=~attention_mask, need_weights=False)
        return out


@register("sdpa")
class SdpaAttention(nn.Module):
    def __init__(self, dim, heads, dropout):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x, attention_mask):
        q, k, v = rearrange(self.qkv(x), "b n (t h d) -> t b h n d", t=3, h=self.heads)
        keep = rearrange(attention_mask, "b n -> b 1 1 n")
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, dropout_p=self.dropout if self.training else 0.0)
        return self.out(rearrange(o, "b h n d -> b n (h d)"))


class Layer(nn.Module):
    def __init__(self, attention, dim, heads, dropout, **_):
        super().__init__()
        self.attn = ATTENTION[attention](dim, heads, dropout)
        self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x, attention_mask):
        x = x + self.attn(self.n1(x), attention_mask)
        return x + self.ff(self.n2(x))


class OpeningNet(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        self.point = nn.Embedding(PASS + 1, cfg["dim"], padding_idx=PAD)
        self.colour = nn.Embedding(2, cfg["dim"])
        self.layers = nn.ModuleList(Layer(**cfg) for _ in range(cfg["depth"]))
        self.head = nn.Linear(cfg["dim"], 1)

    def forward(self, moves, attention_mask):
        turn = torch.arange(moves.shape[1]) % 2
        x = self.point(moves) + self.colour(turn)[None]
        for layer in self.layers:
            x = layer(x, attention_mask)
        w = attention_mask.unsqueeze(-1).to(x.dtype)
        pooled = reduce(x * w, "b n d -> b d", "sum") / reduce(w, "b n d -> b d", "sum")
        return self.head(pooled).squeeze(-1)


def play_opening(rng, max_moves):
    n = rng.randint(6, max_moves)
    points = rng.sample(range(1, BOARD * BOARD + 1), n)
    star = {1 + r * BOARD + c for r in (2, 4, 6) for c in (2, 4, 6)}
    edge = {1 + r * BOARD + c for r in range(BOARD) for c in range(BOARD) if min(r, c, 8 - r, 8 - c) == 0}
    score = sum((p in star) - (p in edge) for p in points[0::2]) - sum((p in star) - (p in edge) for p in points[1::2])
    return points, float(score + rng.gauss(0, 0.5) > 0)


def collate(games):
    lengths = torch.tensor([len(m) for m, _ in games])
    moves = torch.zeros(len(games), int(lengths.max()), dtype=torch.long)
    for row, (m, _) in enumerate(games):
        moves[row, : len(m)] = torch.tensor(m)
    attention_mask = torch.arange(moves.shape[1])[None, :] < lengths[:, None]
    return moves, attention_mask, torch.tensor([w for _, w in games])


def main():
    rng = random.Random(3)
    torch.manual_seed(3)
    model = OpeningNet(CONFIG)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for step in range(300):
        moves, attention_mask, won = collate([play_opening(rng, CONFIG["max_moves"]) for _ in range(32)])
        loss = F.binary_cross_entropy_with_logits(model(moves, attention_mask), won)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    moves, attention_mask, won = collate([play_opening(rng, CONFIG["max_moves"]) for _ in range(500)])
    with torch.no_grad():
        logits = model(moves, attention_mask)
    print(f"loss {loss.item():.3f}  nan outputs {int(logits.isnan().sum())}")
    print(f"held-out accuracy {((logits > 0).float() == won).float().mean().item():.3f}")


if __name__ == "__main__":
    main()
