"""Stack Overflow question: "Sentence embeddings change when I batch sentences (scaled_dot_product_attention)".

The asker's script: a whitespace "tokenizer" that returns a dict like a Hugging Face tokenizer
(`input_ids`, `attention_mask` with 1 = real token, right padding), one self-attention layer on
`fn.scaled_dot_product_attention` (torch.nn.functional imported as `fn`) reached through a lambda,
heads split with view/transpose, mean pooling over real tokens, and the comparison that made them
ask: each sentence embedded alone and in a batch of four. The batch happens to be padded to four
tokens, as many as there are sentences.

Source: conventions.md §2.6 and §5 item 6 (an (N, S) padding mask given to SDPA as attn_mask
broadcasts as (1, 1, L, S): query i of every sequence uses sequence i's padding, silently when
N == L), lucidrains/x-transformers#172 (which axes a padding mask must have).
"""
import torch
import torch.nn.functional as fn
from torch import nn

torch.manual_seed(0)

D, H = 16, 2
vocab = {"<pad>": 0}


def tokenize(texts):
    rows = [[vocab.setdefault(w, len(vocab)) for w in t.lower().split()] for t in texts]
    n = max(len(r) for r in rows)
    return {
        "input_ids": torch.tensor([r + [0] * (n - len(r)) for r in rows]),
        "attention_mask": torch.tensor([[1] * len(r) + [0] * (n - len(r)) for r in rows]),
    }


emb = nn.Embedding(64, D)
qkv = nn.Linear(D, 3 * D)
out_proj = nn.Linear(D, D)
attend = lambda q, k, v, m: fn.scaled_dot_product_attention(q, k, v, attn_mask=m)  # noqa: E731


def embed(texts):
    enc = tokenize(texts)
    m = enc["attention_mask"].bool()
    x = emb(enc["input_ids"])
    b, t, _ = x.shape
    q, k, v = qkv(x).chunk(3, dim=-1)
    q, k, v = (z.view(b, t, H, D // H).transpose(1, 2) for z in (q, k, v))
    y = attend(q, k, v, m[:, None, None, :])
    y = out_proj(y.transpose(1, 2).reshape(b, t, D))
    w = m[..., None].float()
    return (y * w).sum(1) / w.sum(1)


sentences = [
    "the cat sat down",
    "a dog",
    "birds fly south",
    "hello",
]
with torch.no_grad():
    batched = embed(sentences)
    alone = torch.cat([embed([s]) for s in sentences])
for s, d in zip(sentences, (batched - alone).abs().amax(-1)):
    print(f"{s!r:20} batched vs alone: {d.item():.2e}")
