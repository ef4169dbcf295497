"""SASRec: self-attentive sequential recommendation (Kang and McAuley, ICDM 2018).

Written in the layout of pmixer/SASRec.pytorch (`PointWiseFeedForward`, `log2feats`, the
left-aligned user histories, BCE on one sampled negative per position, NDCG@10 / HR@10
against 100 sampled items), on a synthetic catalogue where users walk through item chains.

Source: seed self_attention_mask_guide.txt §3; pytorch/pytorch#103749 (conventions.md §3 item
5); conventions.md §1 (nn.MultiheadAttention row, direction cheat-sheet).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class SASRecArgs:
    maxlen: int = 20
    hidden_units: int = 32
    num_blocks: int = 2
    num_heads: int = 1
    dropout_rate: float = 0.2
    lr: float = 0.001
    l2_emb: float = 0.0
    batch_size: int = 64
    device: str = "cpu"


def causal_attention_mask(tl: int, device: str) -> torch.Tensor:
    return torch.triu(torch.ones((tl, tl), dtype=torch.bool, device=device), diagonal=1)


class PointWiseFeedForward(torch.nn.Module):
    def __init__(self, hidden_units, dropout_rate):
        super().__init__()
        self.conv1 = torch.nn.Conv1d(hidden_units, hidden_units, kernel_size=1)
        self.dropout1 = torch.nn.Dropout(p=dropout_rate)
        self.relu = torch.nn.ReLU()
        self.conv2 = torch.nn.Conv1d(hidden_units, hidden_units, kernel_size=1)
        self.dropout2 = torch.nn.Dropout(p=dropout_rate)

    def forward(self, inputs):
        outputs = self.dropout2(
            self.conv2(self.relu(self.dropout1(self.conv1(inputs.transpose(-1, -2)))))
        )
        outputs = outputs.transpose(-1, -2)
        outputs += inputs
        return outputs


class SASRec(torch.nn.Module):
    def __init__(self, user_num, item_num, args: SASRecArgs):
        super().__init__()
        self.user_num = user_num
        self.item_num = item_num
        self.dev = args.device

        self.item_emb = torch.nn.Embedding(self.item_num + 1, args.hidden_units, padding_idx=0)
        self.pos_emb = torch.nn.Embedding(args.maxlen + 1, args.hidden_units, padding_idx=0)
        self.emb_dropout = torch.nn.Dropout(p=args.dropout_rate)

        self.attention_layernorms = torch.nn.ModuleList()
        self.attention_layers = torch.nn.ModuleList()
        self.forward_layernorms = torch.nn.ModuleList()
        self.forward_layers = torch.nn.ModuleList()
        self.last_layernorm = torch.nn.LayerNorm(args.hidden_units, eps=1e-8)

        for _ in range(args.num_blocks):
            self.attention_layernorms.append(torch.nn.LayerNorm(args.hidden_units, eps=1e-8))
            self.attention_layers.append(
                torch.nn.MultiheadAttention(args.hidden_units, args.num_heads, args.dropout_rate)
            )
            self.forward_layernorms.append(torch.nn.LayerNorm(args.hidden_units, eps=1e-8))
            self.forward_layers.append(PointWiseFeedForward(args.hidden_units, args.dropout_rate))

    def log2feats(self, log_seqs):
        seqs = self.item_emb(torch.LongTensor(log_seqs).to(self.dev))
        seqs *= self.item_emb.embedding_dim**0.5
        poss = np.tile(np.arange(1, log_seqs.shape[1] + 1), [log_seqs.shape[0], 1])
        poss *= log_seqs != 0
        seqs += self.pos_emb(torch.LongTensor(poss).to(self.dev))
        seqs = self.emb_dropout(seqs)

        timeline_mask = torch.BoolTensor(log_seqs == 0).to(self.dev)
        seqs *= ~timeline_mask.unsqueeze(-1)

        tl = seqs.shape[1]
        attention_mask = causal_attention_mask(tl, self.dev)

        for i in range(len(self.attention_layers)):
            seqs = torch.transpose(seqs, 0, 1)
            Q = self.attention_layernorms[i](seqs)
            mha_outputs, _ = self.attention_layers[i](Q, seqs, seqs, attn_mask=attention_mask)
            seqs = Q + mha_outputs
            seqs = torch.transpose(seqs, 0, 1)

            seqs = self.forward_layernorms[i](seqs)
            seqs = self.forward_layers[i](seqs)
            seqs *= ~timeline_mask.unsqueeze(-1)

        log_feats = self.last_layernorm(seqs)
        return log_feats

    def forward(self, user_ids, log_seqs, pos_seqs, neg_seqs):
        log_feats = self.log2feats(log_seqs)

        pos_embs = self.item_emb(torch.LongTensor(pos_seqs).to(self.dev))
        neg_embs = self.item_emb(torch.LongTensor(neg_seqs).to(self.dev))

        pos_logits = (log_feats * pos_embs).sum(dim=-1)
        neg_logits = (log_feats * neg_embs).sum(dim=-1)
        return pos_logits, neg_logits

    def predict(self, user_ids, log_seqs, item_indices):
        log_feats = self.log2feats(log_seqs)
        final_feat = log_feats[:, -1, :]
        item_embs = self.item_emb(torch.LongTensor(item_indices).to(self.dev))
        logits = item_embs.matmul(final_feat.unsqueeze(-1)).squeeze(-1)
        return logits


def random_neq(left, right, s):
    t = np.random.randint(left, right)
    while t in s:
        t = np.random.randint(left, right)
    return t


def data_partition(usernum, itemnum, seed=7):
    rng = random.Random(seed)
    user_train, user_valid, user_test = {}, {}, {}
    for user in range(1, usernum + 1):
        start = rng.randint(1, itemnum)
        step = rng.choice([1, 2])
        length = rng.randint(5, 30)
        seq = [((start - 1 + k * step) % itemnum) + 1 for k in range(length)]
        user_train[user] = seq[:-2]
        user_valid[user] = [seq[-2]]
        user_test[user] = [seq[-1]]
    return user_train, user_valid, user_test


def sample_batch(user_train, usernum, itemnum, args: SASRecArgs):
    users, seqs, poss, negs = [], [], [], []
    for _ in range(args.batch_size):
        user = np.random.randint(1, usernum + 1)
        seq = np.zeros([args.maxlen], dtype=np.int64)
        pos = np.zeros([args.maxlen], dtype=np.int64)
        neg = np.zeros([args.maxlen], dtype=np.int64)
        nxt = user_train[user][-1]
        idx = args.maxlen - 1
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
    return {
        "user_ids": np.array(users),
        "log_seqs": np.array(seqs),
        "pos_seqs": np.array(poss),
        "neg_seqs": np.array(negs),
    }


def evaluate(model, dataset, args: SASRecArgs, itemnum):
    train, valid, test = dataset
    ndcg, ht, valid_user = 0.0, 0.0, 0.0
    for u in train:
        seq = np.zeros([args.maxlen], dtype=np.int64)
        idx = args.maxlen - 1
        seq[idx] = valid[u][0]
        idx -= 1
        for i in reversed(train[u]):
            seq[idx] = i
            idx -= 1
            if idx == -1:
                break
        rated = set(train[u])
        rated.add(0)
        item_idx = [test[u][0]]
        for _ in range(100):
            t = np.random.randint(1, itemnum + 1)
            while t in rated:
                t = np.random.randint(1, itemnum + 1)
            item_idx.append(t)
        predictions = -model.predict(np.array([u]), np.array([seq]), np.array([item_idx]))
        rank = predictions[0].argsort().argsort()[0].item()
        valid_user += 1
        if rank < 10:
            ndcg += 1 / np.log2(rank + 2)
            ht += 1
    return ndcg / valid_user, ht / valid_user


def main():
    np.random.seed(0)
    torch.manual_seed(0)
    args = SASRecArgs()
    usernum, itemnum = 120, 150
    dataset = data_partition(usernum, itemnum)
    model = SASRec(usernum, itemnum, args).to(args.device)
    for _, param in model.named_parameters():
        if param.dim() > 1:
            torch.nn.init.xavier_normal_(param.data)
    bce_criterion = torch.nn.BCEWithLogitsLoss()
    adam_optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, betas=(0.9, 0.98))

    model.train()
    for step in range(60):
        batch = sample_batch(dataset[0], usernum, itemnum, args)
        pos_logits, neg_logits = model(**batch)
        pos_labels = torch.ones(pos_logits.shape, device=args.device)
        neg_labels = torch.zeros(neg_logits.shape, device=args.device)
        indices = np.where(batch["pos_seqs"] != 0)
        loss = bce_criterion(pos_logits[indices], pos_labels[indices])
        loss += bce_criterion(neg_logits[indices], neg_labels[indices])
        for param in model.item_emb.parameters():
            loss += args.l2_emb * torch.norm(param)
        adam_optimizer.zero_grad()
        loss.backward()
        adam_optimizer.step()
        if step % 20 == 0:
            print(f"step {step} loss {loss.item():.4f}")

    model.eval()
    with torch.no_grad():
        ndcg, hr = evaluate(model, dataset, args, itemnum)
    print(f"test NDCG@10 {ndcg:.4f} HR@10 {hr:.4f}")


if __name__ == "__main__":
    main()
