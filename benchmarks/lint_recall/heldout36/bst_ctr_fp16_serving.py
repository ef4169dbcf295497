"""Behavior Sequence Transformer (BST) for click-through-rate prediction, served in float16.

Written in the layout of reczoo/FuxiCTR (model_zoo/BST: `get_mask` returning the padding mask
and the (batch * heads, L, L) `attn_mask` for `nn.MultiheadAttention` with the diagonal kept,
`BehaviorTransformer` with learned position features concatenated to the item and category
embeddings, `TransformerBlock`, the target item appended to the behaviour sequence,
`sequence_pooling` with `seq_pooling_type`, an MLP over the user, target and pooled
behaviour), with a target-attention pooling in the style of DIN over the behaviour outputs;
trained in float32 on synthetic click logs and copied to float16 for serving.

Source: huggingface/lerobot PR #710 and NVIDIA/apex#1052 (conventions.md §3 items 18 and 19);
conventions.md §2.3; tools.md §0 P5.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn


@dataclass
class BSTConfig:
    num_users: int = 300
    num_items: int = 400
    num_cates: int = 20
    embedding_dim: int = 16
    max_len: int = 10
    num_heads: int = 2
    stacked_transformer_layers: int = 1
    position_dim: int = 4
    dnn_hidden_units: tuple[int, ...] = (64, 32)
    seq_pooling_type: str = "target_attention"
    use_causal_mask: bool = False


class TransformerBlock(nn.Module):
    def __init__(self, model_dim=64, ffn_dim=64, num_heads=8, attn_dropout=0.0, net_dropout=0.0):
        super().__init__()
        self.attention = nn.MultiheadAttention(
            model_dim, num_heads=num_heads, dropout=attn_dropout, batch_first=True
        )
        self.ffn = nn.Sequential(
            nn.Linear(model_dim, ffn_dim), nn.LeakyReLU(), nn.Linear(ffn_dim, model_dim)
        )
        self.dropout1, self.dropout2 = nn.Dropout(net_dropout), nn.Dropout(net_dropout)
        self.layer_norm1, self.layer_norm2 = nn.LayerNorm(model_dim), nn.LayerNorm(model_dim)

    def forward(self, x, attn_mask=None):
        attn, _ = self.attention(x, x, x, attn_mask=attn_mask)
        s = self.layer_norm1(self.dropout1(attn) + x)
        return self.layer_norm2(self.dropout2(self.ffn(s)) + s)


class BehaviorTransformer(nn.Module):
    def __init__(self, seq_len, model_dim, num_heads, stacked_transformer_layers, position_dim):
        super().__init__()
        self.position_emb = nn.Parameter(torch.empty(seq_len, position_dim))
        nn.init.normal_(self.position_emb, std=0.02)
        self.transformer_blocks = nn.ModuleList(
            TransformerBlock(model_dim + position_dim, model_dim + position_dim, num_heads)
            for _ in range(stacked_transformer_layers)
        )

    def forward(self, x, attn_mask=None):
        x = torch.cat([x, self.position_emb.unsqueeze(0).expand(x.size(0), -1, -1)], dim=-1)
        for block in self.transformer_blocks:
            x = block(x, attn_mask=attn_mask)
        return x


class BST(nn.Module):
    def __init__(self, cfg: BSTConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.embedding_dim
        self.user_emb = nn.Embedding(cfg.num_users + 1, d)
        self.item_emb = nn.Embedding(cfg.num_items + 1, d, padding_idx=0)
        self.cate_emb = nn.Embedding(cfg.num_cates + 1, d, padding_idx=0)
        self.num_heads = cfg.num_heads
        self.use_causal_mask = cfg.use_causal_mask
        self.seq_pooling_type = cfg.seq_pooling_type
        self.transformer_encoder = BehaviorTransformer(
            cfg.max_len + 1, 2 * d, cfg.num_heads, cfg.stacked_transformer_layers, cfg.position_dim
        )
        model_dim = 2 * d + cfg.position_dim
        layers, in_dim = [], 3 * d + model_dim
        for units in cfg.dnn_hidden_units:
            layers += [nn.Linear(in_dim, units), nn.ReLU()]
            in_dim = units
        self.dnn = nn.Sequential(*layers, nn.Linear(in_dim, 1))

    def get_mask(self, x):
        padding_mask = x == 0
        padding_mask = torch.cat(
            [padding_mask, torch.zeros(x.size(0), 1, dtype=torch.bool, device=x.device)], dim=-1
        )
        seq_len = padding_mask.size(1)
        attn_mask = padding_mask.unsqueeze(1).repeat(1, seq_len * self.num_heads, 1)
        attn_mask = attn_mask.view(-1, seq_len, seq_len)
        diag_zeros = ~torch.eye(seq_len, device=x.device).bool().unsqueeze(0).expand_as(attn_mask)
        attn_mask = attn_mask & diag_zeros
        if self.use_causal_mask:
            causal_mask = torch.triu(torch.ones(seq_len, seq_len, device=x.device), 1).bool()
            attn_mask = attn_mask | causal_mask.unsqueeze(0).expand_as(attn_mask)
        return padding_mask, attn_mask

    def sequence_pooling(self, transformer_out, mask):
        if self.seq_pooling_type == "mean":
            keep = (1 - mask.float()).unsqueeze(-1)
            return (transformer_out * keep).sum(dim=1) / (keep.sum(dim=1) + 1.0e-12)
        if self.seq_pooling_type == "target":
            return transformer_out[:, -1, :]
        query, keys = transformer_out[:, -1:, :], transformer_out[:, :-1, :]
        scores = torch.bmm(query, keys.transpose(1, 2)).squeeze(1) / math.sqrt(keys.size(-1))
        scores = torch.where(mask[:, :-1], torch.finfo(torch.float32).min, scores)  # expect: MC517 bst
        weights = scores.softmax(dim=-1)
        return torch.bmm(weights.unsqueeze(1), keys).squeeze(1)

    def forward(self, inputs):
        target_emb = torch.cat(
            [self.item_emb(inputs["item_id"]), self.cate_emb(inputs["cate_id"])], dim=-1
        )
        sequence_emb = torch.cat(
            [self.item_emb(inputs["click_history"]), self.cate_emb(inputs["cate_history"])], dim=-1
        )
        padding_mask, attn_mask = self.get_mask(inputs["click_history"])
        concat_seq_emb = torch.cat([sequence_emb, target_emb.unsqueeze(1)], dim=1)
        transformer_out = self.transformer_encoder(concat_seq_emb, attn_mask)
        pooling_emb = self.sequence_pooling(transformer_out, padding_mask)
        feature_emb = torch.cat([self.user_emb(inputs["user_id"]), target_emb, pooling_emb], dim=-1)
        return torch.sigmoid(self.dnn(feature_emb).squeeze(-1))


def synthetic_click_log(cfg: BSTConfig, n, rng):
    item_cate = rng.integers(1, cfg.num_cates + 1, cfg.num_items + 1)
    item_cate[0] = 0
    favourite = rng.integers(1, cfg.num_cates + 1, cfg.num_users + 1)
    by_cate = {c: np.flatnonzero(item_cate == c) for c in range(1, cfg.num_cates + 1)}
    rows = {
        k: [] for k in ("user_id", "item_id", "cate_id", "click_history", "cate_history", "label")
    }
    for _ in range(n):
        user = int(rng.integers(1, cfg.num_users + 1))
        length = 0 if rng.random() < 0.1 else int(rng.integers(1, cfg.max_len + 1))
        history = rng.choice(by_cate[favourite[user]], size=length).tolist()
        history = [0] * (cfg.max_len - length) + history
        item = int(rng.integers(1, cfg.num_items + 1))
        label = float(item_cate[item] == favourite[user] or rng.random() < 0.1)
        for key, value in zip(
            rows,
            (user, item, item_cate[item], history, item_cate[history].tolist(), label),
            strict=True,
        ):
            rows[key].append(value)
    return {
        k: torch.tensor(v, dtype=torch.float32 if k == "label" else torch.long)
        for k, v in rows.items()
    }


def auc(scores, labels):
    order = scores.argsort()
    ranks = torch.empty_like(order, dtype=torch.float32)
    ranks[order] = torch.arange(1, len(scores) + 1, dtype=torch.float32)
    pos = labels == 1
    n_pos, n_neg = pos.sum().item(), (~pos).sum().item()
    return ((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)).item()


def main():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    cfg = BSTConfig()
    data = synthetic_click_log(cfg, 6000, rng)
    model = BST(cfg)
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    loss_fn = nn.BCELoss()
    for epoch in range(4):
        for start in range(0, 5000, 250):
            batch = {k: v[start : start + 250] for k, v in data.items()}
            loss = loss_fn(model(batch), batch["label"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} logloss {loss.item():.4f}")
    model.eval()
    test = {k: v[5000:] for k, v in data.items()}
    with torch.no_grad():
        fp32 = model(test)
        serving = copy.deepcopy(model).half()
        fp16 = serving(test).float()
    cold = (test["click_history"] == 0).all(dim=1)
    print(
        f"test AUC {auc(fp32, test['label']):.4f}, "
        f"float16 AUC {auc(fp16.nan_to_num(0.5), test['label']):.4f}"
    )
    print(f"float16 NaN scores: {int(fp16.isnan().sum())} ({int(cold.sum())} cold-start users)")
    print(f"max |float16 - float32| on warm users {(fp16 - fp32)[~cold].abs().max():.2e}")


if __name__ == "__main__":
    main()
