"""Computer Vision 231, Assignment 3, Q2: image captioning with a Transformer decoder.

The assignment's data loader is replaced here by a toy "shapes" data set so the
notebook runs in a minute on a laptop: each image is a grid of four region features
(a fixed random projection of its attributes plus noise, standing in for CNN
features), and each caption says how many shapes of which size, colour and kind it
shows. The decoder is written from scratch: token and position embeddings, masked
self-attention, cross-attention to the projected region features, a feed-forward
block, and greedy sampling with a key/value cache (the last, optional part).

Source: conventions.md §1 (SDPA is_causal row), §2.7, §5 item 8; pytorch/pytorch PR #111007
"""
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

COLOURS = ["red", "green", "blue", "yellow"]
SHAPES = ["circle", "square", "triangle"]
SIZES = ["small", "big", None]
COUNTS = ["a", "two", "three"]
WORDS = ["<NULL>", "<START>", "<END>"] + COUNTS + [s for s in SIZES if s] + COLOURS + SHAPES + [s + "s" for s in SHAPES]
W2I = {w: i for i, w in enumerate(WORDS)}
NULL, START, END = 0, 1, 2
N_REGIONS, FEAT_DIM, MAX_LEN = 4, 32, 8

_proj = torch.randn(len(COUNTS) + len(SIZES) + len(COLOURS) + len(SHAPES), N_REGIONS * FEAT_DIM, generator=torch.Generator().manual_seed(7))


def make_example(rng):
    c, s, col, sh = rng.randrange(3), rng.randrange(3), rng.randrange(4), rng.randrange(3)
    attrs = torch.zeros(_proj.shape[0])
    for offset, idx in [(0, c), (3, s), (6, col), (10, sh)]:
        attrs[offset + idx] = 1.0
    feats = (attrs @ _proj).view(N_REGIONS, FEAT_DIM) + 0.1 * torch.randn(N_REGIONS, FEAT_DIM)
    words = [COUNTS[c]] + ([SIZES[s]] if SIZES[s] else []) + [COLOURS[col], SHAPES[sh] + ("s" if c else "")]
    return feats, ["<START>"] + words + ["<END>"]


def to_batch(examples):
    feats = torch.stack([f for f, _ in examples])
    captions = torch.full((len(examples), MAX_LEN), NULL, dtype=torch.long)
    for i, (_, words) in enumerate(examples):
        captions[i, : len(words)] = torch.tensor([W2I[w] for w in words])
    return feats, captions


def decode(ids):
    words = []
    for i in ids:
        if i == END:
            break
        if i not in (NULL, START):
            words.append(WORDS[i])
    return " ".join(words)


class SelfAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def split(self, t):
        B, L, D = t.shape
        return t.view(B, L, self.n_heads, D // self.n_heads).transpose(1, 2)

    def forward(self, x, cache=None):
        B, L, _ = x.shape
        q, k, v = (self.split(t) for t in self.qkv(x).chunk(3, dim=-1))
        if cache is not None:
            if "k" in cache:
                k = torch.cat([cache["k"], k], dim=2)
                v = torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(L, k.shape[2], dtype=torch.bool, device=x.device).tril(diagonal=k.shape[2] - L))
        return self.proj(out.transpose(1, 2).reshape(B, L, -1))


class DecoderLayer(nn.Module):
    def __init__(self, d_model, n_heads, dropout):
        super().__init__()
        self.self_attn = SelfAttention(d_model, n_heads)
        self.cross_attn = nn.MultiheadAttention(d_model, n_heads, dropout=dropout, batch_first=True)
        self.ffn = nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.ReLU(), nn.Linear(2 * d_model, d_model))
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(3))
        self.drop = nn.Dropout(dropout)

    def forward(self, x, memory, cache=None):
        x = self.norms[0](x + self.drop(self.self_attn(x, cache)))
        x = self.norms[1](x + self.drop(self.cross_attn(x, memory, memory, need_weights=False)[0]))
        return self.norms[2](x + self.drop(self.ffn(x)))


class CaptioningTransformer(nn.Module):
    def __init__(self, d_model=64, n_heads=4, n_layers=2, dropout=0.1):
        super().__init__()
        self.visual_projection = nn.Linear(FEAT_DIM, d_model)
        self.embedding = nn.Embedding(len(WORDS), d_model, padding_idx=NULL)
        self.positional = nn.Embedding(MAX_LEN, d_model)
        self.layers = nn.ModuleList(DecoderLayer(d_model, n_heads, dropout) for _ in range(n_layers))
        self.output = nn.Linear(d_model, len(WORDS))

    def forward(self, features, captions, caches=None, offset=0):
        memory = self.visual_projection(features)
        pos = torch.arange(offset, offset + captions.size(1), device=captions.device)
        x = self.embedding(captions) + self.positional(pos)[None]
        for i, layer in enumerate(self.layers):
            x = layer(x, memory, None if caches is None else caches[i])
        return self.output(x)

    @torch.no_grad()
    def sample(self, features, use_cache=True):
        self.eval()
        B = features.size(0)
        captions = torch.full((B, 1), START, dtype=torch.long)
        caches = [dict() for _ in self.layers] if use_cache else None
        for t in range(MAX_LEN - 1):
            if use_cache:
                logits = self(features, captions[:, -1:], caches, offset=t)
            else:
                logits = self(features, captions)
            captions = torch.cat([captions, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        return captions


def main():
    rng = random.Random(0)
    torch.manual_seed(0)
    train = [make_example(rng) for _ in range(2000)]
    val = [make_example(rng) for _ in range(200)]
    feats, caps = to_batch(train[:3])
    print("features", tuple(feats.shape), "captions", tuple(caps.shape))
    for row in caps:
        print("  ", decode(row.tolist()))
    assert feats.shape == (3, N_REGIONS, FEAT_DIM)

    model = CaptioningTransformer()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(4):
        model.train()
        rng.shuffle(train)
        for s in range(0, len(train), 50):
            feats, caps = to_batch(train[s : s + 50])
            logits = model(feats, caps[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, len(WORDS)), caps[:, 1:].reshape(-1), ignore_index=NULL)
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"epoch {epoch}: loss {loss.item():.4f}")

    feats, caps = to_batch(val)
    refs = [decode(c.tolist()) for c in caps]
    for use_cache in (False, True):
        hyps = [decode(c.tolist()) for c in model.sample(feats, use_cache=use_cache)]
        exact = sum(h == r for h, r in zip(hyps, refs)) / len(refs)
        print(f"greedy sampling, cache={use_cache}: exact match {exact:.3f}")
        for h, r in list(zip(hyps, refs))[:3]:
            print(f"   ref: {r:28s} sample: {h}")


if __name__ == "__main__":
    main()
