#!/usr/bin/env python
# coding: utf-8
"""Exported from `attention_padding.ipynb` (File > Download as > Python).

A notebook that walks through scaled dot-product attention on a padded batch: build the
batch, write the attention by hand, look at the weights, then train a tiny bag-of-attention
classifier on it.

Source: seed masked_fill_inplace.txt (section 非原地操作)
"""

# # Attention over a padded batch

# In[1]:


import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


# In[2]:


PAD = 0
sentences = [[4, 9, 2, 7], [5, 3], [8, 6, 1]]
max_len = max(len(s) for s in sentences)
ids = torch.tensor([s + [PAD] * (max_len - len(s)) for s in sentences])
pad_mask = ids == PAD  # True where padded
labels = torch.tensor([1, 0, 1])
ids, pad_mask


# In[3]:


def attention(q, k, v, pad_mask):
    scores = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5
    scores.masked_fill(pad_mask[:, None, :], float("-inf"))  # expect: MC525 notebook
    weights = F.softmax(scores, dim=-1)
    return weights @ v, weights


# In[4]:


emb = nn.Embedding(10, 16, padding_idx=PAD)
x = emb(ids)
out, weights = attention(x, x, x, pad_mask)
print(weights[1].detach())
print("weight on padding:", weights.masked_select(pad_mask[:, None, :].expand_as(weights)).sum().item())


# In[5]:


class AttnClassifier(nn.Module):
    def __init__(self, vocab=10, dim=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim, padding_idx=PAD)
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.out = nn.Linear(dim, 2)

    def forward(self, ids, pad_mask):
        h = self.emb(ids)
        ctx, _ = attention(self.q(h), self.k(h), self.v(h), pad_mask)
        ctx = ctx.masked_fill(pad_mask[..., None], 0.0).sum(1) / (~pad_mask).sum(1, keepdim=True)
        return self.out(ctx)


# In[6]:


model = AttnClassifier()
opt = torch.optim.SGD(model.parameters(), lr=0.5)
for epoch in range(20):
    loss = F.cross_entropy(model(ids, pad_mask), labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"epoch {epoch} loss {loss.item():.4f}")
