"""TabPFN: a prior-data fitted transformer for in-context tabular classification.

Written in the layout of automl/TabPFN (v1: tabpfn/transformer.py `TransformerModel` with the
static `generate_D_q_matrix` and `generate_square_subsequent_mask`, `efficient_eval_masking`,
`full_attention`, the (style, x, y) input tuple, train rows carrying `x + y` embeddings and
test rows `x` only, `single_eval_pos`; layer.py's sequence-first `TransformerEncoderLayer`;
utils.py `bool_mask_to_att_mask`, `normalize_data`, `normalize_by_used_features_f`; an MLP
prior with `MulticlassRank` targets and missing values; the prior-fitting loop), trained for a
few steps on prior samples and evaluated in context on a fresh dataset.

Source: seed self_attention_mask_guide.txt §3 and §7 Q3; conventions.md §1 (direction
cheat-sheet) and §3 item 27.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


def bool_mask_to_att_mask(mask):
    return (1.0 - mask.float()) * float("-inf")  # expect: MC522 tabpfn


def normalize_data(data, normalize_positions=-1):
    if normalize_positions > 0:
        mean = data[:normalize_positions].nanmean(dim=0)
        std = torch.sqrt(((data[:normalize_positions] - mean) ** 2).nanmean(dim=0)) + 1e-6
    else:
        mean = data.nanmean(dim=0)
        std = torch.sqrt(((data - mean) ** 2).nanmean(dim=0)) + 1e-6
    return torch.clip((data - mean) / std, min=-100, max=100)


def normalize_by_used_features_f(x, num_features_used, num_features):
    return x / (num_features_used / num_features)


class NanHandlingEncoder(nn.Module):
    def __init__(self, num_features, emsize):
        super().__init__()
        self.layer = nn.Linear(num_features * 2, emsize)

    def forward(self, x):
        nan_indicator = torch.isnan(x)
        x = torch.where(nan_indicator, torch.zeros_like(x), x)
        return self.layer(torch.cat([x, nan_indicator.float() * -2.0], dim=-1))


class TransformerEncoderLayer(nn.Module):
    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, pre_norm=False):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout)
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.pre_norm = pre_norm

    def forward(self, src, src_mask=None, src_key_padding_mask=None):
        src_ = self.norm1(src) if self.pre_norm else src
        if isinstance(src_mask, int):
            pos = src_mask
            train = src_[:pos]
            src_left = self.self_attn(train, train, train)[0]
            src_right = self.self_attn(src_[pos:], train, train)[0]
            src2 = torch.cat([src_left, src_right], dim=0)
        else:
            src2 = self.self_attn(
                src_, src_, src_, attn_mask=src_mask, key_padding_mask=src_key_padding_mask
            )[0]
        src = src + self.dropout(src2)
        if not self.pre_norm:
            src = self.norm1(src)
        src_ = self.norm2(src) if self.pre_norm else src
        src = src + self.dropout(self.linear2(self.dropout(F.gelu(self.linear1(src_)))))
        return src if self.pre_norm else self.norm2(src)


@dataclass
class TabPFNConfig:
    num_features: int = 5
    emsize: int = 64
    nhead: int = 4
    nhid: int = 128
    nlayers: int = 2
    n_out: int = 4
    dropout: float = 0.0
    full_attention: bool = False
    efficient_eval_masking: bool = False


class TransformerModel(nn.Module):
    def __init__(self, cfg: TabPFNConfig):
        super().__init__()
        self.encoder = NanHandlingEncoder(cfg.num_features, cfg.emsize)
        self.y_encoder = nn.Linear(1, cfg.emsize)
        self.layers = nn.ModuleList(
            TransformerEncoderLayer(cfg.emsize, cfg.nhead, cfg.nhid, cfg.dropout)
            for _ in range(cfg.nlayers)
        )
        self.decoder = nn.Sequential(
            nn.Linear(cfg.emsize, cfg.nhid), nn.GELU(), nn.Linear(cfg.nhid, cfg.n_out)
        )
        self.full_attention = cfg.full_attention
        self.efficient_eval_masking = cfg.efficient_eval_masking

    @staticmethod
    def generate_square_subsequent_mask(sz):
        mask = (torch.triu(torch.ones(sz, sz)) == 1).transpose(0, 1)
        return bool_mask_to_att_mask(mask)

    @staticmethod
    def generate_D_q_matrix(sz, query_size):
        train_size = sz - query_size
        mask = torch.zeros(sz, sz) == 0
        mask[:, train_size:].zero_()
        mask |= torch.eye(sz) == 1
        return bool_mask_to_att_mask(mask)

    def forward(self, src, src_mask=None, single_eval_pos=None):
        assert isinstance(src, tuple), "inputs (src) have to be given as (x,y) or (style,x,y) tuple"
        if len(src) == 2:
            src = (None, *src)
        _, x_src, y_src = src
        x_src = self.encoder(x_src)
        y_src = self.y_encoder(
            y_src.unsqueeze(-1) if len(y_src.shape) < len(x_src.shape) else y_src
        )
        if src_mask is None:
            full_len = len(x_src)
            if self.full_attention:
                src_mask = bool_mask_to_att_mask(torch.ones((full_len, full_len), dtype=torch.bool))
            elif self.efficient_eval_masking:
                src_mask = single_eval_pos
            else:
                src_mask = self.generate_D_q_matrix(full_len, len(x_src) - single_eval_pos)
            src_mask = src_mask if isinstance(src_mask, int) else src_mask.to(x_src.device)
        train_x = x_src[:single_eval_pos] + y_src[:single_eval_pos]
        output = torch.cat([train_x, x_src[single_eval_pos:]], 0)
        for layer in self.layers:
            output = layer(output, src_mask)
        return self.decoder(output)[single_eval_pos:]


def mlp_prior_get_batch(batch_size, seq_len, num_features, n_classes, generator):
    xs, ys = [], []
    for _ in range(batch_size):
        num_used = int(torch.randint(2, num_features + 1, (1,), generator=generator))
        x = torch.randn(seq_len, num_used, generator=generator)
        w1 = torch.randn(num_used, 16, generator=generator)
        w2 = torch.randn(16, 1, generator=generator)
        y = (torch.tanh(x @ w1) @ w2).squeeze(-1)
        boundaries = y[torch.randperm(seq_len, generator=generator)[: n_classes - 1]]
        y_class = (y[:, None] > boundaries[None, :]).sum(dim=1).float()
        missing = torch.rand(seq_len, num_used, generator=generator) < 0.05
        x = x.masked_fill(missing, float("nan"))
        x = normalize_by_used_features_f(normalize_data(x), num_used, num_features)
        x = torch.cat([x, torch.zeros(seq_len, num_features - num_used)], dim=1)
        xs.append(x)
        ys.append(y_class)
    return torch.stack(xs, dim=1), torch.stack(ys, dim=1)


def train_prior_fitting(model, cfg: TabPFNConfig, steps, seq_len=60, single_eval_pos=40):
    generator = torch.Generator().manual_seed(0)
    criterion = nn.CrossEntropyLoss(reduction="none", ignore_index=-100)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    for step in range(steps):
        x, y = mlp_prior_get_batch(16, seq_len, cfg.num_features, cfg.n_out, generator)
        output = model((x, y), single_eval_pos=single_eval_pos)
        targets = y[single_eval_pos:].clone()
        targets[torch.isnan(targets)] = -100
        losses = criterion(output.reshape(-1, cfg.n_out), targets.long().flatten())
        loss = losses.mean()
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % 40 == 0:
            print(f"step {step} loss {loss.item():.4f}")


@torch.no_grad()
def predict_in_context(model, x_train, y_train, x_test):
    x = torch.cat([x_train, x_test], dim=0).unsqueeze(1)
    y = torch.cat([y_train, torch.zeros(len(x_test))], dim=0).unsqueeze(1)
    logits = model((x, y), single_eval_pos=len(x_train))
    return logits.squeeze(1).argmax(-1)


def main():
    torch.manual_seed(0)
    cfg = TabPFNConfig()
    model = TransformerModel(cfg)
    train_prior_fitting(model, cfg, steps=120)
    model.eval()
    generator = torch.Generator().manual_seed(123)
    x, y = mlp_prior_get_batch(8, 80, cfg.num_features, cfg.n_out, generator)
    accs = []
    for b in range(x.shape[1]):
        pred = predict_in_context(model, x[:60, b], y[:60, b], x[60:, b])
        accs.append((pred == y[60:, b].long()).float().mean().item())
    majority = max((y[60:] == c).float().mean().item() for c in range(cfg.n_out))
    print(f"in-context accuracy {sum(accs) / len(accs):.3f} (largest class share {majority:.3f})")


if __name__ == "__main__":
    main()
