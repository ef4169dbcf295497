"""Issue repro: "RuntimeError: value cannot be converted to type at::Half without overflow" after model.to(torch.float16).

The reporter's text classifier, reduced: an encoder with hand-written eager attention (the
"Annotated Transformer" style `attention(query, key, value, mask)` function), a batch given as a
tokenizer-like dict of `torch.tensor([[...]])` literals, a float32 run that works, and the same
model after `model.to(torch.float16)` with `.half()` inputs, which is what they deploy.

Source: NVIDIA/apex#1052 (`-1e+09` cannot be converted to Half), NVIDIA/apex#1105 (-1e10),
facebookresearch/fairseq#3575 (-1e8), conventions.md §2.3 (fp16 `masked_fill(mask, -1e9)` raises)
and §3 item 18.
"""
import math

import torch
from torch import nn

torch.manual_seed(0)


def attention(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)  # expect: MC501 fp16
    p_attn = scores.softmax(dim=-1)
    return torch.matmul(p_attn, value)


class EncoderLayer(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.qkv = nn.Linear(d, 3 * d)
        self.o = nn.Linear(d, d)
        self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d))
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)

    def forward(self, x, mask):
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, self.h, d // self.h).unbind(2)
        x2 = attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), mask)
        x = x + self.o(x2.transpose(1, 2).reshape(b, t, d))
        return x + self.ff(self.n2(x))


class Classifier(nn.Module):
    def __init__(self, vocab=100, d=32, h=4, n=2, classes=3):
        super().__init__()
        self.emb = nn.Embedding(vocab, d, padding_idx=0)
        self.layers = nn.ModuleList(EncoderLayer(d, h) for _ in range(n))
        self.cls = nn.Linear(d, classes)

    def forward(self, input_ids, attention_mask):
        x = self.emb(input_ids)
        mask = attention_mask[:, None, None, :]
        for layer in self.layers:
            x = layer(x, mask)
        return self.cls(x[:, 0])


enc = {
    "input_ids": torch.tensor([[2, 45, 17, 88, 3], [2, 9, 3, 0, 0], [2, 61, 70, 3, 0]]),
    "attention_mask": torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0]]),
}
model = Classifier().eval()
with torch.no_grad():
    tmp = model(**enc)
print("float32 logits:", tmp.shape)

model.to(torch.float16)
with torch.no_grad():
    out = model(enc["input_ids"], enc["attention_mask"].half())
print("float16 vs float32:", (out.float() - tmp).abs().max().item())
