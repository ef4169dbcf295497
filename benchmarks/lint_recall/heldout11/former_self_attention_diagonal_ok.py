"""Held-out 11 (correct twin): pbloem/former (former/modules.py `SelfAttention`, `TransformerBlock`,
former/transformers.py `GTransformer`, former/util `mask_`), the generating transformer of the
"Transformers from scratch" tutorial.

Source: the fix described on pbloem/former#6: `mask_diagonal=False`, so `triu_indices` uses offset 1
and each position attends to itself and the past.
Surroundings: the -inf written in place by a helper through `triu_indices`, chosen by a keyword
flag, on the scores of a module built with `mask=True`.
"""

import torch
from torch import nn
import torch.nn.functional as F


class SelfAttention(nn.Module):
    def __init__(self, emb, heads=8, mask=False):
        super().__init__()
        self.emb = emb
        self.heads = heads
        self.mask = mask
        self.tokeys = nn.Linear(emb, emb * heads, bias=False)
        self.toqueries = nn.Linear(emb, emb * heads, bias=False)
        self.tovalues = nn.Linear(emb, emb * heads, bias=False)
        self.unifyheads = nn.Linear(heads * emb, emb)

    def forward(self, x):
        b, t, e = x.size()
        h = self.heads
        keys = self.tokeys(x).view(b, t, h, e)
        queries = self.toqueries(x).view(b, t, h, e)
        values = self.tovalues(x).view(b, t, h, e)

        # - fold heads into the batch dimension
        keys = keys.transpose(1, 2).contiguous().view(b * h, t, e)
        queries = queries.transpose(1, 2).contiguous().view(b * h, t, e)
        values = values.transpose(1, 2).contiguous().view(b * h, t, e)

        queries = queries / (e ** (1 / 4))
        keys = keys / (e ** (1 / 4))

        # - get dot product of queries and keys, and scale
        dot = torch.bmm(queries, keys.transpose(1, 2))
        assert dot.size() == (b * h, t, t)

        if self.mask:  # mask out the upper half of the dot matrix
            mask_(dot, maskval=float('-inf'), mask_diagonal=False)

        dot = F.softmax(dot, dim=2)  # - dot now has row-wise self-attention probabilities

        out = torch.bmm(dot, values).view(b, h, t, e)
        out = out.transpose(1, 2).contiguous().view(b, t, h * e)
        return self.unifyheads(out)


class TransformerBlock(nn.Module):
    def __init__(self, emb, heads, mask, ff_hidden_mult=4, dropout=0.0):
        super().__init__()
        self.attention = SelfAttention(emb, heads=heads, mask=mask)
        self.norm1 = nn.LayerNorm(emb)
        self.norm2 = nn.LayerNorm(emb)
        self.ff = nn.Sequential(nn.Linear(emb, ff_hidden_mult * emb), nn.ReLU(),
                                nn.Linear(ff_hidden_mult * emb, emb))
        self.do = nn.Dropout(dropout)

    def forward(self, x):
        attended = self.attention(x)
        x = self.do(self.norm1(attended + x))
        fedforward = self.ff(x)
        return self.do(self.norm2(fedforward + x))


class GTransformer(nn.Module):
    """Transformer for generating text (character by character)."""

    def __init__(self, emb, heads, depth, seq_length, num_tokens):
        super().__init__()
        self.num_tokens = num_tokens
        self.token_embedding = nn.Embedding(embedding_dim=emb, num_embeddings=num_tokens)
        self.pos_embedding = nn.Embedding(embedding_dim=emb, num_embeddings=seq_length)
        self.tblocks = nn.Sequential(*[TransformerBlock(emb=emb, heads=heads, mask=True) for _ in range(depth)])
        self.toprobs = nn.Linear(emb, num_tokens)

    def forward(self, x):
        tokens = self.token_embedding(x)
        b, t, e = tokens.size()
        positions = self.pos_embedding(torch.arange(t))[None, :, :].expand(b, t, e)
        x = self.tblocks(tokens + positions)
        x = self.toprobs(x.view(b * t, e)).view(b, t, self.num_tokens)
        return F.log_softmax(x, dim=2)


def mask_(matrices, maskval=0.0, mask_diagonal=True):
    """Masks out all values in the given batch of matrices where i <= j holds, i < j if mask_diagonal
    is false. In place operation."""
    b, h, w = matrices.size()
    indices = torch.triu_indices(h, w, offset=0 if mask_diagonal else 1)
    matrices[:, indices[0], indices[1]] = maskval
