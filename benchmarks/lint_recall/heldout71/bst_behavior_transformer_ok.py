"""Behavior Sequence Transformer (BST) for Taobao-style CTR prediction.

The target item is appended to the user's behaviour sequence, every position gets a
"time since click" bucket instead of a sine position, one transformer block runs over the
sequence, and the flattened output joins the other features in an MLP. Sequences are
left-padded with item 0 so the target always sits in the last slot.

Source: pytorch/pytorch#103963 (conventions.md section 3 item 6); conventions.md section 2.9
(a bool mask added to the scores).
"""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class BSTConfig:
    num_items: int = 60
    num_cates: int = 8
    num_users: int = 10
    num_time_buckets: int = 12
    d_model: int = 16
    n_heads: int = 4
    d_ff: int = 32
    seq_len: int = 7
    mlp_dims: tuple = (64, 32)
    dropout: float = 0.1
    pad_id: int = 0


class BSTSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.h = cfg.n_heads
        self.d_k = cfg.d_model // cfg.n_heads
        self.w_qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.w_o = nn.Linear(cfg.d_model, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, pad_mask):
        b, n, d = x.shape
        q, k, v = self.w_qkv(x).view(b, n, 3, self.h, self.d_k).permute(2, 0, 3, 1, 4)
        scores = torch.matmul(q, k.transpose(-2, -1)) / self.d_k ** 0.5
        scores = scores.masked_fill(pad_mask, float("-inf"))
        attn = self.drop(F.softmax(scores, dim=-1))
        out = torch.matmul(attn, v).transpose(1, 2).reshape(b, n, d)
        return self.w_o(out), attn


class TransformerBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attn = BSTSelfAttention(cfg)
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.ffn = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_ff), nn.LeakyReLU(), nn.Linear(cfg.d_ff, cfg.d_model))
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, pad_mask):
        a, weights = self.attn(x, pad_mask)
        x = self.ln1(x + self.drop(a))
        x = self.ln2(x + self.drop(self.ffn(x)))
        return x, weights


def time_buckets(click_ts, request_ts, num_buckets):
    gap = (request_ts[:, None] - click_ts).clamp(min=1).float()
    return torch.log2(gap).long().clamp(max=num_buckets - 1)


class BST(nn.Module):
    def __init__(self, cfg: BSTConfig):
        super().__init__()
        self.cfg = cfg
        half = cfg.d_model // 2
        self.item_emb = nn.Embedding(cfg.num_items, half, padding_idx=cfg.pad_id)
        self.cate_emb = nn.Embedding(cfg.num_cates, half, padding_idx=cfg.pad_id)
        self.time_emb = nn.Embedding(cfg.num_time_buckets, cfg.d_model)
        self.user_emb = nn.Embedding(cfg.num_users, cfg.d_model)
        self.block = TransformerBlock(cfg)
        dims = [cfg.d_model * (cfg.seq_len + 1) + cfg.d_model, *cfg.mlp_dims]
        layers = []
        for i in range(len(dims) - 1):
            layers += [nn.Linear(dims[i], dims[i + 1]), nn.LeakyReLU(), nn.Dropout(cfg.dropout)]
        layers.append(nn.Linear(dims[-1], 1))
        self.mlp = nn.Sequential(*layers)

    def build_sequence(self, batch):
        items = torch.cat([batch["hist_items"], batch["target_item"][:, None]], dim=1)
        cates = torch.cat([batch["hist_cates"], batch["target_cate"][:, None]], dim=1)
        ts = torch.cat([batch["hist_ts"], batch["request_ts"][:, None]], dim=1)
        buckets = time_buckets(ts, batch["request_ts"], self.cfg.num_time_buckets)
        x = torch.cat([self.item_emb(items), self.cate_emb(cates)], dim=-1) + self.time_emb(buckets)
        return x, items

    def forward(self, batch):
        x, items = self.build_sequence(batch)
        pad_mask = (items == self.cfg.pad_id)[:, None, None, :]
        h, weights = self.block(x, pad_mask)
        keep = (items != self.cfg.pad_id).unsqueeze(-1)
        h = h * keep
        feats = torch.cat([h.flatten(1), self.user_emb(batch["user"])], dim=-1)
        return self.mlp(feats).squeeze(-1), weights


def synthetic_batch(cfg: BSTConfig, batch_size=6, seed=None):
    g = torch.Generator().manual_seed(seed) if seed is not None else None
    lengths = torch.randint(1, cfg.seq_len + 1, (batch_size,), generator=g)
    lengths[0] = 2
    slots = torch.arange(cfg.seq_len)[None, :]
    real = slots >= (cfg.seq_len - lengths[:, None])
    hist = torch.randint(1, cfg.num_items, (batch_size, cfg.seq_len), generator=g) * real
    request_ts = torch.full((batch_size,), 10_000)
    gaps = torch.randint(1, 3000, (batch_size, cfg.seq_len), generator=g).sort(dim=1, descending=True).values
    target = torch.randint(1, cfg.num_items, (batch_size,), generator=g)
    return {
        "user": torch.randint(0, cfg.num_users, (batch_size,), generator=g),
        "hist_items": hist,
        "hist_cates": torch.where(real, hist % (cfg.num_cates - 1) + 1, 0),
        "hist_ts": request_ts[:, None] - gaps,
        "target_item": target,
        "target_cate": target % (cfg.num_cates - 1) + 1,
        "request_ts": request_ts,
        "label": torch.randint(0, 2, (batch_size,), generator=g).float(),
    }


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = BSTConfig()
    model = BST(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
    batch = synthetic_batch(cfg, seed=1)
    for step in range(4):
        logits, _ = model(batch)
        loss = F.binary_cross_entropy_with_logits(logits, batch["label"])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        _, w = model(batch)
    pad_cols = (torch.cat([batch["hist_items"], batch["target_item"][:, None]], 1) == 0)
    print("loss %.4f  weight on padded items %.4f" % (loss.item(), (w.mean(1) * pad_cols[:, None, :]).sum().item()))
