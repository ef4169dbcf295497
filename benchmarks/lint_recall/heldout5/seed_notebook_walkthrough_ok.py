"""Held-out 5 twin (seed): the notebook walkthrough with each cell doing what the seed articles advise.

Source: the seed articles' correct forms: out-of-place masked_fill on tensors that need grad, a fill
value the dtype can hold, key_padding_mask True at padding, the additive causal mask added.
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
attn_scores.masked_fill_(mask, torch.finfo(attn_scores.dtype).min)
print(attn_scores)

# %%
x = torch.tensor([1.0, 2.0], requires_grad=True)
y = x.masked_fill(torch.tensor([False, True]), 0.0)

# %%
embed_dim, num_heads = 8, 2
multihead_attn = nn.MultiheadAttention(embed_dim, num_heads)
query = key = value = torch.randn(5, 2, embed_dim)
attention_mask = torch.tensor([[1, 1, 1, 0, 0],
                               [1, 1, 1, 1, 1]])  # what the tokenizer returned
output, weights = multihead_attn(query, key, value, key_padding_mask=attention_mask == 0)

# %%
# the same, through bool
output, weights = multihead_attn(query, key, value, key_padding_mask=~attention_mask.bool())


# %%
def generate_causal_mask(sz):
    return torch.triu(torch.ones(sz, sz) * float("-inf"), diagonal=1)


attn_mask = generate_causal_mask(5)
raw = torch.randn(5, 5)
weights_manual = torch.softmax(raw + attn_mask, dim=-1)
print(weights_manual)
