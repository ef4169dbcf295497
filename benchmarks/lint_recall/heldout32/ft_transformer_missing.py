"""FT-Transformer for tabular data with missing values, in the style of yandex-research/rtdl.

Every numerical feature becomes a token ``x_j * W_j + b_j`` and every categorical
feature an embedding (with per-feature offsets into one table); a [CLS] token is
appended and the prediction is read from it after pre-norm transformer blocks
with ReGLU feed-forward layers. Missing numerical values arrive as NaN and
missing categories as -1; their tokens are kept out of attention.

Source: conventions.md §1 (HF 4-D masks row) and §2.9, seed self_attention_mask_guide.txt §3 (常见误区) and §7 Q3
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class FTConfig:
    n_num_features: int = 6
    cat_cardinalities: list = field(default_factory=lambda: [4, 7, 3])
    d_token: int = 32
    n_blocks: int = 2
    attention_n_heads: int = 4
    attention_dropout: float = 0.1
    ffn_d_hidden: int = 48
    ffn_dropout: float = 0.1
    residual_dropout: float = 0.0
    d_out: int = 1


class FeatureTokenizer(nn.Module):
    def __init__(self, n_num_features, cat_cardinalities, d_token):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_num_features, d_token))
        self.bias = nn.Parameter(torch.empty(n_num_features, d_token))
        self.register_buffer("category_offsets", torch.tensor([0] + cat_cardinalities[:-1]).cumsum(0))
        self.embeddings = nn.Embedding(sum(cat_cardinalities), d_token)
        self.cat_bias = nn.Parameter(torch.empty(len(cat_cardinalities), d_token))
        for p in (self.weight, self.bias, self.cat_bias):
            nn.init.uniform_(p, -1 / math.sqrt(d_token), 1 / math.sqrt(d_token))

    def forward(self, x_num, x_cat):
        num_missing = torch.isnan(x_num)
        cat_missing = x_cat < 0
        x_num = x_num.masked_fill(num_missing, 0.0)
        x_cat = x_cat.clamp(min=0)
        num_tokens = self.weight[None] * x_num[..., None] + self.bias[None]
        cat_tokens = self.embeddings(x_cat + self.category_offsets[None]) + self.cat_bias[None]
        tokens = torch.cat([num_tokens, cat_tokens], dim=1)
        return tokens, torch.cat([num_missing, cat_missing], dim=1)


class CLSToken(nn.Module):
    def __init__(self, d_token):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(d_token).uniform_(-1 / math.sqrt(d_token), 1 / math.sqrt(d_token)))

    def forward(self, x):
        return torch.cat([x, self.weight.view(1, 1, -1).expand(len(x), 1, -1)], dim=1)


class ReGLU(nn.Module):
    def forward(self, x):
        a, b = x.chunk(2, dim=-1)
        return a * F.relu(b)


class MultiheadAttention(nn.Module):
    def __init__(self, d_token, n_heads, dropout):
        super().__init__()
        self.W_q = nn.Linear(d_token, d_token)
        self.W_k = nn.Linear(d_token, d_token)
        self.W_v = nn.Linear(d_token, d_token)
        self.W_out = nn.Linear(d_token, d_token) if n_heads > 1 else None
        self.n_heads = n_heads
        self.dropout = nn.Dropout(dropout) if dropout else None

    def _reshape(self, x):
        batch_size, n_tokens, d = x.shape
        d_head = d // self.n_heads
        return x.reshape(batch_size, n_tokens, self.n_heads, d_head).transpose(1, 2)

    def forward(self, x_q, x_kv, key_padding_mask=None):
        q, k, v = self.W_q(x_q), self.W_k(x_kv), self.W_v(x_kv)
        batch_size, n_q_tokens, d = q.shape
        d_head_key = k.shape[-1] // self.n_heads
        q, k, v = self._reshape(q), self._reshape(k), self._reshape(v)
        attention_logits = q @ k.transpose(-1, -2) / math.sqrt(d_head_key)
        if key_padding_mask is not None:
            attention_logits = attention_logits + key_padding_mask[:, None, None, :]  # expect: MC509 fttransformer
        attention_probs = F.softmax(attention_logits, dim=-1)
        if self.dropout is not None:
            attention_probs = self.dropout(attention_probs)
        x = (attention_probs @ v).transpose(1, 2).reshape(batch_size, n_q_tokens, d)
        if self.W_out is not None:
            x = self.W_out(x)
        return x, attention_probs


class Block(nn.Module):
    def __init__(self, cfg: FTConfig, prenormalize_attention: bool):
        super().__init__()
        self.attention = MultiheadAttention(cfg.d_token, cfg.attention_n_heads, cfg.attention_dropout)
        self.attention_normalization = nn.LayerNorm(cfg.d_token) if prenormalize_attention else nn.Identity()
        self.ffn_normalization = nn.LayerNorm(cfg.d_token)
        self.ffn = nn.Sequential(
            nn.Linear(cfg.d_token, cfg.ffn_d_hidden * 2), ReGLU(), nn.Dropout(cfg.ffn_dropout),
            nn.Linear(cfg.ffn_d_hidden, cfg.d_token),
        )
        self.residual_dropout = nn.Dropout(cfg.residual_dropout)

    def forward(self, x, key_padding_mask, last_layer_query_idx=None):
        x_residual = self.attention_normalization(x)
        x_query = x_residual if last_layer_query_idx is None else x_residual[:, last_layer_query_idx]
        x_residual, _ = self.attention(x_query, x_residual, key_padding_mask=key_padding_mask)
        x = (x if last_layer_query_idx is None else x[:, last_layer_query_idx]) + self.residual_dropout(x_residual)
        return x + self.residual_dropout(self.ffn(self.ffn_normalization(x)))


class FTTransformer(nn.Module):
    def __init__(self, cfg: FTConfig):
        super().__init__()
        self.feature_tokenizer = FeatureTokenizer(cfg.n_num_features, cfg.cat_cardinalities, cfg.d_token)
        self.cls_token = CLSToken(cfg.d_token)
        self.blocks = nn.ModuleList([Block(cfg, prenormalize_attention=i > 0) for i in range(cfg.n_blocks)])
        self.head = nn.Sequential(nn.LayerNorm(cfg.d_token), nn.ReLU(), nn.Linear(cfg.d_token, cfg.d_out))

    def forward(self, x_num, x_cat):
        x, missing = self.feature_tokenizer(x_num, x_cat)
        x = self.cls_token(x)
        missing = torch.cat([missing, missing.new_zeros(len(missing), 1)], dim=1)
        for i, block in enumerate(self.blocks):
            last = i + 1 == len(self.blocks)
            x = block(x, key_padding_mask=missing, last_layer_query_idx=[-1] if last else None)
        return self.head(x[:, -1])


def make_table(cfg: FTConfig, n=256, missing_rate=0.2, seed=0):
    g = torch.Generator().manual_seed(seed)
    x_num = torch.randn(n, cfg.n_num_features, generator=g)
    x_cat = torch.stack([torch.randint(0, c, (n,), generator=g) for c in cfg.cat_cardinalities], dim=1)
    y = x_num[:, 0] * 2 - x_num[:, 1] + (x_cat[:, 0] == 2).float() + 0.1 * torch.randn(n, generator=g)
    x_num = x_num.masked_fill(torch.rand(n, cfg.n_num_features, generator=g) < missing_rate, float("nan"))
    x_cat = x_cat.masked_fill(torch.rand(n, len(cfg.cat_cardinalities), generator=g) < missing_rate, -1)
    return x_num, x_cat, y


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = FTConfig()
    x_num, x_cat, y = make_table(cfg)
    model = FTTransformer(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-5)
    for epoch in range(40):
        model.train()
        loss = F.mse_loss(model(x_num, x_cat).squeeze(-1), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("train mse", round(loss.item(), 4))

    model.eval()
    with torch.no_grad():
        pred = model(x_num, x_cat)
        rows = torch.isnan(x_num[:, 2])
        model.feature_tokenizer.bias[2] += 1.0
        moved = model(x_num, x_cat)
        print("rows with feature 2 missing:", int(rows.sum()),
              "moved by feature 2's token:", (pred[rows] - moved[rows]).abs().max().item())
