"""BERT4Rec: sequential recommendation with a bidirectional Cloze objective (Sun et al., CIKM 2019).

Written in the layout of jaywonchung/BERT4Rec-VAE-Pytorch (`BERTEmbedding`, `Attention`,
`MultiHeadedAttention`, `SublayerConnection`, `TransformerBlock`, `BERT`, `BERTModel`, the
train dataset's 80/10/10 masking with `mask_prob`, the eval dataset appending the mask token,
Recall@k / NDCG@k over sampled candidates), on synthetic user histories.

Source: TransformerLensOrg/TransformerLens PR #366 (conventions.md §3 item 20); conventions.md
§1 (direction cheat-sheet) and §5 item 5; seed masked_fill_inplace.txt (例子).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data as data_utils


@dataclass
class BertArgs:
    num_items: int = 200
    bert_max_len: int = 24
    bert_num_blocks: int = 2
    bert_num_heads: int = 2
    bert_hidden_units: int = 32
    bert_dropout: float = 0.1
    bert_mask_prob: float = 0.2
    model_init_seed: int = 0
    metric_ks: tuple[int, ...] = (1, 5, 10)


class TokenEmbedding(nn.Embedding):
    def __init__(self, vocab_size, embed_size=512):
        super().__init__(vocab_size, embed_size, padding_idx=0)


class PositionalEmbedding(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        self.pe = nn.Embedding(max_len, d_model)

    def forward(self, x):
        batch_size = x.size(0)
        return self.pe.weight.unsqueeze(0).repeat(batch_size, 1, 1)


class BERTEmbedding(nn.Module):
    def __init__(self, vocab_size, embed_size, max_len, dropout=0.1):
        super().__init__()
        self.token = TokenEmbedding(vocab_size=vocab_size, embed_size=embed_size)
        self.position = PositionalEmbedding(max_len=max_len, d_model=embed_size)
        self.dropout = nn.Dropout(p=dropout)
        self.embed_size = embed_size

    def forward(self, sequence):
        x = self.token(sequence) + self.position(sequence)
        return self.dropout(x)


class Attention(nn.Module):
    def forward(self, query, key, value, mask=None, dropout=None):
        scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(query.size(-1))
        if mask is not None:
            scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)
        p_attn = F.softmax(scores, dim=-1)
        if dropout is not None:
            p_attn = dropout(p_attn)
        return torch.matmul(p_attn, value), p_attn


class MultiHeadedAttention(nn.Module):
    def __init__(self, h, d_model, dropout=0.1):
        super().__init__()
        assert d_model % h == 0
        self.d_k = d_model // h
        self.h = h
        self.linear_layers = nn.ModuleList([nn.Linear(d_model, d_model) for _ in range(3)])
        self.output_linear = nn.Linear(d_model, d_model)
        self.attention = Attention()
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, query, key, value, mask=None):
        batch_size = query.size(0)
        query, key, value = [
            lin(x).view(batch_size, -1, self.h, self.d_k).transpose(1, 2)
            for lin, x in zip(self.linear_layers, (query, key, value), strict=True)
        ]
        x, _ = self.attention(query, key, value, mask=mask, dropout=self.dropout)
        x = x.transpose(1, 2).contiguous().view(batch_size, -1, self.h * self.d_k)
        return self.output_linear(x)


class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)
        self.activation = nn.GELU()

    def forward(self, x):
        return self.w_2(self.dropout(self.activation(self.w_1(x))))


class SublayerConnection(nn.Module):
    def __init__(self, size, dropout):
        super().__init__()
        self.norm = nn.LayerNorm(size)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, sublayer):
        return x + self.dropout(sublayer(self.norm(x)))


class TransformerBlock(nn.Module):
    def __init__(self, hidden, attn_heads, feed_forward_hidden, dropout):
        super().__init__()
        self.attention = MultiHeadedAttention(h=attn_heads, d_model=hidden, dropout=dropout)
        self.feed_forward = PositionwiseFeedForward(hidden, feed_forward_hidden, dropout)
        self.input_sublayer = SublayerConnection(size=hidden, dropout=dropout)
        self.output_sublayer = SublayerConnection(size=hidden, dropout=dropout)
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x, mask):
        x = self.input_sublayer(x, lambda _x: self.attention.forward(_x, _x, _x, mask=mask))
        x = self.output_sublayer(x, self.feed_forward)
        return self.dropout(x)


class BERT(nn.Module):
    def __init__(self, args: BertArgs):
        super().__init__()
        torch.manual_seed(args.model_init_seed)
        vocab_size = args.num_items + 2
        self.hidden = args.bert_hidden_units
        self.embedding = BERTEmbedding(
            vocab_size, self.hidden, args.bert_max_len, args.bert_dropout
        )
        self.transformer_blocks = nn.ModuleList(
            TransformerBlock(self.hidden, args.bert_num_heads, self.hidden * 4, args.bert_dropout)
            for _ in range(args.bert_num_blocks)
        )

    def forward(self, x):
        mask = (x > 0).unsqueeze(1).repeat(1, x.size(1), 1).unsqueeze(1)
        x = self.embedding(x)
        for transformer in self.transformer_blocks:
            x = transformer.forward(x, mask)
        return x


class BERTModel(nn.Module):
    def __init__(self, args: BertArgs):
        super().__init__()
        self.bert = BERT(args)
        self.out = nn.Linear(self.bert.hidden, args.num_items + 1)

    def forward(self, x):
        x = self.bert(x)
        return self.out(x)


class BertTrainDataset(data_utils.Dataset):
    def __init__(self, u2seq, args: BertArgs, rng):
        self.u2seq = u2seq
        self.users = sorted(self.u2seq.keys())
        self.max_len = args.bert_max_len
        self.mask_prob = args.bert_mask_prob
        self.num_items = args.num_items
        self.mask_token = args.num_items + 1
        self.rng = rng

    def __len__(self):
        return len(self.users)

    def __getitem__(self, index):
        seq = self.u2seq[self.users[index]]
        tokens, labels = [], []
        for s in seq:
            prob = self.rng.random()
            if prob < self.mask_prob:
                prob /= self.mask_prob
                if prob < 0.8:
                    tokens.append(self.mask_token)
                elif prob < 0.9:
                    tokens.append(self.rng.randint(1, self.num_items))
                else:
                    tokens.append(s)
                labels.append(s)
            else:
                tokens.append(s)
                labels.append(0)
        tokens, labels = tokens[-self.max_len :], labels[-self.max_len :]
        mask_len = self.max_len - len(tokens)
        tokens = [0] * mask_len + tokens
        labels = [0] * mask_len + labels
        return torch.LongTensor(tokens), torch.LongTensor(labels)


class BertEvalDataset(data_utils.Dataset):
    def __init__(self, u2seq, u2answer, max_len, mask_token, negative_samples):
        self.u2seq, self.u2answer = u2seq, u2answer
        self.users = sorted(self.u2seq.keys())
        self.max_len, self.mask_token = max_len, mask_token
        self.negative_samples = negative_samples

    def __len__(self):
        return len(self.users)

    def __getitem__(self, index):
        user = self.users[index]
        answer, negs = self.u2answer[user], self.negative_samples[user]
        candidates = answer + negs
        labels = [1] * len(answer) + [0] * len(negs)
        seq = (self.u2seq[user] + [self.mask_token])[-self.max_len :]
        seq = [0] * (self.max_len - len(seq)) + seq
        return torch.LongTensor(seq), torch.LongTensor(candidates), torch.LongTensor(labels)


def recalls_and_ndcgs_for_ks(scores, labels, ks):
    metrics = {}
    answer_count = labels.sum(1)
    rank = (-scores).argsort(dim=1)
    for k in sorted(ks, reverse=True):
        hits = labels.gather(1, rank[:, :k]).float()
        metrics[f"Recall@{k}"] = (hits.sum(1) / torch.clamp(answer_count, max=k).float()).mean()
        position = torch.arange(2, 2 + k).float()
        dcg = (hits / torch.log2(position)).sum(1)
        idcg = torch.tensor(
            [(1.0 / torch.log2(position[: min(int(n), k)])).sum() for n in answer_count]
        )
        metrics[f"NDCG@{k}"] = (dcg / idcg).mean()
    return {key: value.item() for key, value in metrics.items()}


def synthetic_histories(num_users, num_items, seed=3):
    rng = random.Random(seed)
    train, answers, negatives = {}, {}, {}
    for user in range(1, num_users + 1):
        start, length = rng.randint(1, num_items), rng.randint(4, 40)
        seq = [((start - 1 + k) % num_items) + 1 for k in range(length)]
        train[user], answers[user] = seq[:-1], [seq[-1]]
        negatives[user] = rng.sample([i for i in range(1, num_items + 1) if i not in seq], 50)
    return train, answers, negatives


def main():
    args = BertArgs()
    train, answers, negatives = synthetic_histories(160, args.num_items)
    model = BERTModel(args)
    train_loader = data_utils.DataLoader(
        BertTrainDataset(train, args, random.Random(1)), batch_size=32, shuffle=True
    )
    ce = nn.CrossEntropyLoss(ignore_index=0)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    model.train()
    for epoch in range(6):
        for seqs, labels in train_loader:
            logits = model(seqs)
            loss = ce(logits.view(-1, logits.size(-1)), labels.view(-1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")

    eval_loader = data_utils.DataLoader(
        BertEvalDataset(train, answers, args.bert_max_len, args.num_items + 1, negatives),
        batch_size=64,
    )
    model.eval()
    with torch.no_grad():
        for seqs, candidates, labels in eval_loader:
            scores = model(seqs)[:, -1, :]
            scores = scores.gather(1, candidates)
            metrics = recalls_and_ndcgs_for_ks(scores, labels, args.metric_ks)
            print({k: round(v, 3) for k, v in metrics.items()})
            break


if __name__ == "__main__":
    main()
