"""Self-Attentive Knowledge Tracing (SAKT) on student exercise logs.

Follows the SAKT of Pandey & Karypis (2019) as ported for the Riiid! Answer Correctness Prediction
competition: interactions encoded as question + n_skill * answered_correctly, the next question as
the query of one nn.MultiheadAttention over past interactions, a point-wise FFN, per-user histories
cut to max_seq and left-padded with 0, BCE on the real positions and AUC on held-out users.

Source: seed self_attention_mask_guide.txt §3 (generate_causal_mask), pytorch/pytorch#103749 (conventions.md §3 item 5), conventions.md §2.4
"""
import random

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

MAX_SEQ = 50
N_SKILL = 40


def simulate_users(n_users, seed=0):
    rng = np.random.default_rng(seed)
    difficulty = rng.normal(0.0, 1.0, N_SKILL)
    prereq = rng.integers(0, N_SKILL, N_SKILL)
    group = {}
    for user in range(n_users):
        ability = rng.normal(0.0, 1.0)
        mastery = np.zeros(N_SKILL)
        qs, rs = [], []
        for _ in range(rng.integers(10, 120)):
            q = int(rng.integers(0, N_SKILL))
            logit = ability + mastery[q] + 0.5 * mastery[prereq[q]] - difficulty[q]
            r = int(rng.random() < 1.0 / (1.0 + np.exp(-logit)))
            mastery[q] += 0.4 if r else 0.15
            qs.append(q + 1)
            rs.append(r)
        group[user] = (np.array(qs), np.array(rs))
    return group


class SAKTDataset(Dataset):
    def __init__(self, group, n_skill, max_seq=MAX_SEQ):
        super().__init__()
        self.max_seq, self.n_skill = max_seq, n_skill
        self.samples = group
        self.user_ids = [u for u in group if len(group[u][0]) > 1]

    def __len__(self):
        return len(self.user_ids)

    def __getitem__(self, index):
        q_, qa_ = self.samples[self.user_ids[index]]
        seq_len = len(q_)
        q = np.zeros(self.max_seq, dtype=int)
        qa = np.zeros(self.max_seq, dtype=int)
        if seq_len >= self.max_seq:
            q[:] = q_[-self.max_seq:]
            qa[:] = qa_[-self.max_seq:]
        else:
            q[-seq_len:] = q_
            qa[-seq_len:] = qa_
        target_id = q[1:]
        label = qa[1:]
        x = q[:-1].copy()
        x += (qa[:-1] == 1) * self.n_skill
        return x, target_id, label


def future_mask(seq_length):
    future_mask = torch.triu(torch.ones(seq_length, seq_length, dtype=torch.bool))  # expect: MC503 sakt
    return future_mask


class FFN(nn.Module):
    def __init__(self, state_size=200):
        super().__init__()
        self.lr1 = nn.Linear(state_size, state_size)
        self.relu = nn.ReLU()
        self.lr2 = nn.Linear(state_size, state_size)
        self.dropout = nn.Dropout(0.2)

    def forward(self, x):
        x = self.lr1(x)
        x = self.relu(x)
        x = self.lr2(x)
        return self.dropout(x)


class SAKTModel(nn.Module):
    def __init__(self, n_skill, max_seq=MAX_SEQ, embed_dim=64):
        super().__init__()
        self.n_skill = n_skill
        self.embed_dim = embed_dim
        self.embedding = nn.Embedding(2 * n_skill + 1, embed_dim)
        self.pos_embedding = nn.Embedding(max_seq - 1, embed_dim)
        self.e_embedding = nn.Embedding(n_skill + 1, embed_dim)
        self.multi_att = nn.MultiheadAttention(embed_dim=embed_dim, num_heads=8, dropout=0.2)
        self.dropout = nn.Dropout(0.2)
        self.layer_normal = nn.LayerNorm(embed_dim)
        self.ffn = FFN(embed_dim)
        self.pred = nn.Linear(embed_dim, 1)

    def forward(self, x, question_ids):
        device = x.device
        x = self.embedding(x)
        pos_id = torch.arange(x.size(1)).unsqueeze(0).to(device)
        pos_x = self.pos_embedding(pos_id)
        x = x + pos_x
        e = self.e_embedding(question_ids)
        x = x.permute(1, 0, 2)
        e = e.permute(1, 0, 2)
        att_mask = future_mask(x.size(0)).to(device)
        att_output, att_weight = self.multi_att(e, x, x, attn_mask=att_mask)
        att_output = self.layer_normal(att_output + e)
        att_output = att_output.permute(1, 0, 2)
        x = self.ffn(att_output)
        x = self.layer_normal(x + att_output)
        x = self.pred(x)
        return x.squeeze(-1), att_weight


def roc_auc(labels, scores):
    order = np.argsort(scores)
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    pos = labels == 1
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return (ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / max(n_pos * n_neg, 1)


def train_epoch(model, train_iterator, optim, criterion, device="cpu"):
    model.train()
    train_loss, num_corrects, num_total = [], 0, 0
    for x, target_id, label in train_iterator:
        x, target_id, label = x.to(device).long(), target_id.to(device).long(), label.to(device).float()
        optim.zero_grad()
        output, _ = model(x, target_id)
        target_mask = target_id != 0
        output = torch.masked_select(output, target_mask)
        label = torch.masked_select(label, target_mask)
        loss = criterion(output, label)
        loss.backward()
        optim.step()
        train_loss.append(loss.item())
        pred = (torch.sigmoid(output) >= 0.5).long()
        num_corrects += (pred == label).sum().item()
        num_total += len(label)
    return np.mean(train_loss), num_corrects / max(num_total, 1)


@torch.no_grad()
def valid_epoch(model, valid_iterator, device="cpu"):
    model.eval()
    labels, outs = [], []
    for x, target_id, label in valid_iterator:
        output, _ = model(x.to(device).long(), target_id.to(device).long())
        target_mask = target_id != 0
        outs.append(torch.sigmoid(output)[target_mask].cpu().numpy())
        labels.append(label[target_mask].numpy())
    labels, outs = np.concatenate(labels), np.concatenate(outs)
    return roc_auc(labels, outs), ((outs >= 0.5) == labels).mean()


def main():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    group = simulate_users(1200)
    users = list(group)
    random.shuffle(users)
    train_group = {u: group[u] for u in users[:1000]}
    valid_group = {u: group[u] for u in users[1000:]}
    train_loader = DataLoader(SAKTDataset(train_group, N_SKILL), batch_size=64, shuffle=True)
    valid_loader = DataLoader(SAKTDataset(valid_group, N_SKILL), batch_size=128, shuffle=False)
    model = SAKTModel(N_SKILL, max_seq=MAX_SEQ, embed_dim=64)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    criterion = nn.BCEWithLogitsLoss()
    for epoch in range(8):
        loss, acc = train_epoch(model, train_loader, optimizer, criterion)
        auc, valid_acc = valid_epoch(model, valid_loader)
        print(f"epoch {epoch} - loss {loss:.3f} acc {acc:.3f} - valid auc {auc:.3f} acc {valid_acc:.3f}")


if __name__ == "__main__":
    main()
