"""Chunked prefill into a static KV cache: the prompt is fed `chunk` tokens at a time so peak
activation memory stays bounded; keys and values are written into preallocated cache tensors held
as attributes, and each chunk attends to the cache written so far plus itself.

Source: seed masked_fill_inplace.txt (区别, 作用), seed self_attention_mask_guide.txt §3
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
VOCAB, DIM, HEADS, MAX_BATCH, MAX_LEN = 50, 32, 4, 2, 48


class StaticCacheAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.o = nn.Linear(DIM, DIM)
        self.cache_k = torch.zeros(MAX_BATCH, HEADS, MAX_LEN, DIM // HEADS)
        self.cache_v = torch.zeros(MAX_BATCH, HEADS, MAX_LEN, DIM // HEADS)

    def forward(self, x, start, use_cache):
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)
        if not use_cache:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            self.cache_k[:b, :, start : start + n] = k
            self.cache_v[:b, :, start : start + n] = v
            keys, values = self.cache_k[:b, :, : start + n], self.cache_v[:b, :, : start + n]
            keep = torch.ones(n, start + n, dtype=torch.bool)
            keep = keep.tril(diagonal=start)
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=keep)
        return self.o(out.transpose(1, 2).reshape(b, n, DIM))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Embedding(MAX_LEN, DIM)
        self.layers = nn.ModuleList(StaticCacheAttention() for _ in range(2))
        self.ffn = nn.ModuleList(nn.Sequential(nn.Linear(DIM, 64), nn.SiLU(), nn.Linear(64, DIM)) for _ in range(2))
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, ids, start=0, use_cache=True):
        x = self.emb(ids) + self.pos(torch.arange(start, start + ids.shape[1]))
        for attn, ffn in zip(self.layers, self.ffn):
            x = x + attn(x, start, use_cache)
            x = x + ffn(x)
        return self.head(x)


@torch.no_grad()
def chunked_prefill(model, ids, chunk):
    outs = []
    for start in range(0, ids.shape[1], chunk):
        outs.append(model(ids[:, start : start + chunk], start))
    return torch.cat(outs, dim=1)


if __name__ == "__main__":
    model = Model().eval()
    prompt = torch.randint(0, VOCAB, (2, 13))
    with torch.no_grad():
        reference = model(prompt, use_cache=False)
    for chunk in (13, 5, 1):
        logits = chunked_prefill(model, prompt, chunk)
        print(f"chunk {chunk:2d}: max |chunked - full| = {(logits - reference).abs().max().item():.3g}")
    with torch.no_grad():
        changed = prompt.clone()
        changed[:, -1] = (changed[:, -1] + 1) % VOCAB
        moved = (chunked_prefill(model, changed, 5)[:, :-1] - chunked_prefill(model, prompt, 5)[:, :-1]).abs().max()
    print(f"earlier logits moved by changing the last prompt token: {moved.item():.3g}")
