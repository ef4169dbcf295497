"""Decoder-only LM with a dynamic KV cache class (`update` appends a layer's keys and values and
returns the whole history) and a greedy `generate()` method on the module.

Source: pytorch/pytorch PR #111007, conventions.md §1 (SDPA is_causal row), §2.7 and §5 item 8
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
VOCAB, DIM, HEADS, LAYERS = 40, 32, 4, 2


class DynamicCache:
    def __init__(self, num_layers):
        self.keys = [None] * num_layers
        self.values = [None] * num_layers

    def update(self, layer_idx, k, v):
        if self.keys[layer_idx] is not None:
            k = torch.cat([self.keys[layer_idx], k], dim=2)
            v = torch.cat([self.values[layer_idx], v], dim=2)
        self.keys[layer_idx], self.values[layer_idx] = k, v
        return k, v

    def seq_len(self):
        return 0 if self.keys[0] is None else self.keys[0].shape[2]


class SelfAttention(nn.Module):
    def __init__(self, layer_idx):
        super().__init__()
        self.layer_idx = layer_idx
        self.qkv = nn.Linear(DIM, 3 * DIM, bias=False)
        self.proj = nn.Linear(DIM, DIM, bias=False)

    def forward(self, x, cache=None):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)
        if cache is not None:
            k, v = cache.update(self.layer_idx, k, v)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # expect: MC510 cacheclass
        return self.proj(out.transpose(1, 2).reshape(b, t, DIM))


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Embedding(128, DIM)
        self.attn = nn.ModuleList(SelfAttention(i) for i in range(LAYERS))
        self.mlp = nn.ModuleList(nn.Sequential(nn.Linear(DIM, 64), nn.GELU(), nn.Linear(64, DIM)) for _ in range(LAYERS))
        self.norm = nn.LayerNorm(DIM)
        self.lm_head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, input_ids, cache=None):
        start = 0 if cache is None else cache.seq_len()
        pos = torch.arange(start, start + input_ids.shape[1])
        x = self.tok(input_ids) + self.pos(pos)
        for attn, mlp in zip(self.attn, self.mlp):
            x = x + attn(x, cache)
            x = x + mlp(x)
        return self.lm_head(self.norm(x))

    @torch.no_grad()
    def generate(self, input_ids, max_new_tokens, use_cache=True):
        cache = DynamicCache(LAYERS) if use_cache else None
        out, step_ids = input_ids, input_ids
        for _ in range(max_new_tokens):
            logits = self(step_ids if use_cache else out, cache)
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            out = torch.cat([out, nxt], dim=1)
            step_ids = nxt
        return out


if __name__ == "__main__":
    model = TinyLM().eval()
    prompt = torch.randint(5, VOCAB, (2, 7))
    cached = model.generate(prompt, 8)
    uncached = model.generate(prompt, 8, use_cache=False)
    print("cached:  ", cached[:, 7:].tolist())
    print("uncached:", uncached[:, 7:].tolist())
    with torch.no_grad():
        full = model(cached[:, :-1])
        cache = DynamicCache(LAYERS)
        steps = [model(cached[:, :7], cache)[:, -1]]
        for i in range(7, cached.shape[1] - 1):
            steps.append(model(cached[:, i:i + 1], cache)[:, -1])
        diff = (torch.stack(steps, 1) - full[:, 6:]).abs().max().item()
    print(f"incremental vs full forward, max logit difference: {diff:.3g}")
