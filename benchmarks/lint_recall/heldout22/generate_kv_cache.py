"""Greedy generation with a KV cache for a tiny GPT, prefill once then one token per step.

`forward(ids, past)` returns the logits and the new per-layer (k, v) cache; `generate` feeds
the prompt once and then only the newest token. `generate_no_cache` re-runs the whole
sequence every step and is kept as the reference.

Source: conventions.md §1 (SDPA is_causal row), §2.7 and §5 item 8, pytorch/pytorch PR #111007
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class CachedAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, past=None):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # expect: MC510 generate
        return self.proj(y.transpose(1, 2).reshape(b, t, d)), (k, v)


class TinyGPT(nn.Module):
    def __init__(self, vocab=40, dim=32, heads=4, layers=2, max_len=64):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_len, dim)
        self.attn = nn.ModuleList(CachedAttention(dim, heads) for _ in range(layers))
        self.mlp = nn.ModuleList(nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim), nn.GELU()) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids, past=None):
        start = 0 if past is None else past[0][0].size(2)
        x = self.tok(ids) + self.pos(torch.arange(start, start + ids.size(1), device=ids.device))
        new_past = []
        for i, (attn, mlp) in enumerate(zip(self.attn, self.mlp)):
            h, kv = attn(self.norm(x), None if past is None else past[i])
            x = x + h
            x = x + mlp(x)
            new_past.append(kv)
        return self.head(self.norm(x)), new_past


@torch.no_grad()
def generate(model, prompt, max_new_tokens=8):
    logits, past = model(prompt)
    out = prompt
    for _ in range(max_new_tokens):
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        out = torch.cat([out, nxt], dim=1)
        logits, past = model(nxt, past)
    return out


@torch.no_grad()
def generate_no_cache(model, prompt, max_new_tokens=8):
    out = prompt
    for _ in range(max_new_tokens):
        logits, _ = model(out)
        out = torch.cat([out, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return out


if __name__ == "__main__":
    torch.manual_seed(0)
    model = TinyGPT().eval()
    prompt = torch.tensor([[3, 17, 5, 22, 9]])
    cached, reference = generate(model, prompt), generate_no_cache(model, prompt)
    print("cached   :", cached.tolist())
    print("no cache :", reference.tolist())
    print("same:", torch.equal(cached, reference))
