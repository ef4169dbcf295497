"""Held-out 5 (seed): a Jupyter notebook exported as a script that walks through both seed articles.

Source: seed article on `.masked_fill_()` (http://www.malaoshi.top/show_1GW2dK2sR135.html): in-place fill
of attention scores with -1e9 and of `torch.tensor([1.0, 2.0], requires_grad=True)`; seed article
"解密PyTorch中的Self-Attention Mask机制": `nn.MultiheadAttention(embed_dim, num_heads)` with a
key_padding_mask (True = padding), `generate_causal_mask` and the "mask是加法而非乘法" mistake.
Surroundings: top-level notebook cells (`# %%`), a mask from a helper defined in an earlier cell, a
"fix" cell that inverts an integer mask.
"""

# %% [markdown]
# # Masks in practice
# Scores run in half precision on the GPU box, so we mirror that here.

# %%
import torch
import torch.nn as nn

attn_scores = torch.tensor([[1.0, 2.0, 3.0],
                            [4.0, 5.0, 6.0],
                            [7.0, 8.0, 9.0]]).to(torch.float16)
mask = torch.tensor([[False, True, True],
                     [False, False, True],
                     [False, False, False]])
attn_scores.masked_fill_(mask, -1e9)  # expect: MC501 top
print(attn_scores)

# %%
x = torch.tensor([1.0, 2.0], requires_grad=True)
x.masked_fill_(torch.tensor([False, True]), 0.0)  # expect: MC505 top

# %%
embed_dim, num_heads = 8, 2
multihead_attn = nn.MultiheadAttention(embed_dim, num_heads)
query = key = value = torch.randn(5, 2, embed_dim)
attention_mask = torch.tensor([[1, 1, 1, 0, 0],
                               [1, 1, 1, 1, 1]])  # what the tokenizer returned
output, weights = multihead_attn(query, key, value, key_padding_mask=attention_mask)  # expect: MC502 top

# %%
# "fix": invert the padding mask
output, weights = multihead_attn(query, key, value, key_padding_mask=~attention_mask)  # expect: MC518 top


# %%
def generate_causal_mask(sz):
    return torch.triu(torch.ones(sz, sz) * float("-inf"), diagonal=1)


attn_mask = generate_causal_mask(5)
raw = torch.randn(5, 5)
weights_manual = torch.softmax(raw * attn_mask, dim=-1)  # expect: MC523 top
print(weights_manual)
