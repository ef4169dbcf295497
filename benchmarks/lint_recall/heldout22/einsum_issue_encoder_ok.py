"""Einsum attention in the x-transformers style, fed a tokenizer-style batch.

Code from an issue thread ("what does True mean in `mask`?"): lucidrains-style `Attention`
with einsum similarity and `max_neg_value`, wrapped in an encoder that takes the
`input_ids` / `attention_mask` dict a Hugging Face tokenizer returns (1 = real token).
`toy_tokenize` stands in for the tokenizer so the script runs offline.

Source: lucidrains/x-transformers#240 and #172, seed self_attention_mask_guide.txt Q1, conventions.md §1 cheat-sheet
"""
import torch
import torch.nn as nn


def max_neg_value(t):
    return -torch.finfo(t.dtype).max


def toy_tokenize(texts, vocab, pad_id=0):
    rows = [[vocab.setdefault(w, len(vocab) + 1) for w in t.split()] for t in texts]
    n = max(map(len, rows))
    input_ids = torch.tensor([r + [pad_id] * (n - len(r)) for r in rows])
    attention_mask = torch.tensor([[1] * len(r) + [0] * (n - len(r)) for r in rows])
    return {"input_ids": input_ids, "attention_mask": attention_mask}


class Attention(nn.Module):
    def __init__(self, dim, heads=4, dim_head=8):
        super().__init__()
        self.heads, self.scale = heads, dim_head ** -0.5
        self.to_qkv = nn.Linear(dim, 3 * heads * dim_head, bias=False)
        self.to_out = nn.Linear(heads * dim_head, dim)

    def forward(self, x, attention_mask=None):
        b, n, _ = x.shape
        q, k, v = (t.reshape(b, n, self.heads, -1).transpose(1, 2) for t in self.to_qkv(x).chunk(3, dim=-1))
        sim = torch.einsum("b h i d, b h j d -> b h i j", q, k) * self.scale
        if attention_mask is not None:
            mask = attention_mask[:, None, None, :].bool()
            sim = sim.masked_fill(~mask, max_neg_value(sim))
        attn = sim.softmax(dim=-1)
        out = torch.einsum("b h i j, b h j d -> b h i d", attn, v)
        return self.to_out(out.transpose(1, 2).reshape(b, n, -1))


class Encoder(nn.Module):
    def __init__(self, vocab_size=100, dim=32, depth=2):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, dim)
        self.layers = nn.ModuleList(Attention(dim) for _ in range(depth))
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(depth))

    def forward(self, input_ids, attention_mask=None):
        x = self.emb(input_ids)
        for attn, norm in zip(self.layers, self.norms):
            x = x + attn(norm(x), attention_mask=attention_mask)
        return x


if __name__ == "__main__":
    torch.manual_seed(0)
    vocab = {}
    batch = toy_tokenize(["the cat sat on the mat", "a dog barked"], vocab)
    alone = toy_tokenize(["a dog barked"], vocab)
    model = Encoder().eval()
    with torch.no_grad():
        out = model(**batch)
        ref = model(**alone)
    print("attention_mask:", batch["attention_mask"].tolist())
    print("'a dog barked' batched vs alone:", (out[1, :3] - ref[0]).abs().max().item())
