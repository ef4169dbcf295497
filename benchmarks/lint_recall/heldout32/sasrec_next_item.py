"""SASRec next-item recommender in the style of pmixer/SASRec.pytorch.

Item ids start at 1 and 0 is the padding id; user histories are left-padded to
``maxlen`` so that the newest interaction sits in the last column. Training uses
one sampled negative per position with BCE, evaluation ranks the held-out item
against 100 sampled negatives (HR@10, NDCG@10).

Source: pytorch/pytorch#29546, rasbt/LLMs-from-scratch#1061, conventions.md §1 (direction cheat-sheet)
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn


@dataclass
class SASRecConfig:
    item_num: int = 400
    maxlen: int = 20
    hidden_units: int = 32
    num_blocks: int = 2
    num_heads: int = 2
    dropout_rate: float = 0.2
    l2_emb: float = 0.0
    lr: float = 1e-3


class PointWiseFeedForward(nn.Module):
    def __init__(self, hidden_units, dropout_rate):
        super().__init__()
        self.conv1 = nn.Conv1d(hidden_units, hidden_units, kernel_size=1)
        self.dropout1 = nn.Dropout(p=dropout_rate)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv1d(hidden_units, hidden_units, kernel_size=1)
        self.dropout2 = nn.Dropout(p=dropout_rate)

    def forward(self, inputs):
        outputs = self.dropout2(self.conv2(self.relu(self.dropout1(self.conv1(inputs.transpose(-1, -2))))))
        outputs = outputs.transpose(-1, -2)
        return outputs + inputs


class SASRec(nn.Module):
    def __init__(self, user_num, cfg: SASRecConfig):
        super().__init__()
        self.user_num = user_num
        self.item_num = cfg.item_num
        self.num_heads = cfg.num_heads
        self.item_emb = nn.Embedding(cfg.item_num + 1, cfg.hidden_units, padding_idx=0)
        self.pos_emb = nn.Embedding(cfg.maxlen + 1, cfg.hidden_units, padding_idx=0)
        self.emb_dropout = nn.Dropout(p=cfg.dropout_rate)

        self.attention_layernorms = nn.ModuleList()
        self.attention_layers = nn.ModuleList()
        self.forward_layernorms = nn.ModuleList()
        self.forward_layers = nn.ModuleList()
        self.last_layernorm = nn.LayerNorm(cfg.hidden_units, eps=1e-8)

        for _ in range(cfg.num_blocks):
            self.attention_layernorms.append(nn.LayerNorm(cfg.hidden_units, eps=1e-8))
            self.attention_layers.append(nn.MultiheadAttention(cfg.hidden_units, cfg.num_heads, cfg.dropout_rate))
            self.forward_layernorms.append(nn.LayerNorm(cfg.hidden_units, eps=1e-8))
            self.forward_layers.append(PointWiseFeedForward(cfg.hidden_units, cfg.dropout_rate))

    def log2feats(self, log_seqs):
        seqs = self.item_emb(log_seqs)
        seqs = seqs * self.item_emb.embedding_dim ** 0.5
        poss = torch.arange(1, log_seqs.shape[1] + 1, device=log_seqs.device).unsqueeze(0).repeat(log_seqs.shape[0], 1)
        poss = poss * (log_seqs != 0)
        seqs = seqs + self.pos_emb(poss)
        seqs = self.emb_dropout(seqs)

        timeline_mask = log_seqs == 0
        seqs = seqs * ~timeline_mask.unsqueeze(-1)

        tl = seqs.shape[1]
        attention_mask = torch.tril(torch.ones((tl, tl), dtype=torch.bool, device=log_seqs.device))  # expect: MC521 sasrec
        blocked = attention_mask.unsqueeze(0) | timeline_mask.unsqueeze(1)
        blocked = blocked & ~torch.eye(tl, dtype=torch.bool, device=log_seqs.device)
        blocked = blocked.repeat_interleave(self.num_heads, dim=0)

        for i in range(len(self.attention_layers)):
            seqs = torch.transpose(seqs, 0, 1)
            Q = self.attention_layernorms[i](seqs)
            mha_outputs, _ = self.attention_layers[i](Q, seqs, seqs, attn_mask=blocked)
            seqs = Q + mha_outputs
            seqs = torch.transpose(seqs, 0, 1)

            seqs = self.forward_layernorms[i](seqs)
            seqs = self.forward_layers[i](seqs)
            seqs = seqs * ~timeline_mask.unsqueeze(-1)

        return self.last_layernorm(seqs)

    def forward(self, user_ids, log_seqs, pos_seqs, neg_seqs):
        log_feats = self.log2feats(log_seqs)
        pos_embs = self.item_emb(pos_seqs)
        neg_embs = self.item_emb(neg_seqs)
        pos_logits = (log_feats * pos_embs).sum(dim=-1)
        neg_logits = (log_feats * neg_embs).sum(dim=-1)
        return pos_logits, neg_logits

    def predict(self, user_ids, log_seqs, item_indices):
        log_feats = self.log2feats(log_seqs)
        final_feat = log_feats[:, -1, :]
        item_embs = self.item_emb(item_indices)
        return item_embs.matmul(final_feat.unsqueeze(-1)).squeeze(-1)


def random_neq(lo, hi, seen):
    t = np.random.randint(lo, hi)
    while t in seen:
        t = np.random.randint(lo, hi)
    return t


def sample_batch(user_train, usernum, itemnum, batch_size, maxlen):
    users, seqs, poss, negs = [], [], [], []
    for _ in range(batch_size):
        user = np.random.randint(1, usernum + 1)
        while len(user_train[user]) <= 1:
            user = np.random.randint(1, usernum + 1)
        seq = np.zeros([maxlen], dtype=np.int64)
        pos = np.zeros([maxlen], dtype=np.int64)
        neg = np.zeros([maxlen], dtype=np.int64)
        nxt = user_train[user][-1]
        idx = maxlen - 1
        ts = set(user_train[user])
        for i in reversed(user_train[user][:-1]):
            seq[idx] = i
            pos[idx] = nxt
            neg[idx] = random_neq(1, itemnum + 1, ts)
            nxt = i
            idx -= 1
            if idx == -1:
                break
        users.append(user)
        seqs.append(seq)
        poss.append(pos)
        negs.append(neg)
    return tuple(torch.as_tensor(np.array(x)) for x in (users, seqs, poss, negs))


def left_pad(history, maxlen):
    seq = np.zeros([maxlen], dtype=np.int64)
    tail = history[-maxlen:]
    seq[maxlen - len(tail):] = tail
    return seq


def evaluate(model, user_train, user_test, itemnum, maxlen, n_neg=100):
    ndcg, hits, n = 0.0, 0.0, 0
    model.eval()
    with torch.no_grad():
        for u, target in user_test.items():
            seq = torch.as_tensor(left_pad(user_train[u], maxlen))[None]
            rated = set(user_train[u]) | {target}
            items = [target] + [random_neq(1, itemnum + 1, rated) for _ in range(n_neg)]
            scores = -model.predict(None, seq, torch.as_tensor(items)[None])[0]
            rank = scores.argsort().argsort()[0].item()
            n += 1
            if rank < 10:
                ndcg += 1 / np.log2(rank + 2)
                hits += 1
    return ndcg / n, hits / n


def make_users(usernum, itemnum, seed=0):
    rng = random.Random(seed)
    user_train, user_test = {}, {}
    for u in range(1, usernum + 1):
        start = rng.randint(1, itemnum - 40)
        hist = [start + rng.randint(0, 3) * k % 40 for k in range(rng.randint(4, 30))]
        user_train[u] = hist[:-1]
        user_test[u] = hist[-1]
    return user_train, user_test


if __name__ == "__main__":
    torch.manual_seed(0)
    np.random.seed(0)
    cfg = SASRecConfig()
    usernum = 60
    user_train, user_test = make_users(usernum, cfg.item_num)
    model = SASRec(usernum, cfg)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, betas=(0.9, 0.98))
    bce = nn.BCEWithLogitsLoss()
    for step in range(30):
        model.train()
        u, seq, pos, neg = sample_batch(user_train, usernum, cfg.item_num, 16, cfg.maxlen)
        pos_logits, neg_logits = model(u, seq, pos, neg)
        indices = torch.nonzero(pos != 0, as_tuple=True)
        loss = bce(pos_logits[indices], torch.ones_like(pos_logits[indices]))
        loss = loss + bce(neg_logits[indices], torch.zeros_like(neg_logits[indices]))
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("loss", round(loss.item(), 4))
    print("NDCG@10 %.4f HR@10 %.4f" % evaluate(model, user_train, user_test, cfg.item_num, cfg.maxlen))

    model.eval()
    with torch.no_grad():
        seq = torch.as_tensor(left_pad(user_train[1], cfg.maxlen))[None]
        changed = seq.clone()
        changed[0, -1] = (changed[0, -1] % cfg.item_num) + 1
        a, b = model.log2feats(seq), model.log2feats(changed)
        print("earlier positions moved by a later item:", (a[:, :-1] - b[:, :-1]).abs().max().item())
