"""SASRec: self-attentive sequential recommendation (Kang & McAuley 2018), PyTorch port.

Item histories are right-padded with item 0 (RecBole layout) so that the last real position
is gathered per user; the blocks follow the widely used PyTorch port (point-wise Conv1d
feed-forward, sequence-first nn.MultiheadAttention, padded positions zeroed after every
block). nn.MultiheadAttention takes bool masks with True = not allowed: the look-ahead
`attn_mask` is True above the diagonal and `key_padding_mask` is True at padded items.
Training uses one sampled negative per position (binary cross-entropy on real positions),
evaluation ranks the held-out item against sampled negatives, and full ranking hides the
items a user has already seen.

Source: pytorch/pytorch#29546 (flipped look-ahead attention mask for transformer) and
rasbt/LLMs-from-scratch#1061 (a triangle in one convention given to an API using the other);
conventions.md §3 items 9 and 14 and the §1 cheat-sheet.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class PointWiseFeedForward(nn.Module):
    def __init__(self, hidden_units, dropout_rate):
        super().__init__()
        self.conv1 = nn.Conv1d(hidden_units, hidden_units, kernel_size=1)
        self.dropout1 = nn.Dropout(p=dropout_rate)
        self.conv2 = nn.Conv1d(hidden_units, hidden_units, kernel_size=1)
        self.dropout2 = nn.Dropout(p=dropout_rate)

    def forward(self, inputs):
        outputs = self.dropout2(self.conv2(F.relu(self.dropout1(self.conv1(inputs.transpose(-1, -2))))))
        return outputs.transpose(-1, -2) + inputs


class SASRec(nn.Module):
    def __init__(self, item_num, maxlen=10, hidden_units=32, num_blocks=2, num_heads=2, dropout_rate=0.2):
        super().__init__()
        self.item_num = item_num
        self.item_emb = nn.Embedding(item_num + 1, hidden_units, padding_idx=0)
        self.pos_emb = nn.Embedding(maxlen, hidden_units)
        self.emb_dropout = nn.Dropout(p=dropout_rate)
        self.attention_layernorms = nn.ModuleList()
        self.attention_layers = nn.ModuleList()
        self.forward_layernorms = nn.ModuleList()
        self.forward_layers = nn.ModuleList()
        for _ in range(num_blocks):
            self.attention_layernorms.append(nn.LayerNorm(hidden_units, eps=1e-8))
            self.attention_layers.append(nn.MultiheadAttention(hidden_units, num_heads, dropout_rate))
            self.forward_layernorms.append(nn.LayerNorm(hidden_units, eps=1e-8))
            self.forward_layers.append(PointWiseFeedForward(hidden_units, dropout_rate))
        self.last_layernorm = nn.LayerNorm(hidden_units, eps=1e-8)

    def log2feats(self, log_seqs):
        """log_seqs (batch, maxlen) item ids, right-padded with 0 -> (batch, maxlen, hidden)."""
        seqs = self.item_emb(log_seqs) * self.item_emb.embedding_dim**0.5
        positions = torch.arange(log_seqs.shape[1], device=log_seqs.device)
        seqs = self.emb_dropout(seqs + self.pos_emb(positions)[None])
        timeline_mask = log_seqs == 0
        seqs = seqs * ~timeline_mask.unsqueeze(-1)

        tl = seqs.shape[1]
        attention_mask = torch.tril(torch.ones((tl, tl), dtype=torch.bool, device=seqs.device))  # expect: MC521 sasrec
        for i in range(len(self.attention_layers)):
            seqs = torch.transpose(seqs, 0, 1)
            Q = self.attention_layernorms[i](seqs)
            mha_outputs, _ = self.attention_layers[i](Q, seqs, seqs, attn_mask=attention_mask, key_padding_mask=timeline_mask, need_weights=False)  # also: MC521
            seqs = torch.transpose(Q + mha_outputs, 0, 1)
            seqs = self.forward_layers[i](self.forward_layernorms[i](seqs))
            seqs = seqs * ~timeline_mask.unsqueeze(-1)
        return self.last_layernorm(seqs)

    def forward(self, log_seqs, pos_seqs, neg_seqs):
        log_feats = self.log2feats(log_seqs)
        pos_logits = (log_feats * self.item_emb(pos_seqs)).sum(dim=-1)
        neg_logits = (log_feats * self.item_emb(neg_seqs)).sum(dim=-1)
        return pos_logits, neg_logits

    @staticmethod
    def gather_last(feats, lengths):
        index = (lengths - 1).clamp(min=0)[:, None, None].expand(-1, 1, feats.shape[-1])
        return feats.gather(1, index).squeeze(1)

    def predict(self, log_seqs, lengths, item_indices):
        """Scores of candidate items (batch, n) from the last real position of each history."""
        final_feat = self.gather_last(self.log2feats(log_seqs), lengths)
        return (self.item_emb(item_indices) * final_feat[:, None, :]).sum(-1)

    def full_ranking(self, log_seqs, lengths, k=5):
        """Top-k over the whole catalogue, never recommending padding or an item already seen."""
        final_feat = self.gather_last(self.log2feats(log_seqs), lengths)
        scores = final_feat @ self.item_emb.weight.T
        seen = torch.zeros_like(scores, dtype=torch.bool).scatter_(1, log_seqs, True)
        seen[:, 0] = True
        return scores.masked_fill(seen, float("-inf")).topk(k, dim=-1).indices


def pad_histories(histories, maxlen):
    """Keep the last `maxlen` items of each history, right-pad with 0; also return lengths."""
    seqs = torch.zeros(len(histories), maxlen, dtype=torch.long)
    lengths = torch.zeros(len(histories), dtype=torch.long)
    for i, h in enumerate(histories):
        h = h[-maxlen:]
        seqs[i, : len(h)] = torch.tensor(h)
        lengths[i] = len(h)
    return seqs, lengths


def sample_negatives(pos_seqs, item_num, rng):
    """One negative per real position, never an item of the same user's targets; 0 at padding."""
    neg = torch.zeros_like(pos_seqs)
    for i, row in enumerate(pos_seqs.tolist()):
        seen = set(row)
        for j, item in enumerate(row):
            if item == 0:
                continue
            candidate = int(rng.integers(1, item_num + 1))
            while candidate in seen:
                candidate = int(rng.integers(1, item_num + 1))
            neg[i, j] = candidate
    return neg


