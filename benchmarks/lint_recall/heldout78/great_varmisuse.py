"""GREAT-style relational transformer for variable-misuse localisation and repair.

Python functions are tokenised, and program-graph edges (next token, last lexical use,
last write, and their reverse types) are given as ``(edge_type, source, target)`` triples.
As in Hellendoorn et al.'s Global Relational Models of Source Code, edge types enter the
attention logits through per-type key embeddings; two pointer heads then point at the
misused variable (position 0 stands for "no bug") and at a repair candidate, and the
repair probability is summed over every occurrence of the right variable.

Source: seed masked_fill_inplace.txt (例子); conventions.md §2.3
"""
import math
import random
import re

import torch
import torch.nn as nn
import torch.nn.functional as F

EDGE_TYPES = ["none", "next_token", "prev_token", "last_use", "next_use", "last_write", "next_write"]
KEYWORDS = {"def", "return", "for", "in", "if", "else", "while", "range", "len", "print"}
NO_BUG = 0


def build_sample(code, rng):
    tokens = ["<nobug>"] + re.findall(r"[A-Za-z_]\w*|\d+|\S", code)
    is_var = [bool(re.fullmatch(r"[A-Za-z_]\w*", t)) and t not in KEYWORDS and i > 0 for i, t in enumerate(tokens)]
    edges, last, last_write = [], {}, {}
    for i in range(1, len(tokens)):
        if i + 1 < len(tokens):
            edges += [(1, i, i + 1), (2, i + 1, i)]
        if is_var[i]:
            if tokens[i] in last:
                edges += [(3, i, last[tokens[i]]), (4, last[tokens[i]], i)]
            if tokens[i] in last_write:
                edges += [(5, i, last_write[tokens[i]]), (6, last_write[tokens[i]], i)]
            last[tokens[i]] = i
            if i + 1 < len(tokens) and tokens[i + 1] == "=":
                last_write[tokens[i]] = i
    variables = sorted({t for t, v in zip(tokens, is_var) if v})
    error_location, repair_target = NO_BUG, None
    uses = [i for i, v in enumerate(is_var) if v and i > 3]
    if rng.random() < 0.5 and len(variables) > 1 and uses:
        error_location = rng.choice(uses)
        repair_target = tokens[error_location]
        tokens[error_location] = rng.choice([v for v in variables if v != repair_target])
    return dict(tokens=tokens, is_var=is_var, edges=edges, error_location=error_location, repair_target=repair_target)


def collate(samples, vocab):
    n = max(len(s["tokens"]) for s in samples)
    ids = torch.zeros(len(samples), n, dtype=torch.long)
    edge_types = torch.zeros(len(samples), n, n, dtype=torch.long)
    candidate_mask = torch.zeros(len(samples), n, dtype=torch.bool)
    repair_targets = torch.zeros(len(samples), n, dtype=torch.bool)
    for b, s in enumerate(samples):
        ids[b, :len(s["tokens"])] = torch.tensor([vocab.setdefault(t, len(vocab) + 1) for t in s["tokens"]])
        for e, src, dst in s["edges"]:
            edge_types[b, src, dst] = e
        candidate_mask[b, :len(s["is_var"])] = torch.tensor(s["is_var"])
        if s["repair_target"] is not None:
            repair_targets[b, :len(s["tokens"])] = torch.tensor([t == s["repair_target"] for t in s["tokens"]])
    token_mask = ids != 0
    error_locations = torch.tensor([s["error_location"] for s in samples])
    return ids, token_mask, edge_types, candidate_mask, error_locations, repair_targets & candidate_mask


class RelationalAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.edge_keys = nn.Embedding(len(EDGE_TYPES), self.head_dim, padding_idx=0)
        self.out = nn.Linear(dim, dim, bias=False)

    def forward(self, states, edge_types, pad):
        b, n, d = states.shape
        q, k, v = self.qkv(states).view(b, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2)
        scores = scores + torch.einsum("bhqd,bqkd->bhqk", q, self.edge_keys(edge_types))
        scores = scores / math.sqrt(self.head_dim)
        scores.masked_fill(pad[:, None, None, :], float("-inf"))  # expect: MC525 discarded
        attn = scores.softmax(dim=-1)
        return self.out((attn @ v).transpose(1, 2).reshape(b, n, d))


class GreatModel(nn.Module):
    def __init__(self, vocab_size=256, dim=64, heads=4, layers=3):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=0)
        self.attention = nn.ModuleList(RelationalAttention(dim, heads) for _ in range(layers))
        self.ffn = nn.ModuleList(nn.Sequential(nn.Linear(dim, 4 * dim), nn.ReLU(), nn.Linear(4 * dim, dim))
                                 for _ in range(layers))
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(2 * layers))
        self.prediction = nn.Linear(dim, 2)

    def forward(self, ids, token_mask, edge_types, candidate_mask):
        states = self.embed(ids)
        pad = ~token_mask
        for i, (attn, ffn) in enumerate(zip(self.attention, self.ffn)):
            states = states + attn(self.norms[2 * i](states), edge_types, pad)
            states = states + ffn(self.norms[2 * i + 1](states))
        loc_logits, rep_logits = self.prediction(states).unbind(-1)
        loc_logits = loc_logits.masked_fill(~(candidate_mask | (torch.arange(ids.size(1)) == NO_BUG)),
                                            torch.finfo(loc_logits.dtype).min)
        rep_logits = rep_logits.masked_fill(~candidate_mask, torch.finfo(rep_logits.dtype).min)
        return loc_logits, rep_logits


def varmisuse_loss(loc_logits, rep_logits, error_locations, repair_targets):
    loc_loss = F.cross_entropy(loc_logits, error_locations)
    buggy = error_locations != NO_BUG
    rep_probs = rep_logits.softmax(-1)
    rep_loss = -torch.log((rep_probs * repair_targets).sum(-1)[buggy] + 1e-9).mean() if buggy.any() else 0.0
    return loc_loss + rep_loss


FUNCTIONS = [
    "def total(xs):\n    s = 0\n    for x in xs:\n        s = s + x\n    return s",
    "def scale(values, factor):\n    out = []\n    for v in values:\n        out.append(v * factor)\n    return out",
    "def clamp(x, lo, hi):\n    if x < lo:\n        return lo\n    return min(x, hi)",
    "def first_even(nums):\n    for n in nums:\n        if n % 2 == 0:\n            return n\n    return None",
]


if __name__ == "__main__":
    torch.manual_seed(0)
    rng, vocab = random.Random(0), {}
    model = GreatModel()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(4):
        batch = collate([build_sample(code, rng) for code in FUNCTIONS], vocab)
        ids, token_mask, edge_types, candidate_mask, error_locations, repair_targets = batch
        loc_logits, rep_logits = model(ids, token_mask, edge_types, candidate_mask)
        loss = varmisuse_loss(loc_logits, rep_logits, error_locations, repair_targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f} buggy {int((error_locations != NO_BUG).sum())}")
    with torch.no_grad():
        loc_logits, _ = model(ids, token_mask, edge_types, candidate_mask)
    print("localisation accuracy", (loc_logits.argmax(-1) == error_locations).float().mean().item())
