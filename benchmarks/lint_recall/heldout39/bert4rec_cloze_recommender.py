"""BERT4Rec-style sequential recommender trained with the cloze objective.

Laid out after FeiSun/BERT4Rec and its PyTorch port jaywonchung/BERT4Rec-VAE-Pytorch: cloze
masking of item histories with ``mask_prob``, ``BERTEmbedding`` (item + learned position),
``MultiHeadedAttention`` on ``F.scaled_dot_product_attention``, ``SublayerConnection`` /
``PositionwiseFeedForward`` / ``TransformerBlock``, ``BERT`` over left-padded histories and
HR@10 / NDCG@10 of the held-out next item against 100 sampled negatives.

Source: rasbt/LLMs-from-scratch#1061 (conventions.md §3 item 14), conventions.md §1 (SDPA row,
direction cheat-sheet) and §5 item 1, seed self_attention_mask_guide.txt §2.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class BertRecConfig:
    num_items: int = 300
    max_len: int = 20
    hidden: int = 64
    heads: int = 2
    n_layers: int = 2
    dropout: float = 0.1
    mask_prob: float = 0.2
    batch_size: int = 64

    @property
    def mask_token(self) -> int:
        return self.num_items + 1


class BERTEmbedding(nn.Module):
    def __init__(self, cfg: BertRecConfig):
        super().__init__()
        self.token = nn.Embedding(cfg.num_items + 2, cfg.hidden, padding_idx=0)
        self.position = nn.Embedding(cfg.max_len, cfg.hidden)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, sequence: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(sequence.shape[1], device=sequence.device)
        return self.dropout(self.token(sequence) + self.position(positions))


class MultiHeadedAttention(nn.Module):
    def __init__(self, h: int, d_model: int, dropout: float = 0.1):
        super().__init__()
        self.d_k, self.h, self.dropout = d_model // h, h, dropout
        self.linear_layers = nn.ModuleList(nn.Linear(d_model, d_model) for _ in range(3))
        self.output_linear = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask: torch.Tensor | None = None) -> torch.Tensor:
        batch_size = query.size(0)
        query, key, value = (
            layer(x).view(batch_size, -1, self.h, self.d_k).transpose(1, 2)
            for layer, x in zip(self.linear_layers, (query, key, value))
        )
        x = F.scaled_dot_product_attention(
            query, key, value, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0
        )
        return self.output_linear(
            x.transpose(1, 2).contiguous().view(batch_size, -1, self.h * self.d_k)
        )


class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.1):
        super().__init__()
        self.w_1, self.w_2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_2(self.dropout(F.gelu(self.w_1(x))))


class SublayerConnection(nn.Module):
    def __init__(self, size: int, dropout: float):
        super().__init__()
        self.norm, self.dropout = nn.LayerNorm(size), nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, sublayer) -> torch.Tensor:
        return x + self.dropout(sublayer(self.norm(x)))


class TransformerBlock(nn.Module):
    def __init__(self, hidden: int, attn_heads: int, feed_forward_hidden: int, dropout: float):
        super().__init__()
        self.attention = MultiHeadedAttention(h=attn_heads, d_model=hidden, dropout=dropout)
        self.feed_forward = PositionwiseFeedForward(hidden, feed_forward_hidden, dropout)
        self.input_sublayer = SublayerConnection(hidden, dropout)
        self.output_sublayer = SublayerConnection(hidden, dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.input_sublayer(x, lambda _x: self.attention(_x, _x, _x, mask=mask))
        return self.dropout(self.output_sublayer(x, self.feed_forward))


class BERT(nn.Module):
    def __init__(self, cfg: BertRecConfig):
        super().__init__()
        self.embedding = BERTEmbedding(cfg)
        self.transformer_blocks = nn.ModuleList(
            TransformerBlock(cfg.hidden, cfg.heads, cfg.hidden * 4, cfg.dropout)
            for _ in range(cfg.n_layers)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        padding = x == 0
        x = self.embedding(x)
        mask = padding[:, None, None, :]  # expect: MC511 bert4rec
        for transformer in self.transformer_blocks:
            x = transformer(x, mask)
        return x


class BERTModel(nn.Module):
    def __init__(self, cfg: BertRecConfig):
        super().__init__()
        self.bert = BERT(cfg)
        self.out = nn.Linear(cfg.hidden, cfg.num_items + 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.bert(x))


def user_history(rng: random.Random, cfg: BertRecConfig) -> list[int]:
    items = [rng.randint(1, cfg.num_items)]
    for _ in range(rng.randint(4, cfg.max_len + 5)):
        prev = items[-1]
        items.append(
            (prev * 7 + 3) % cfg.num_items + 1
            if rng.random() < 0.8
            else rng.randint(1, cfg.num_items)
        )
    return items


def left_pad(seqs: list[list[int]], max_len: int) -> torch.Tensor:
    return torch.tensor([[0] * (max_len - len(s)) + s for s in (s[-max_len:] for s in seqs)])


def cloze_batch(rng: random.Random, histories: list[list[int]], cfg: BertRecConfig):
    tokens, labels = [], []
    for items in histories:
        items = items[:-1][-cfg.max_len :]
        masked = [rng.random() < cfg.mask_prob for _ in items]
        masked[-1] = masked[-1] or not any(masked)
        tokens.append([cfg.mask_token if m else s for s, m in zip(items, masked)])
        labels.append([s if m else 0 for s, m in zip(items, masked)])
    return left_pad(tokens, cfg.max_len), left_pad(labels, cfg.max_len)


@torch.no_grad()
def evaluate(model: BERTModel, rng: random.Random, histories: list[list[int]], cfg: BertRecConfig):
    seqs = left_pad([h[:-1] + [cfg.mask_token] for h in histories], cfg.max_len)
    scores = model(seqs)[:, -1]
    hits, ndcg = 0.0, 0.0
    for row, history in zip(scores, histories):
        negatives = rng.sample([i for i in range(1, cfg.num_items + 1) if i not in history], 100)
        candidates = torch.tensor([history[-1], *negatives])
        rank = (row[candidates] > row[candidates[0]]).sum().item()
        if rank < 10:
            hits, ndcg = hits + 1, ndcg + 1 / math.log2(rank + 2)
    return hits / len(histories), ndcg / len(histories)


def main() -> None:
    torch.manual_seed(0)
    rng, cfg = random.Random(0), BertRecConfig()
    users = [user_history(rng, cfg) for _ in range(2000)]
    model = BERTModel(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for epoch in range(8):
        rng.shuffle(users)
        for start in range(0, len(users), cfg.batch_size):
            tokens, labels = cloze_batch(rng, users[start : start + cfg.batch_size], cfg)
            logits = model(tokens)
            loss = F.cross_entropy(
                logits.view(-1, logits.shape[-1]), labels.view(-1), ignore_index=0
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"epoch {epoch} loss {loss.item():.3f}")
    model.eval()
    test_users = [user_history(rng, cfg) for _ in range(500)]
    hr, ndcg = evaluate(model, rng, test_users, cfg)
    print(f"HR@10 {hr:.3f} NDCG@10 {ndcg:.3f}")


if __name__ == "__main__":
    main()