def training_batch(histories, maxlen):
    """Inputs are the history without its last item, targets the history shifted by one."""
    log_seqs, lengths = pad_histories([h[:-1] for h in histories], maxlen)
    pos_seqs, _ = pad_histories([h[1:] for h in histories], maxlen)
    return log_seqs, lengths, pos_seqs


def bce_loss(pos_logits, neg_logits, pos_seqs):
    indices = pos_seqs != 0
    pos_labels = torch.ones_like(pos_logits)
    neg_labels = torch.zeros_like(neg_logits)
    loss = F.binary_cross_entropy_with_logits(pos_logits[indices], pos_labels[indices])
    return loss + F.binary_cross_entropy_with_logits(neg_logits[indices], neg_labels[indices])


def evaluate_ndcg(model, histories, item_num, rng, num_negatives=20, k=10):
    """Leave-one-out: rank the last item against sampled negatives the user never saw."""
    log_seqs, lengths = pad_histories([h[:-1] for h in histories], model.pos_emb.num_embeddings)
    candidates = []
    for h in histories:
        pool = np.setdiff1d(np.arange(1, item_num + 1), np.array(h))
        candidates.append([h[-1]] + rng.choice(pool, size=num_negatives, replace=False).tolist())
    with torch.no_grad():
        scores = model.predict(log_seqs, lengths, torch.tensor(candidates))
    rank = (scores > scores[:, :1]).sum(-1)
    return torch.where(rank < k, 1.0 / torch.log2(rank.float() + 2.0), torch.zeros(())).mean().item()



def build_histories(interactions, min_len=3):
    """(user, item, timestamp) triples -> per-user item lists in time order (short users dropped)."""
    by_user = {}
    for user, item, ts in sorted(interactions, key=lambda r: (r[0], r[2])):
        by_user.setdefault(user, []).append(item)
    return [items for items in by_user.values() if len(items) >= min_len]


def hit_rate_full(model, histories, k=5):
    """Leave-one-out over the whole catalogue: is the held-out item in the top k unseen items?"""
    log_seqs, lengths = pad_histories([h[:-1] for h in histories], model.pos_emb.num_embeddings)
    targets = torch.tensor([h[-1] for h in histories])
    with torch.no_grad():
        top = model.full_ranking(log_seqs, lengths, k)
    return (top == targets[:, None]).any(-1).float().mean().item()

if __name__ == "__main__":
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    item_num, maxlen = 50, 8
    model = SASRec(item_num, maxlen=maxlen).eval()

    seqs, lengths = pad_histories([[3, 7, 9, 11, 4, 21]], maxlen)
    changed = seqs.clone()
    changed[0, 5] = 40
    with torch.no_grad():
        a, b = model.log2feats(seqs), model.log2feats(changed)
    print("position 2 moves when item 5 changes:", (a[0, 2] - b[0, 2]).abs().max().item())

    batch, batch_lengths = pad_histories([[3, 7, 9], [5, 6, 8, 12, 14, 15, 2, 1]], maxlen)
    with torch.no_grad():
        together = model.predict(batch, batch_lengths, torch.arange(1, item_num + 1)[None].expand(2, -1))
        alone = model.predict(batch[:1, :3], batch_lengths[:1], torch.arange(1, item_num + 1)[None])
    print("short user: batched vs alone max |diff| =", (together[0] - alone[0]).abs().max().item())
    print("full ranking", model.full_ranking(batch, batch_lengths).tolist())

    interactions = [(u, int(i), int(ts)) for u, n in enumerate((5, 9, 7, 4)) for ts, i in enumerate(rng.choice(np.arange(1, item_num + 1), size=n, replace=False))]
    histories = build_histories(interactions)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(3):
        log_seqs, _, pos_seqs = training_batch(histories, maxlen)
        neg_seqs = sample_negatives(pos_seqs, item_num, rng)
        pos_logits, neg_logits = model(log_seqs, pos_seqs, neg_seqs)
        loss = bce_loss(pos_logits, neg_logits, pos_seqs)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print("loss", round(loss.item(), 4))
    model.eval()
    print("NDCG@10", round(evaluate_ndcg(model, histories, item_num, rng), 4))
    print("HR@5 (full ranking)", round(hit_rate_full(model, histories), 4))
