"""Sampling loop for a small story model: temperature, top-k and top-p (nucleus) filtering of the
logits, a repetition penalty and banned tokens, with batched left-padded prompts. The model is
trained in float32 and served as a `.half()` copy to halve its memory.

Source: NVIDIA/apex#1052 and #1105, facebookresearch/fairseq#3575, conventions.md §2.3 and §3 item 18, tools.md §0 P5
"""
import copy

import torch
import torch.nn as nn

torch.manual_seed(0)
VOCAB, DIM, HEADS, PAD, UNK = 64, 32, 4, 0, 1


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.proj = nn.Linear(DIM, DIM)
        self.norm = nn.LayerNorm(DIM)

    def forward(self, x, keep):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, t, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / (DIM // HEADS) ** 0.5
        allowed = torch.ones(t, t, dtype=torch.bool).tril() & keep[:, None, None, :]
        scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
        return x + self.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, DIM))


class StoryLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(2))
        self.out = nn.Linear(DIM, VOCAB)

    def forward(self, ids, keep):
        x = self.emb(ids)
        for block in self.blocks:
            x = block(x, keep)
        return self.out(x)


def filter_logits(logits, generated, top_k=8, top_p=0.9, penalty=1.3, banned=(PAD, UNK)):
    logits = logits.float()
    seen = torch.zeros_like(logits, dtype=torch.bool).scatter_(1, generated, True)
    logits = torch.where(seen & (logits > 0), logits / penalty, torch.where(seen, logits * penalty, logits))
    logits[:, list(banned)] = float("-inf")
    kth = logits.topk(top_k, dim=-1).values[:, -1:]
    logits = logits.masked_fill(logits < kth, float("-inf"))
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    cum = sorted_logits.softmax(-1).cumsum(-1)
    drop = (cum - sorted_logits.softmax(-1)) > top_p
    return logits.masked_fill(drop.scatter(1, order, drop), float("-inf"))


@torch.no_grad()
def sample(model, ids, keep, steps, temperature=0.8, seed=0):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        logits = model(ids, keep)[:, -1] / temperature
        probs = filter_logits(logits, ids).softmax(-1)
        nxt = torch.multinomial(probs, 1, generator=gen)
        ids, keep = torch.cat([ids, nxt], 1), torch.cat([keep, torch.ones_like(nxt, dtype=torch.bool)], 1)
    return ids


if __name__ == "__main__":
    model = StoryLM().eval()
    prompts = [[5, 6, 7, 8], [9, 10]]
    ids = torch.tensor([[PAD] * (4 - len(p)) + p for p in prompts])
    keep = ids != PAD
    print("float32:", sample(model, ids, keep, 6)[:, 4:].tolist())
    served = copy.deepcopy(model).half()
    try:
        print("float16:", sample(served, ids, keep, 6)[:, 4:].tolist())
    except RuntimeError as err:
        print("float16 serving failed:", err)
