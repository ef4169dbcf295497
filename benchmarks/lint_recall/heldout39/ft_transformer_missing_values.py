"""FT-Transformer for tabular regression with missing numerical values.

Laid out after yandex-research/rtdl (``rtdl.FTTransformer``): ``NumericalFeatureTokenizer`` (a
weight and a bias per feature), ``CategoricalFeatureTokenizer`` with category offsets,
``FeatureTokenizer``, ``CLSToken`` appended last, ``MultiheadAttention`` with ``W_q`` / ``W_k`` /
``W_v`` / ``W_out``, ``Transformer`` blocks (pre-normalization, no normalization before the first
attention, the last block computing only the [CLS] query) and the ``Head``. A missing value is
read as 0 and its token is left out of attention.

Source: conventions.md §1 (HF 4.x AttentionMaskConverter row), huggingface/transformers#32195
(conventions.md §3 item 25), seed self_attention_mask_guide.txt §7 Q5.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class FTTransformerConfig:
    n_num_features: int = 8
    cat_cardinalities: list[int] = field(default_factory=lambda: [5, 3])
    d_token: int = 64
    n_blocks: int = 2
    attention_n_heads: int = 8
    ffn_d_hidden: int = 128
    attention_dropout: float = 0.1
    residual_dropout: float = 0.0
    last_layer_query_idx: list[int] = field(default_factory=lambda: [-1])


class NumericalFeatureTokenizer(nn.Module):
    def __init__(self, n_features: int, d_token: int):
        super().__init__()
        self.weight = nn.Parameter(
            torch.empty(n_features, d_token).uniform_(-(d_token**-0.5), d_token**-0.5)
        )
        self.bias = nn.Parameter(
            torch.empty(n_features, d_token).uniform_(-(d_token**-0.5), d_token**-0.5)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight[None] * x[..., None] + self.bias[None]


class CategoricalFeatureTokenizer(nn.Module):
    def __init__(self, cardinalities: list[int], d_token: int):
        super().__init__()
        self.register_buffer(
            "category_offsets", torch.tensor([0, *cardinalities[:-1]]).cumsum(0), persistent=False
        )
        self.embeddings = nn.Embedding(sum(cardinalities), d_token)
        self.bias = nn.Parameter(torch.zeros(len(cardinalities), d_token))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.embeddings(x + self.category_offsets[None]) + self.bias[None]


class FeatureTokenizer(nn.Module):
    def __init__(self, cfg: FTTransformerConfig):
        super().__init__()
        self.num_tokenizer = NumericalFeatureTokenizer(cfg.n_num_features, cfg.d_token)
        self.cat_tokenizer = CategoricalFeatureTokenizer(cfg.cat_cardinalities, cfg.d_token)

    def forward(self, x_num: torch.Tensor, x_cat: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.num_tokenizer(x_num), self.cat_tokenizer(x_cat)], dim=1)


class CLSToken(nn.Module):
    def __init__(self, d_token: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(d_token).uniform_(-(d_token**-0.5), d_token**-0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, self.weight.view(1, 1, -1).expand(len(x), 1, -1)], dim=1)


class MultiheadAttention(nn.Module):
    def __init__(self, d_token: int, n_heads: int, dropout: float):
        super().__init__()
        self.W_q, self.W_k = nn.Linear(d_token, d_token), nn.Linear(d_token, d_token)
        self.W_v, self.W_out = nn.Linear(d_token, d_token), nn.Linear(d_token, d_token)
        self.n_heads, self.dropout = n_heads, nn.Dropout(dropout)

    def _reshape(self, x: torch.Tensor) -> torch.Tensor:
        batch_size, n_tokens, d = x.shape
        return x.reshape(batch_size, n_tokens, self.n_heads, d // self.n_heads).transpose(1, 2)

    def forward(self, x_q: torch.Tensor, x_kv: torch.Tensor, attn_bias: torch.Tensor | None = None):
        q, k, v = (
            self._reshape(self.W_q(x_q)),
            self._reshape(self.W_k(x_kv)),
            self._reshape(self.W_v(x_kv)),
        )
        attention_logits = q @ k.transpose(-1, -2) / math.sqrt(k.shape[-1])
        if attn_bias is not None:
            attention_logits = attention_logits + attn_bias
        attention_probs = self.dropout(F.softmax(attention_logits, dim=-1))
        x = (attention_probs @ v).transpose(1, 2).reshape(len(q), x_q.shape[1], -1)
        return self.W_out(x), attention_probs


class Transformer(nn.Module):
    def __init__(self, cfg: FTTransformerConfig):
        super().__init__()
        self.last_layer_query_idx = cfg.last_layer_query_idx
        self.blocks = nn.ModuleList()
        for layer_idx in range(cfg.n_blocks):
            layer = nn.ModuleDict(
                {
                    "attention": MultiheadAttention(
                        cfg.d_token, cfg.attention_n_heads, cfg.attention_dropout
                    ),
                    "ffn": nn.Sequential(
                        nn.Linear(cfg.d_token, 2 * cfg.ffn_d_hidden),
                        nn.GLU(),
                        nn.Linear(cfg.ffn_d_hidden, cfg.d_token),
                    ),
                    "ffn_normalization": nn.LayerNorm(cfg.d_token),
                }
            )
            if layer_idx:
                layer["attention_normalization"] = nn.LayerNorm(cfg.d_token)
            self.blocks.append(layer)
        self.residual_dropout = nn.Dropout(cfg.residual_dropout)

    def forward(self, x: torch.Tensor, attn_bias: torch.Tensor) -> torch.Tensor:
        for layer_idx, layer in enumerate(self.blocks):
            query_idx = self.last_layer_query_idx if layer_idx + 1 == len(self.blocks) else None
            x_residual = (
                layer["attention_normalization"](x) if "attention_normalization" in layer else x
            )
            x_q = x_residual if query_idx is None else x_residual[:, query_idx]
            x_residual, _ = layer["attention"](x_q, x_residual, attn_bias)
            if query_idx is not None:
                x = x[:, query_idx]
            x = x + self.residual_dropout(x_residual)
            x = x + self.residual_dropout(layer["ffn"](layer["ffn_normalization"](x)))
        return x


class FTTransformer(nn.Module):
    def __init__(self, cfg: FTTransformerConfig):
        super().__init__()
        self.feature_tokenizer = FeatureTokenizer(cfg)
        self.cls_token = CLSToken(cfg.d_token)
        self.transformer = Transformer(cfg)
        self.head = nn.Sequential(nn.LayerNorm(cfg.d_token), nn.ReLU(), nn.Linear(cfg.d_token, 1))

    def forward(self, x_num: torch.Tensor, x_cat: torch.Tensor) -> torch.Tensor:
        missing = torch.isnan(x_num)
        x = self.cls_token(self.feature_tokenizer(x_num.masked_fill(missing, 0.0), x_cat))
        present = torch.ones(
            x.shape[0], x.shape[1] - x_num.shape[1], dtype=torch.bool, device=x.device
        )
        token_keep = torch.cat([~missing, present], dim=1)
        attn_bias = (1 - token_keep[:, None, None, :]) * torch.finfo(x.dtype).min  # expect: MC512 fttransformer
        x = self.transformer(x, attn_bias)
        return self.head(x[:, -1]).squeeze(-1)


def make_dataset(n: int, cfg: FTTransformerConfig, gen: torch.Generator, missing_rate: float = 0.2):
    x_num = torch.randn(n, cfg.n_num_features, generator=gen)
    x_cat = torch.stack(
        [torch.randint(0, c, (n,), generator=gen) for c in cfg.cat_cardinalities], dim=1
    )
    y = (
        torch.sin(x_num[:, 0]) * x_num[:, 1]
        + x_num[:, 2].abs()
        + 0.5 * x_cat[:, 0]
        - x_cat[:, 1] * x_num[:, 3]
    )
    y = y + 0.1 * torch.randn(n, generator=gen)
    x_num = x_num.masked_fill(torch.rand(x_num.shape, generator=gen) < missing_rate, float("nan"))
    return x_num, x_cat, (y - y.mean()) / y.std()


def main() -> None:
    torch.manual_seed(0)
    cfg, gen = FTTransformerConfig(), torch.Generator().manual_seed(0)
    x_num, x_cat, y = make_dataset(4096, cfg, gen)
    test = make_dataset(1024, cfg, gen)
    model = FTTransformer(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-5)
    for epoch in range(8):
        perm = torch.randperm(len(y), generator=gen)
        for start in range(0, len(y), 256):
            idx = perm[start : start + 256]
            loss = F.mse_loss(model(x_num[idx], x_cat[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            rmse = F.mse_loss(model(test[0], test[1]), test[2]).sqrt().item()
        model.train()
        print(f"epoch {epoch} train {loss.item():.3f} test RMSE {rmse:.3f}")


if __name__ == "__main__":
    main()
