"""Sliding-window decoder (Mistral-style rolling buffer): the prompt is prefilled with a banded
causal bias built once in __init__, then tokens are decoded one at a time against a cache of
`window` slots written round-robin, with not-yet-filled slots zeroed after the softmax.

Source: seed self_attention_mask_guide.txt §3 (常见误区) and §6 (局部窗口attention), conventions.md §1 (direction cheat-sheet)
"""
import torch
import torch.nn as nn

torch.manual_seed(0)
VOCAB, DIM, HEADS, WINDOW, MAX_LEN = 40, 32, 4, 4, 64


class SlidingWindowLM(nn.Module):
    def __init__(self, window=WINDOW):
        super().__init__()
        self.window = window
        self.emb = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Embedding(MAX_LEN, DIM)
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.o = nn.Linear(DIM, DIM)
        self.head = nn.Linear(DIM, VOCAB)
        i = torch.arange(MAX_LEN)
        dist = i[:, None] - i[None, :]
        self.band = torch.zeros(MAX_LEN, MAX_LEN).masked_fill((dist < 0) | (dist >= window), float("-inf"))

    def heads(self, ids, start):
        b, t = ids.shape
        x = self.emb(ids) + self.pos(torch.arange(start, start + t))
        q, k, v = self.qkv(x).view(b, t, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)
        return x, q, k, v

    def prefill(self, ids):
        b, t = ids.shape
        x, q, k, v = self.heads(ids, 0)
        scores = q @ k.transpose(-1, -2) / (DIM // HEADS) ** 0.5
        probs = (scores * self.band[:t, :t]).softmax(-1)  # expect: MC523 slidingwindow
        h = x + self.o((probs @ v).transpose(1, 2).reshape(b, t, DIM))
        cache = {"k": torch.zeros(b, HEADS, self.window, DIM // HEADS), "v": torch.zeros(b, HEADS, self.window, DIM // HEADS)}
        for pos in range(max(0, t - self.window), t):
            cache["k"][:, :, pos % self.window] = k[:, :, pos]
            cache["v"][:, :, pos % self.window] = v[:, :, pos]
        cache["filled"] = torch.zeros(self.window).index_fill(0, torch.arange(min(t, self.window)), 1.0)
        return self.head(h), cache

    def decode_step(self, token, pos, cache):
        x, q, k, v = self.heads(token, pos)
        slot = pos % self.window
        cache["k"][:, :, slot], cache["v"][:, :, slot] = k[:, :, 0], v[:, :, 0]
        cache["filled"][slot] = 1.0
        scores = q @ cache["k"].transpose(-1, -2) / (DIM // HEADS) ** 0.5
        weights = scores.softmax(-1) * cache["filled"]
        weights = weights / weights.sum(-1, keepdim=True)
        h = x + self.o((weights @ cache["v"]).transpose(1, 2).reshape(token.shape[0], 1, DIM))
        return self.head(h)


@torch.no_grad()
def generate(model, prompt, steps):
    logits, cache = model.prefill(prompt)
    out = prompt
    for _ in range(steps):
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        logits = model.decode_step(nxt, out.shape[1], cache)
        out = torch.cat([out, nxt], 1)
    return out, logits


if __name__ == "__main__":
    model = SlidingWindowLM().eval()
    prompt = torch.randint(3, VOCAB, (2, 6))
    out, last = generate(model, prompt, 5)
    print("generated:", out[:, 6:].tolist())
    with torch.no_grad():
        full, _ = model.prefill(out)
        short = torch.randint(3, VOCAB, (2, 2))
        short_out, _ = model.prefill(short)
    print(f"cached last step vs full prefill, max difference: {(last[:, -1] - full[:, -1]).abs().max().item():.3g}")
    print("prefill logits finite:", bool(torch.isfinite(full).all()), bool(torch.isfinite(short_out).all()))
