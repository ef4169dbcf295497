"""BERT4Rec cloze-task recommender in the style of jaywonchung/BERT4Rec-VAE-Pytorch.

Item ids run from 1 to ``num_items``, 0 is padding and ``num_items + 1`` is the
[MASK] item. The collate function returns a Hugging Face-shaped batch
(``input_ids``, ``attention_mask``, ``labels``) that the trainer hands to the model
with ``model(**batch)``; evaluation appends [MASK] to the history and ranks
candidates from the logits at that position.

Source: seed self_attention_mask_guide.txt §2, seed masked_fill_inplace.txt (作用), conventions.md §1 (HF 2-D attention_mask row, direction cheat-sheet)
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class BertConfig:
    num_items: int = 300
    max_len: int = 24
    hidden: int = 32
    n_layers: int = 2
    heads: int = 4
    dropout: float = 0.1
    mask_prob: float = 0.2

    @property
    def mask_token(self) -> int:
        return self.num_items + 1


class GELU(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * torch.pow(x, 3))))


class Attention(nn.Module):
    def forward(self, query, key, value, mask=None, dropout=None):
        scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(query.size(-1))
        if mask is not None:
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
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
            layer(x).view(batch_size, -1, self.h, self.d_k).transpose(1, 2)
            for layer, x in zip(self.linear_layers, (query, key, value))
        ]
        x, _ = self.attention(query, key, value, mask=mask, dropout=self.dropout)
        x = x.transpose(1, 2).contiguous().view(batch_size, -1, self.h * self.d_k)
        return self.output_linear(x)


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
        self.feed_forward = nn.Sequential(
            nn.Linear(hidden, feed_forward_hidden), GELU(), nn.Dropout(dropout), nn.Linear(feed_forward_hidden, hidden)
        )
        self.input_sublayer = SublayerConnection(size=hidden, dropout=dropout)
        self.output_sublayer = SublayerConnection(size=hidden, dropout=dropout)
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x, mask):
        x = self.input_sublayer(x, lambda _x: self.attention.forward(_x, _x, _x, mask=mask))
        x = self.output_sublayer(x, self.feed_forward)
        return self.dropout(x)


class BERT4Rec(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.cfg = cfg
        self.token = nn.Embedding(cfg.num_items + 2, cfg.hidden, padding_idx=0)
        self.position = nn.Embedding(cfg.max_len, cfg.hidden)
        self.emb_dropout = nn.Dropout(cfg.dropout)
        self.transformer_blocks = nn.ModuleList(
            [TransformerBlock(cfg.hidden, cfg.heads, cfg.hidden * 4, cfg.dropout) for _ in range(cfg.n_layers)]
        )
        self.out = nn.Linear(cfg.hidden, cfg.num_items + 1)

    def forward(self, input_ids, attention_mask=None, labels=None):
        if attention_mask is None:
            attention_mask = (input_ids > 0).long()
        keep = attention_mask[:, None, None, :].bool()
        positions = torch.arange(input_ids.size(1), device=input_ids.device)[None]
        x = self.emb_dropout(self.token(input_ids) + self.position(positions))
        for transformer in self.transformer_blocks:
            x = transformer.forward(x, keep)
        logits = self.out(x)
        if labels is None:
            return {"logits": logits}
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1), ignore_index=0)
        return {"logits": logits, "loss": loss}


def cloze_collate(histories, cfg: BertConfig, rng: random.Random):
    input_ids, labels = [], []
    for seq in histories:
        seq = seq[-cfg.max_len:]
        tokens, target = [], []
        for s in seq:
            if rng.random() < cfg.mask_prob:
                tokens.append(cfg.mask_token)
                target.append(s)
            else:
                tokens.append(s)
                target.append(0)
        pad = cfg.max_len - len(tokens)
        input_ids.append([0] * pad + tokens)
        labels.append([0] * pad + target)
    input_ids = torch.tensor(input_ids, dtype=torch.long)
    return {
        "input_ids": input_ids,
        "attention_mask": (input_ids != 0).long(),
        "labels": torch.tensor(labels, dtype=torch.long),
    }


def eval_collate(histories, cfg: BertConfig):
    input_ids = []
    for seq in histories:
        seq = (list(seq) + [cfg.mask_token])[-cfg.max_len:]
        input_ids.append([0] * (cfg.max_len - len(seq)) + seq)
    input_ids = torch.tensor(input_ids, dtype=torch.long)
    return {"input_ids": input_ids, "attention_mask": (input_ids != 0).long()}


@torch.no_grad()
def recommend(model, histories, cfg: BertConfig, k=10):
    model.eval()
    batch = eval_collate(histories, cfg)
    logits = model(**batch)["logits"][:, -1, :]
    logits[:, 0] = float("-inf")
    return logits.topk(k, dim=-1).indices


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = random.Random(0)
    cfg = BertConfig()
    histories = []
    for _ in range(64):
        start = rng.randint(1, cfg.num_items - 30)
        histories.append([start + (i * 3) % 30 for i in range(rng.randint(3, cfg.max_len))])

    model = BERT4Rec(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(40):
        model.train()
        batch = cloze_collate(rng.sample(histories, 16), cfg, rng)
        out = model(**batch)
        opt.zero_grad()
        out["loss"].backward()
        opt.step()
    print("loss", round(out["loss"].item(), 4))
    print("top-5 for user 0:", recommend(model, histories[:1], cfg, k=5).tolist())

    model.eval()
    with torch.no_grad():
        short = histories[0][:5]
        batch = eval_collate([short, histories[1]], cfg)
        alone = model(**eval_collate([short], cfg))["logits"][:, -1]
        both = model(**batch)["logits"][:1, -1]
        junk = dict(batch)
        junk["input_ids"] = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, 7)
        moved = model(**junk)["logits"][:1, -1]
        print("batched vs alone:", (alone - both).abs().max().item(), "padding ids changed:", (moved - both).abs().max().item())
