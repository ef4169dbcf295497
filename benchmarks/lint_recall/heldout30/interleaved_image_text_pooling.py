"""Interleaved image-text embedder for retrieval (a VLM2Vec / E5-V style encoder).

A document is a list of text spans and images; the processor flattens it into one token
sequence in which each image becomes a run of patch tokens. Text is read causally, the patches
of one image see each other bidirectionally, and the whole sequence is pooled into a single
embedding by attention pooling with a learned query. The processor output looks like a
tokenizer's: int64 `input_ids` and `attention_mask`, plus `image_ids` (0 for text, k for the
k-th image) and the patch features.

Source: rasbt/LLMs-from-scratch#1061; conventions.md §1, §4.1 and §5 item 1
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

PAD, IMG = 0, 1


def process(documents, patch_dim=8):
    rows = []
    for doc in documents:
        ids, img, feats, k = [], [], [], 0
        for kind, content in doc:
            if kind == "text":
                ids += content
                img += [0] * len(content)
                feats += [torch.zeros(patch_dim)] * len(content)
            else:
                k += 1
                ids += [IMG] * content.shape[0]
                img += [k] * content.shape[0]
                feats += list(content)
        rows.append((ids, img, feats))
    t = max(len(r[0]) for r in rows)
    fill = lambda xs, v: xs + [v] * (t - len(xs))
    return {"input_ids": torch.tensor([fill(r[0], PAD) for r in rows]),
            "attention_mask": torch.tensor([fill([1] * len(r[0]), 0) for r in rows], dtype=torch.long),
            "image_ids": torch.tensor([fill(r[1], 0) for r in rows]),
            "patches": torch.stack([torch.stack(fill(r[2], torch.zeros(patch_dim))) for r in rows])}


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.o = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x, allowed):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed[:, None])
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class InterleavedEmbedder(nn.Module):
    def __init__(self, vocab=64, dim=32, heads=4, depth=2, patch_dim=8, out_dim=16):
        super().__init__()
        self.heads = heads
        self.tok, self.patch = nn.Embedding(vocab, dim), nn.Linear(patch_dim, dim)
        self.pos = nn.Embedding(64, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.pool_query = nn.Parameter(torch.randn(1, heads, 1, dim // heads))
        self.pool_kv = nn.Linear(dim, 2 * dim)
        self.proj = nn.Linear(dim, out_dim)

    def forward(self, input_ids, attention_mask, image_ids, patches):
        b, t = input_ids.shape
        pad = attention_mask == 0
        is_image = image_ids > 0
        h = torch.where(is_image[..., None], self.patch(patches), self.tok(input_ids))
        h = h + self.pos(torch.arange(t))
        pos = torch.arange(t)
        causal = pos[None, :, None] >= pos[None, None, :]
        same_image = (image_ids[:, :, None] == image_ids[:, None, :]) & is_image[:, :, None]
        allowed = (causal | same_image) & ~pad[:, None, :]
        for blk in self.blocks:
            h = blk(h, allowed)
        k, v = self.pool_kv(h).view(b, t, 2, self.heads, -1).permute(2, 0, 3, 1, 4)
        query = self.pool_query.expand(b, -1, -1, -1)
        pooled = F.scaled_dot_product_attention(query, k, v, attn_mask=pad[:, None, None, :])  # expect: MC511 pooler
        return F.normalize(self.proj(pooled.reshape(b, -1)), dim=-1)


if __name__ == "__main__":
    torch.manual_seed(0)
    docs = [[("text", [5, 6, 7]), ("image", torch.randn(4, 8)), ("text", [8, 9])],
            [("image", torch.randn(3, 8)), ("text", [10, 11])],
            [("text", [12, 13, 14, 15]), ("image", torch.randn(2, 8)), ("text", [16]), ("image", torch.randn(2, 8))]]
    model = InterleavedEmbedder().eval()
    with torch.no_grad():
        batched = model(**process(docs))
        alone = torch.cat([model(**process([d])) for d in docs])
    print("cosine similarity", (batched @ batched.T).round(decimals=3).tolist())
    print("batched vs alone", (batched - alone).abs().max().item())
