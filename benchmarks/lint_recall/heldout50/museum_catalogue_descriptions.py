"""Drafting object descriptions for a museum collections database (Jupyter export).

The registrar's notebook: each catalogue record's structured fields (object type, material,
period, gallery) are written as a prompt, and a small decoder drafts the public label text.
Records are batched with right padding, so attention gets the padding keep-mask.

Source: conventions.md section 1 (SDPA is_causal row), section 2.7 and section 5 item 8; pytorch/pytorch PR #111007
"""

# %%
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

random.seed(2)
torch.manual_seed(2)

OBJECTS = ["vase", "brooch", "helmet", "bowl", "coin", "figurine"]
MATERIALS = ["bronze", "silver", "terracotta", "glass", "ivory"]
PERIODS = ["roman", "viking", "medieval", "hellenistic"]
WORDS = ["a", "an", "object", "made", "of", "from", "the", "period", "<bos>", "<eos>", "<sep>"]
itos = ["<pad>"] + sorted(set(OBJECTS + MATERIALS + PERIODS + WORDS))
stoi = {w: i for i, w in enumerate(itos)}


def record_to_text():
    obj, mat, per = random.choice(OBJECTS), random.choice(MATERIALS), random.choice(PERIODS)
    prompt = ["<bos>", obj, mat, per, "<sep>"]
    label = ["a", per, obj, "made", "of", mat, "<eos>"][: random.randint(4, 7)]
    return [stoi[w] for w in prompt + label]


records = [record_to_text() for _ in range(600)]

# %%
CONFIG = dict(d_model=64, n_head=4, n_layer=2, dropout=0.1, block_size=16)


class SelfAttention(nn.Module):
    def __init__(self, d_model, n_head, dropout):
        super().__init__()
        self.c_attn = nn.Linear(d_model, 3 * d_model)
        self.c_proj = nn.Linear(d_model, d_model)
        self.n_head = n_head
        self.dropout = dropout

    def forward(self, x, keep):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :], dropout_p=self.dropout if self.training else 0.0, is_causal=True)  # expect: MC506 method
        return self.c_proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self, d_model, n_head, dropout):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = SelfAttention(d_model, n_head, dropout)
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x, keep):
        x = x + self.attn(self.ln_1(x), keep)
        return x + self.mlp(self.ln_2(x))


class LabelWriter(nn.Module):
    def __init__(self, vocab_size, d_model, n_head, n_layer, dropout, block_size):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, d_model)
        self.wpe = nn.Embedding(block_size, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_head, dropout) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, idx, keep):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1)))
        for block in self.blocks:
            x = block(x, keep)
        return self.lm_head(self.ln_f(x))


def pad_batch(seqs):
    longest = max(map(len, seqs))
    idx = torch.tensor([s + [0] * (longest - len(s)) for s in seqs])
    return idx, idx != 0


# %%
model = LabelWriter(len(itos), **CONFIG)
optim = torch.optim.AdamW(model.parameters(), lr=3e-3)
model.train()
for step in range(60):
    idx, keep = pad_batch(random.sample(records, 32))
    logits = model(idx[:, :-1], keep[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), idx[:, 1:].reshape(-1), ignore_index=0)
    optim.zero_grad()
    loss.backward()
    optim.step()
    if step % 20 == 0:
        print(step, loss.item())

# %%
model.eval()
prompt = [stoi[w] for w in ["<bos>", "helmet", "bronze", "viking", "<sep>"]]
with torch.no_grad():
    for _ in range(7):
        idx = torch.tensor([prompt])
        nxt = model(idx, idx != 0)[0, -1].argmax().item()
        prompt.append(nxt)
print(" ".join(itos[i] for i in prompt))
