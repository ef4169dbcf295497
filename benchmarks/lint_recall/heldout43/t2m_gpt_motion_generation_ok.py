"""Text-to-motion generation with a GPT over discrete motion codes (T2M-GPT).

Follows Mael-zys/T2M-GPT: motions are cut into 4-frame units and quantized with a frozen motion
codebook (a k-means codebook stands in for the VQ-VAE), the caption is encoded once by a frozen
text encoder (a fixed bag-of-words projection stands in for CLIP) and prepended as the condition
token, and `Text2Motion_Transformer` (CrossCondTransBase + CrossCondTransHead) predicts the next
code or End. Generation samples codes until End; generated motions are judged by an action
classifier fitted on the real motions.

Source: pytorch/pytorch#29546, rasbt/LLMs-from-scratch#1061 (conventions.md §3 items 9 and 14), conventions.md §1 (direction cheat-sheet)
"""
import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

ACTIONS = {"walk": "a person walks forward", "run": "someone runs quickly ahead", "jump": "a man jumps up twice",
           "wave": "a person waves the right hand", "sit": "the person sits down slowly",
           "turn": "a person turns around"}
UNIT, N_FEAT = 4, 6


def synth_motion(action, rng):
    n = UNIT * rng.randint(8, 20)
    t = torch.arange(n).float()
    speed = {"walk": 0.05, "run": 0.12, "jump": 0.0, "wave": 0.0, "sit": 0.0, "turn": 0.02}[action]
    m = torch.zeros(n, N_FEAT)
    m[:, 0] = speed + 0.005 * rng.random()
    m[:, 1] = {"jump": 0.3 * torch.sin(t / 3).clamp(min=0), "sit": -0.5 * (t / n)}.get(action, torch.zeros(n))
    m[:, 2] = 0.6 * torch.sin(t * (0.5 if action == "run" else 0.25)) * (speed > 0.03)
    m[:, 3] = (action == "wave") * 0.8 * torch.sin(t * 0.6)
    m[:, 4] = (action == "turn") * t / n * math.pi
    m[:, 5] = (action == "sit") * 0.9 * (t / n)
    return m + 0.01 * torch.randn(n, N_FEAT)


class MotionCodebook:
    def __init__(self, motions, num_vq=48, iters=15):
        units = torch.cat([m.view(-1, UNIT * N_FEAT) for m in motions])
        self.codes = units[torch.randperm(len(units))[:num_vq]].clone()
        for _ in range(iters):
            assign = torch.cdist(units, self.codes).argmin(-1)
            for c in range(num_vq):
                if (assign == c).any():
                    self.codes[c] = units[assign == c].mean(0)

    def encode(self, motion):
        return torch.cdist(motion.view(-1, UNIT * N_FEAT), self.codes).argmin(-1)

    def decode(self, idx):
        return self.codes[idx].view(-1, N_FEAT)


class TextEncoder:
    def __init__(self, clip_dim=64, seed=0):
        g = torch.Generator().manual_seed(seed)
        words = sorted({w for c in ACTIONS.values() for w in c.split()})
        self.table = {w: torch.randn(clip_dim, generator=g) for w in words}

    def __call__(self, captions):
        feats = torch.stack([sum(self.table[w] for w in c.split()) for c in captions])
        return F.normalize(feats, dim=-1)


def causal_keep(block_size):
    return torch.tril(torch.ones(block_size, block_size))


