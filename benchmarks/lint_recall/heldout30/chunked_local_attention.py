"""Llama-4-style interleaved attention: chunked local layers and global causal layers.

Local layers attend causally inside fixed chunks of `chunk_size` tokens (a token never sees the
previous chunk); every `global_every`-th layer attends causally over the whole sequence. The mask
builder returns a dict with one entry per layer kind; the local layers run an eager path that also
returns the attention probabilities, the global layers call SDPA. Batches are right-padded.

Source: seed self_attention_mask_guide.txt §3 and §6; conventions.md §1
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


def build_masks(attention_mask, chunk_size, dtype=torch.float32):
    b, t = attention_mask.shape
    pos = torch.arange(t)
    causal = pos[:, None] >= pos[None, :]
    same_chunk = (pos[:, None] // chunk_size) == (pos[None, :] // chunk_size)
    key_keep = attention_mask.bool()[:, None, None, :]
    local_keep = causal & same_chunk & key_keep
    chunk_bias = torch.zeros(b, 1, t, t, dtype=dtype).masked_fill(~local_keep, torch.finfo(dtype).min)
    return {"chunk_bias": chunk_bias, "global_keep": causal & key_keep,
            "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0)}


class InterleavedLayer(nn.Module):
    def __init__(self, dim, heads, is_global):
        super().__init__()
        self.heads, self.is_global = heads, is_global
        self.norm = nn.RMSNorm(dim)
        self.qkv, self.o = nn.Linear(dim, 3 * dim, bias=False), nn.Linear(dim, dim, bias=False)
        self.ffn = nn.Sequential(nn.RMSNorm(dim), nn.Linear(dim, 2 * dim), nn.SiLU(), nn.Linear(2 * dim, dim))

    def forward(self, x, masks):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        probs = None
        if self.is_global:
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=masks["global_keep"])
        else:
            scores = torch.matmul(q, k.transpose(2, 3)) / q.shape[-1] ** 0.5
            scores = scores * masks["chunk_bias"]  # expect: MC523 chunklocal
            probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
            a = torch.matmul(probs, v)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        return x + self.ffn(x), probs


class ChunkedLM(nn.Module):
    def __init__(self, vocab=40, dim=32, heads=4, n_layers=4, global_every=4, chunk_size=4):
        super().__init__()
        self.chunk_size = chunk_size
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(64, dim)
        self.layers = nn.ModuleList(
            InterleavedLayer(dim, heads, is_global=(i + 1) % global_every == 0) for i in range(n_layers))
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, input_ids, attention_mask, output_attentions=False):
        masks = build_masks(attention_mask, self.chunk_size)
        h = self.embed(input_ids) + self.pos(masks["position_ids"])
        all_probs = []
        for layer in self.layers:
            h, probs = layer(h, masks)
            if probs is not None:
                all_probs.append(probs)
        logits = self.head(h)
        return (logits, all_probs) if output_attentions else logits


if __name__ == "__main__":
    torch.manual_seed(0)
    seqs = [[3, 4, 5, 6, 7, 8, 9, 10, 11, 12], [13, 14, 15, 16, 17, 18]]
    t = max(map(len, seqs))
    input_ids = torch.tensor([s + [0] * (t - len(s)) for s in seqs])
    attention_mask = torch.tensor([[1] * len(s) + [0] * (t - len(s)) for s in seqs])
    model = ChunkedLM().eval()
    with torch.no_grad():
        logits, probs = model(input_ids, attention_mask, output_attentions=True)
    print("logits", tuple(logits.shape), "nan", torch.isnan(logits).any().item())
    print("local layers", len(probs), "weight on previous chunk",
          probs[0][0, :, 5, :4].sum(-1).max().item())
