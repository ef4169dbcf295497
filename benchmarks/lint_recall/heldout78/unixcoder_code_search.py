"""UniXcoder-style code search fine-tuning (CoSQA / AdvTest layout).

One transformer serves several modes chosen by a prefix token, as in UniXcoder: queries
and functions are embedded in ``<encoder-only>`` mode (bidirectional attention, mean
pooling over real tokens, L2-normalised), and an auxiliary unidirectional LM loss on the
functions uses ``<decoder-only>`` mode with the lower-triangular ``bias`` buffer. The
search loss is the in-batch contrastive loss on cosine similarities scaled by 20.

Source: conventions.md §1 (direction cheat-sheet; MHA and SDPA rows), §5 item 1;
rasbt/LLMs-from-scratch#1061 (conventions.md §3 item 14)
"""
import re

import torch
import torch.nn as nn
import torch.nn.functional as F

MODES = ["<encoder-only>", "<decoder-only>", "<encoder-decoder>"]
PAD, CLS, SEP = 0, 1, 2


class UniXcoderTokenizer:
    def __init__(self, vocab_size=500):
        self.vocab_size = vocab_size
        self.mode_ids = {m: 3 + i for i, m in enumerate(MODES)}

    def token_id(self, piece):
        return 6 + sum(ord(c) * 31 ** i for i, c in enumerate(piece)) % (self.vocab_size - 6)

    def __call__(self, texts, mode="<encoder-only>", max_length=40, padding=True, return_tensors="pt"):
        rows = []
        for text in texts:
            pieces = re.findall(r"[A-Za-z]+|\d+|[^\sA-Za-z\d]", text)[:max_length - 4]
            rows.append([CLS, self.mode_ids[mode], SEP] + [self.token_id(p) for p in pieces] + [SEP])
        width = max(map(len, rows)) if padding else None
        input_ids = torch.tensor([r + [PAD] * (width - len(r)) for r in rows])
        return {"input_ids": input_ids, "attention_mask": (input_ids != PAD).long()}


class Layer(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))

    def forward(self, x, attn_mask):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        x = self.ln1(x + self.proj(ctx.transpose(1, 2).reshape(b, n, d)))
        return self.ln2(x + self.mlp(x))


class UniXcoder(nn.Module):
    def __init__(self, vocab_size=500, hidden=64, heads=4, layers=2, max_positions=64):
        super().__init__()
        self.embeddings = nn.Embedding(vocab_size, hidden, padding_idx=PAD)
        self.position_embeddings = nn.Embedding(max_positions, hidden)
        self.layers = nn.ModuleList(Layer(hidden, heads) for _ in range(layers))
        self.register_buffer("bias", torch.tril(torch.ones(max_positions, max_positions, dtype=torch.bool))[None, None])
        self.lm_head = nn.Linear(hidden, vocab_size, bias=False)
        self.lm_head.weight = self.embeddings.weight

    def forward(self, input_ids, attention_mask, mode="<encoder-only>"):
        n = input_ids.size(1)
        padding = attention_mask.eq(0)
        if mode == "<decoder-only>":
            attn_mask = self.bias[:, :, :n, :n] & ~padding[:, None, None, :]
        else:
            attn_mask = padding[:, None, None, :]  # expect: MC511 direction
        x = self.embeddings(input_ids) + self.position_embeddings(torch.arange(n, device=input_ids.device))
        for layer in self.layers:
            x = layer(x, attn_mask)
        return x, padding

    def embed(self, input_ids, attention_mask):
        token_embeddings, padding = self(input_ids, attention_mask)
        token_embeddings = token_embeddings.masked_fill(padding[..., None], 0.0)
        sentence = token_embeddings.sum(1) / (~padding).sum(-1, keepdim=True)
        return F.normalize(sentence, p=2, dim=-1)

    def ulm_loss(self, input_ids, attention_mask):
        hidden, _ = self(input_ids, attention_mask, mode="<decoder-only>")
        logits = self.lm_head(hidden[:, :-1])
        labels = input_ids[:, 1:].masked_fill(attention_mask[:, 1:] == 0, -100)
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)


def search_loss(model, queries, codes):
    q = model.embed(**queries)
    c = model.embed(**codes)
    scores = q @ c.t() * 20
    return F.cross_entropy(scores, torch.arange(scores.size(0)))


COSQA = [
    ("python reverse a list", "def rev(xs):\n    return xs[::-1]"),
    ("check if a string is a palindrome", "def is_pal(s):\n    return s == s[::-1]"),
    ("read lines of a file into a list", "def read_lines(path):\n    with open(path) as f:\n        return f.read().splitlines()"),
    ("sum of squares of numbers", "def sum_sq(nums):\n    return sum(n * n for n in nums)"),
]


if __name__ == "__main__":
    torch.manual_seed(0)
    tokenizer = UniXcoderTokenizer()
    model = UniXcoder()
    queries = tokenizer([q for q, _ in COSQA])
    codes = tokenizer([c for _, c in COSQA])
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4)
    for step in range(4):
        loss = search_loss(model, queries, codes) + 0.1 * model.ulm_loss(**tokenizer([c for _, c in COSQA], mode="<decoder-only>"))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        q = model.embed(**tokenizer(["reverse list"]))
        ranking = (q @ model.embed(**codes).t()).argsort(descending=True)
    print("ranking", ranking.tolist())
