"""Held-out 15 (correct twin): SASRec, a self-attentive sequential recommender, in the layout of the common
PyTorch port: item and position embeddings, left-padded interaction histories (item id 0 =
padding), pre-norm nn.MultiheadAttention blocks in (L, N, E) layout with a point-wise Conv1d
feed-forward, BPR-style positive / negative logits for training and a `predict` for ranking.

Source: pytorch/pytorch#29546 (flipped look-ahead mask: the past hidden, the future shown),
rasbt/LLMs-from-scratch#1061 (a bool triangle given in the other API's convention),
conventions.md §3 items 9 and 14, `maskcheck explain MC521`. nn.MultiheadAttention hides where a
bool `attn_mask` is True, so the look-ahead mask needs the strict upper triangle; here it is the
lower one (`tril`), which hides every item's own past and itself.
Twin: the look-ahead mask is `~torch.tril(...)` (True above the diagonal = hidden), as in the SASRec port.
"""

import numpy as np
import torch
from torch import nn


class PointWiseFeedForward(nn.Module):
    def __init__(self, hidden_units: int, dropout_rate: float):
        super().__init__()
        self.conv1 = nn.Conv1d(hidden_units, hidden_units, kernel_size=1)
        self.dropout1 = nn.Dropout(p=dropout_rate)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv1d(hidden_units, hidden_units, kernel_size=1)
        self.dropout2 = nn.Dropout(p=dropout_rate)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        outputs = self.dropout2(self.conv2(self.relu(self.dropout1(self.conv1(inputs.transpose(-1, -2))))))
        return outputs.transpose(-1, -2) + inputs


class SASRec(nn.Module):
    def __init__(self, item_num: int, maxlen: int = 50, hidden_units: int = 64, num_blocks: int = 2,
                 num_heads: int = 1, dropout_rate: float = 0.2, device: str = "cpu"):
        super().__init__()
        self.item_num = item_num
        self.dev = device
        self.item_emb = nn.Embedding(item_num + 1, hidden_units, padding_idx=0)
        self.pos_emb = nn.Embedding(maxlen + 1, hidden_units, padding_idx=0)
        self.emb_dropout = nn.Dropout(p=dropout_rate)
        self.attention_layernorms = nn.ModuleList()
        self.attention_layers = nn.ModuleList()
        self.forward_layernorms = nn.ModuleList()
        self.forward_layers = nn.ModuleList()
        self.last_layernorm = nn.LayerNorm(hidden_units, eps=1e-8)
        for _ in range(num_blocks):
            self.attention_layernorms.append(nn.LayerNorm(hidden_units, eps=1e-8))
            self.attention_layers.append(nn.MultiheadAttention(hidden_units, num_heads, dropout_rate))
            self.forward_layernorms.append(nn.LayerNorm(hidden_units, eps=1e-8))
            self.forward_layers.append(PointWiseFeedForward(hidden_units, dropout_rate))

    def log2feats(self, log_seqs: np.ndarray) -> torch.Tensor:
        log_seqs = torch.as_tensor(log_seqs, dtype=torch.long, device=self.dev)
        seqs = self.item_emb(log_seqs) * self.item_emb.embedding_dim ** 0.5
        poss = torch.arange(1, log_seqs.shape[1] + 1, device=self.dev).unsqueeze(0).repeat(log_seqs.shape[0], 1)
        poss = poss * (log_seqs != 0)  # padded positions get the padding position embedding
        seqs = self.emb_dropout(seqs + self.pos_emb(poss))

        timeline_mask = log_seqs == 0
        seqs = seqs * ~timeline_mask.unsqueeze(-1)  # zero the left padding

        tl = seqs.shape[1]
        attention_mask = ~torch.tril(torch.ones((tl, tl), dtype=torch.bool, device=self.dev))

        for i in range(len(self.attention_layers)):
            seqs = torch.transpose(seqs, 0, 1)
            Q = self.attention_layernorms[i](seqs)
            mha_outputs, _ = self.attention_layers[i](Q, seqs, seqs, attn_mask=attention_mask)
            seqs = Q + mha_outputs
            seqs = torch.transpose(seqs, 0, 1)
            seqs = self.forward_layers[i](self.forward_layernorms[i](seqs))
            seqs = seqs * ~timeline_mask.unsqueeze(-1)

        return self.last_layernorm(seqs)

    def forward(self, log_seqs, pos_seqs, neg_seqs):
        log_feats = self.log2feats(log_seqs)
        pos_embs = self.item_emb(torch.as_tensor(pos_seqs, dtype=torch.long, device=self.dev))
        neg_embs = self.item_emb(torch.as_tensor(neg_seqs, dtype=torch.long, device=self.dev))
        return (log_feats * pos_embs).sum(dim=-1), (log_feats * neg_embs).sum(dim=-1)

    def predict(self, log_seqs, item_indices):
        final_feat = self.log2feats(log_seqs)[:, -1, :]  # the most recent interaction
        item_embs = self.item_emb(torch.as_tensor(item_indices, dtype=torch.long, device=self.dev))
        return item_embs.matmul(final_feat.unsqueeze(-1)).squeeze(-1)