class CausalCrossConditionalSelfAttention(nn.Module):
    def __init__(self, embed_dim=128, block_size=32, n_head=4, drop_out_rate=0.1):
        super().__init__()
        self.key, self.query, self.value = (nn.Linear(embed_dim, embed_dim) for _ in range(3))
        self.attn_drop, self.resid_drop = nn.Dropout(drop_out_rate), nn.Dropout(drop_out_rate)
        self.proj = nn.Linear(embed_dim, embed_dim)
        self.register_buffer("mask", causal_keep(block_size).view(1, 1, block_size, block_size))
        self.n_head = n_head

    def forward(self, x):
        B, T, C = x.size()
        k = self.key(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = self.query(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = self.value(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        att = self.attn_drop(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_drop(self.proj(y))


class Block(nn.Module):
    def __init__(self, embed_dim=128, block_size=32, n_head=4, drop_out_rate=0.1, fc_rate=4):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(embed_dim), nn.LayerNorm(embed_dim)
        self.attn = CausalCrossConditionalSelfAttention(embed_dim, block_size, n_head, drop_out_rate)
        self.mlp = nn.Sequential(nn.Linear(embed_dim, fc_rate * embed_dim), nn.GELU(),
                                 nn.Linear(fc_rate * embed_dim, embed_dim), nn.Dropout(drop_out_rate))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Text2Motion_Transformer(nn.Module):
    def __init__(self, num_vq=48, embed_dim=128, clip_dim=64, block_size=32, num_layers=3, n_head=4):
        super().__init__()
        self.num_vq, self.block_size = num_vq, block_size
        self.tok_emb = nn.Embedding(num_vq + 2, embed_dim)
        self.cond_emb = nn.Linear(clip_dim, embed_dim)
        self.pos_embedding = nn.Parameter(torch.zeros(1, block_size, embed_dim))
        self.trans_base = nn.Sequential(*[Block(embed_dim, block_size, n_head) for _ in range(num_layers // 2 + 1)])
        self.trans_head = nn.Sequential(*[Block(embed_dim, block_size, n_head) for _ in range(num_layers // 2 + 1)])
        self.ln_f = nn.LayerNorm(embed_dim)
        self.head = nn.Linear(embed_dim, num_vq + 1, bias=False)

    def forward(self, idxs, clip_feature):
        token_embeddings = torch.cat([self.cond_emb(clip_feature).unsqueeze(1), self.tok_emb(idxs)], dim=1)
        x = token_embeddings + self.pos_embedding[:, : token_embeddings.size(1)]
        return self.head(self.ln_f(self.trans_head(self.trans_base(x))))

    @torch.no_grad()
    def sample(self, clip_feature, top_k=3):
        xs = torch.zeros(clip_feature.size(0), 0, dtype=torch.long)
        finished = torch.zeros(clip_feature.size(0), dtype=torch.bool)
        for _ in range(self.block_size - 1):
            logits = self(xs, clip_feature)[:, -1]
            v, _ = torch.topk(logits, top_k)
            logits = logits.masked_fill(logits < v[:, [-1]], float("-inf"))
            nxt = torch.multinomial(F.softmax(logits, dim=-1), 1).squeeze(-1)
            finished |= nxt == self.num_vq
            xs = torch.cat([xs, torch.where(finished, self.num_vq + 1, nxt)[:, None]], dim=1)
            if finished.all():
                break
        return [row[row < self.num_vq] for row in xs]


def motion_descriptor(m):
    return torch.cat([m.mean(0), m.std(0), m[-1] - m[0]])


def main():
    rng = random.Random(0)
    torch.manual_seed(0)
    names = list(ACTIONS)
    data = [(a, synth_motion(a, rng)) for a in names for _ in range(150)]
    rng.shuffle(data)
    codebook, text_encoder = MotionCodebook([m for _, m in data]), TextEncoder()
    centroids = torch.stack([torch.stack([motion_descriptor(m) for a, m in data if a == n]).mean(0) for n in names])
    model = Text2Motion_Transformer()
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4, betas=(0.9, 0.99), weight_decay=1e-4)
    for step in range(350):
        model.train()
        batch = rng.sample(data, 32)
        codes = [codebook.encode(m) for _, m in batch]
        target = torch.full((32, model.block_size), model.num_vq + 1, dtype=torch.long)
        for i, c in enumerate(codes):
            target[i, : len(c)], target[i, len(c)] = c, model.num_vq
        clip_feature = text_encoder([ACTIONS[a] for a, _ in batch])
        logits = model(target[:, :-1], clip_feature)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), target.reshape(-1), ignore_index=model.num_vq + 1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.3f}")
    model.eval()
    captions = [n for n in names for _ in range(20)]
    samples = model.sample(text_encoder([ACTIONS[n] for n in captions]))
    hits = 0
    for name, codes in zip(captions, samples):
        if len(codes):
            d = motion_descriptor(codebook.decode(codes))
            hits += names[torch.cdist(d[None], centroids).argmin().item()] == name
    print(f"generated motions matching their caption: {hits / len(captions):.3f}")


if __name__ == "__main__":
    main()
