"""Knitting chart row generator (Colab notebook export).

A character-level GPT trained on written knitting patterns ("k2 p2 yo k2tog ...") that
continues a pattern row by row for a designer's swatch. Sampling reuses each layer's
keys and values between steps.

Source: conventions.md section 1 (SDPA is_causal row), section 2.7, section 5 item 8; pytorch/pytorch PR #111007
"""

# %%
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

random.seed(4)
torch.manual_seed(4)

STITCHES = ["k1", "k2", "p1", "p2", "yo", "k2tog", "ssk", "sl1"]


def make_pattern():
    repeat = " ".join(random.choices(STITCHES, k=random.randint(2, 4)))
    rows = [f"row {r}: " + " ".join([repeat] * 2) + ";" for r in range(1, 4)]
    return "\n".join(rows) + "\n"


text = "".join(make_pattern() for _ in range(300))
chars = sorted(set(text))
stoi = {c: i for i, c in enumerate(chars)}
data = torch.tensor([stoi[c] for c in text])
block_size = 64

# %%
class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head = n_head

    def forward(self, x, layer_past=None):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (z.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for z in (q, k, v))
        if layer_past is not None:
            past_k, past_v = layer_past
            k = torch.cat([past_k, k], dim=2)
            v = torch.cat([past_v, v], dim=2)
        present = (k, v)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # expect: MC510 cache
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y), present


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.ln2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x, layer_past=None):
        a, present = self.attn(self.ln1(x), layer_past)
        x = x + a
        return x + self.mlp(self.ln2(x)), present


class KnitGPT(nn.Module):
    def __init__(self, vocab_size, n_embd=64, n_head=4, n_layer=2):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, n_embd)
        self.pos = nn.Embedding(block_size * 2, n_embd)
        self.blocks = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab_size)

    def forward(self, idx, past=None, start=0):
        x = self.tok(idx) + self.pos(torch.arange(start, start + idx.size(1)))
        presents = []
        for i, block in enumerate(self.blocks):
            x, p = block(x, None if past is None else past[i])
            presents.append(p)
        return self.head(self.ln_f(x)), presents


model = KnitGPT(len(chars))
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)

# %%
for step in range(150):
    ix = torch.randint(len(data) - block_size - 1, (32,))
    xb = torch.stack([data[i:i + block_size] for i in ix])
    yb = torch.stack([data[i + 1:i + block_size + 1] for i in ix])
    logits, _ = model(xb)
    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), yb.view(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
print("loss", loss.item())

# %%
@torch.no_grad()
def continue_pattern(prompt, n_new=40):
    idx = torch.tensor([[stoi[c] for c in prompt]])
    logits, past = model(idx)
    out = list(prompt)
    for _ in range(n_new):
        nxt = logits[0, -1].argmax().view(1, 1)
        out.append(chars[nxt.item()])
        logits, past = model(nxt, past, start=len(out) - 1)
    return "".join(out)


print(continue_pattern("row 1: k2 p2 k2 p2;\nrow 2: "))
