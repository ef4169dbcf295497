"""Held-out 10: ReChorus's sequential recommender stack (src/utils/layers.py `MultiHeadAttention`
with its static `scaled_dot_product_attention`, `TransformerLayer`; src/models/sequential/
SASRec.py building a numpy lower-triangular keep mask).

Source: THUwangcy/ReChorus#8 ("masked_fill with '-np.inf' will cause 'nan'": the reporter
proposes filling the masked scores with "a tiny value like 1e-13" instead of -inf; the maintainer
answers that a tiny value "will not ensure a zero after softmax" since the other scores can be
negative, and keeps -inf with a NaN clean-up after the softmax). The proposal is the bug here:
a fill of -1e-13 leaves every future item with about the same weight as a score of 0, so the
causal mask masks nothing; the repository's -inf fill is the twin.
Surroundings: the keep mask made with numpy in the model, converted with torch.from_numpy,
passed positionally through a TransformerLayer into a static method.
"""

import numpy as np
import torch
import torch.nn as nn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, kq_same=False, bias=True):
        super().__init__()
        self.d_model = d_model
        self.h = n_heads
        self.d_k = self.d_model // self.h
        self.kq_same = kq_same
        if not kq_same:
            self.q_linear = nn.Linear(d_model, d_model, bias=bias)
        self.k_linear = nn.Linear(d_model, d_model, bias=bias)
        self.v_linear = nn.Linear(d_model, d_model, bias=bias)

    def head_split(self, x):  # get dimensions bs * h * seq_len * d_k
        new_x_shape = x.size()[:-1] + (self.h, self.d_k)
        return x.view(*new_x_shape).transpose(-2, -3)

    def forward(self, q, k, v, mask=None):
        origin_shape = q.size()
        # perform linear operation and split into h heads
        if not self.kq_same:
            q = self.head_split(self.q_linear(q))
        else:
            q = self.head_split(self.k_linear(q))
        k = self.head_split(self.k_linear(k))
        v = self.head_split(self.v_linear(v))
        # calculate attention using function we will define next
        output = self.scaled_dot_product_attention(q, k, v, self.d_k, mask)
        # concatenate heads and put through final linear layer
        output = output.transpose(-2, -3).reshape(origin_shape)
        return output

    @staticmethod
    def scaled_dot_product_attention(q, k, v, d_k, mask=None):
        """
        This is called by Multi-head attention object to find the values.
        """
        scores = torch.matmul(q, k.transpose(-2, -1)) / d_k ** 0.5  # bs, head, q_len, k_len
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e-13)  # expect: MC516 literal
        scores = (scores - scores.max()).softmax(dim=-1)
        scores = scores.masked_fill(torch.isnan(scores), 0)
        output = torch.matmul(scores, v)  # bs, head, q_len, d_k
        return output


class TransformerLayer(nn.Module):
    def __init__(self, d_model, d_ff, n_heads, dropout=0, kq_same=False):
        super().__init__()
        self.masked_attn_head = MultiHeadAttention(d_model, n_heads, kq_same=kq_same)
        self.layer_norm1 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.layer_norm2 = nn.LayerNorm(d_model)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, seq, mask=None):
        context = self.masked_attn_head(seq, seq, seq, mask)
        context = self.layer_norm1(self.dropout1(context) + seq)
        output = self.linear1(context).relu()
        output = self.linear2(output)
        output = self.layer_norm2(self.dropout2(output) + context)
        return output


class SASRec(nn.Module):
    def __init__(self, item_num, emb_size=64, max_his=20, num_layers=1, num_heads=1, dropout=0.0):
        super().__init__()
        self.emb_size = emb_size
        self.max_his = max_his
        self.i_embeddings = nn.Embedding(item_num, self.emb_size)
        self.p_embeddings = nn.Embedding(self.max_his + 1, self.emb_size)
        self.transformer_block = nn.ModuleList([
            TransformerLayer(d_model=self.emb_size, d_ff=self.emb_size, n_heads=num_heads,
                             dropout=dropout, kq_same=False)
            for _ in range(num_layers)
        ])

    def forward(self, feed_dict):
        i_ids = feed_dict['item_id']  # [batch_size, -1]
        history = feed_dict['history_items']  # [batch_size, history_max]
        lengths = feed_dict['lengths']  # [batch_size]
        batch_size, seq_len = history.shape

        valid_his = (history > 0).long()
        his_vectors = self.i_embeddings(history)

        # Position embedding
        position = (lengths[:, None] - torch.arange(seq_len)[None, :]) * valid_his
        his_vectors = his_vectors + self.p_embeddings(position)

        # Self-attention
        causality_mask = np.tril(np.ones((1, 1, seq_len, seq_len), dtype=np.int64))
        attn_mask = torch.from_numpy(causality_mask).to(history.device)
        for block in self.transformer_block:
            his_vectors = block(his_vectors, attn_mask)
        his_vectors = his_vectors * valid_his[:, :, None].float()

        his_vector = his_vectors[torch.arange(batch_size), lengths - 1, :]
        i_vectors = self.i_embeddings(i_ids)
        prediction = (his_vector[:, None, :] * i_vectors).sum(-1)
        return {'prediction': prediction.view(batch_size, -1)}
