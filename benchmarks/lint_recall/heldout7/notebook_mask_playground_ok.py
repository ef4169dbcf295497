# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     name: python3
# ---
"""Held-out 7 (correct twin): a course notebook (jupytext percent format) that walks through the seed guide's
mask recipes cell by cell.

Source: the seed guide (/work/shared/seeds: its `create_block_mask`, `generate_causal_mask` and
its MultiheadAttention examples) and the seed `masked_fill_` article (its gradient warning and its
`MyModel` whose forward fills `self.mask` in place and returns `x * self.mask`). The recipes are
re-spelled as a student would: an out-of-place `masked_fill` after the zero fill, `-torch.inf`
times a 0/1 triangle, keyword `masked_fill_` on a leaf, `get_buffer(...)` and `.mul(...)`.
Surroundings: notebook cells, module-level code, lambdas, a small nn.Module.
"""

# %% [markdown]
# ## 1. Block-sparse masks

# %%
import torch
import torch.nn as nn
import matplotlib.pyplot as plt

sz, block = 12, 4
m = torch.full((sz, sz), float("-inf"))
for i in range(0, sz, block):
    m[i:i + block, i:i + block] = 0.0
plt.imshow(m.isfinite().float()); plt.title("block mask")

# %% [markdown]
# ## 2. Causal masks, three ways

# %%
causal = lambda n: torch.triu(torch.full((n, n), -torch.inf), diagonal=1)
mha = nn.MultiheadAttention(16, 4)
q = k = v = torch.randn(5, 2, 16)
out, w = mha(q, k, v, attn_mask=causal(5))
print(w[0])

# %% [markdown]
# ## 3. In-place fills and autograd

# %%
logits = torch.randn(2, 5, requires_grad=True)
pad = torch.tensor([[False, False, False, True, True], [False] * 5])
probs = logits.masked_fill(mask=pad, value=float("-inf")).softmax(-1)

# %% [markdown]
# ## 4. A mask kept in a buffer

# %%
class Gate(nn.Module):
    def __init__(self, n: int = 3):
        super().__init__()
        self.register_buffer("w", torch.triu(torch.full((n, n), float("-inf")), 1))

    def forward(self, x):
        return x.add(self.get_buffer("w"))


g = Gate()
print(g(torch.randn(3, 3)))
