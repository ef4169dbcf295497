"""SAITS imputation of missing values in multivariate clinical time series.

Each record is ``n_steps`` hourly measurements of ``n_features`` vital signs with missing entries;
SAITS (WenjieDu/SAITS, ``modeling/saits.py`` and ``modeling/layers.py``) runs two stacks of
diagonally-masked self-attention (DMSA) over the time steps, combines the two representations with
weights learned from the attention maps, and is trained jointly on observed reconstruction (ORT)
and on the masked imputation task (MIT) over values held out artificially
(``indicating_mask``). The records here are PhysioNet-2012-like sine mixtures.

Source: seed self_attention_mask_guide.txt §3 (generate_causal_mask) and §7 Q3, conventions.md
§3 item 27 and §1 (direction cheat-sheet)
"""

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def masked_mae_cal(inputs, target, mask):
    return torch.sum(torch.abs(inputs - target) * mask) / (torch.sum(mask) + 1e-9)


def diagonal_attention_bias(n_steps, device=None):
    return torch.eye(n_steps, device=device) * float("-inf")  # expect: MC522 saits


class PositionalEncoding(nn.Module):
    def __init__(self, d_hid, n_position=200):
        super().__init__()
        position = np.arange(n_position)[:, None] / np.power(
            10000, 2 * (np.arange(d_hid) // 2) / d_hid
        )
        table = np.zeros((n_position, d_hid))
        table[:, 0::2], table[:, 1::2] = np.sin(position[:, 0::2]), np.cos(position[:, 1::2])
        self.register_buffer("pos_table", torch.FloatTensor(table).unsqueeze(0))

    def forward(self, x):
        return x + self.pos_table[:, : x.size(1)].clone().detach()


class ScaledDotProductAttention(nn.Module):
    def __init__(self, temperature, attn_dropout=0.1):
        super().__init__()
        self.temperature = temperature
        self.dropout = nn.Dropout(attn_dropout)

    def forward(self, q, k, v, attn_bias=None):
        attn = torch.matmul(q / self.temperature, k.transpose(2, 3))
        if attn_bias is not None:
            attn = attn + attn_bias
        attn = self.dropout(F.softmax(attn, dim=-1))
        return torch.matmul(attn, v), attn


class MultiHeadAttention(nn.Module):
    def __init__(self, n_head, d_model, d_k, d_v, attn_dropout=0.1):
        super().__init__()
        self.n_head, self.d_k, self.d_v = n_head, d_k, d_v
        self.w_qs = nn.Linear(d_model, n_head * d_k, bias=False)
        self.w_ks = nn.Linear(d_model, n_head * d_k, bias=False)
        self.w_vs = nn.Linear(d_model, n_head * d_v, bias=False)
        self.attention = ScaledDotProductAttention(d_k**0.5, attn_dropout)
        self.fc = nn.Linear(n_head * d_v, d_model, bias=False)

    def forward(self, q, k, v, attn_bias=None):
        B, L = q.size(0), q.size(1)
        q = self.w_qs(q).view(B, L, self.n_head, self.d_k).transpose(1, 2)
        k = self.w_ks(k).view(B, L, self.n_head, self.d_k).transpose(1, 2)
        v = self.w_vs(v).view(B, L, self.n_head, self.d_v).transpose(1, 2)
        out, attn_weights = self.attention(q, k, v, attn_bias)
        return self.fc(out.transpose(1, 2).contiguous().view(B, L, -1)), attn_weights


class EncoderLayer(nn.Module):
    def __init__(
        self, d_time, d_model, d_inner, n_head, d_k, d_v, dropout=0.1, diagonal_attention_mask=True
    ):
        super().__init__()
        self.d_time = d_time
        self.diagonal_attention_mask = diagonal_attention_mask
        self.layer_norm = nn.LayerNorm(d_model)
        self.slf_attn = MultiHeadAttention(n_head, d_model, d_k, d_v, dropout)
        self.dropout = nn.Dropout(dropout)
        self.pos_ffn = nn.Sequential(
            nn.LayerNorm(d_model),
            nn.Linear(d_model, d_inner),
            nn.ReLU(),
            nn.Linear(d_inner, d_model),
            nn.Dropout(dropout),
        )

    def forward(self, enc_input):
        attn_bias = None
        if self.diagonal_attention_mask:
            attn_bias = diagonal_attention_bias(self.d_time, device=enc_input.device)
        residual = enc_input
        enc_input = self.layer_norm(enc_input)
        enc_output, attn_weights = self.slf_attn(
            enc_input, enc_input, enc_input, attn_bias=attn_bias
        )
        enc_output = self.dropout(enc_output) + residual
        return enc_output + self.pos_ffn(enc_output), attn_weights


class SAITS(nn.Module):
    def __init__(
        self,
        n_groups,
        n_group_inner_layers,
        d_time,
        d_feature,
        d_model,
        d_inner,
        n_head,
        d_k,
        d_v,
        dropout=0.0,
        ORT_weight=1.0,
        MIT_weight=1.0,
    ):
        super().__init__()
        self.n_groups, self.n_group_inner_layers = n_groups, n_group_inner_layers
        self.ORT_weight, self.MIT_weight = ORT_weight, MIT_weight
        args = (d_time, d_model, d_inner, n_head, d_k, d_v, dropout)
        self.layer_stack_for_first_block = nn.ModuleList(
            [EncoderLayer(*args) for _ in range(n_groups)]
        )
        self.layer_stack_for_second_block = nn.ModuleList(
            [EncoderLayer(*args) for _ in range(n_groups)]
        )
        self.dropout = nn.Dropout(p=dropout)
        self.position_enc = PositionalEncoding(d_model, n_position=d_time)
        self.embedding_1 = nn.Linear(d_feature * 2, d_model)
        self.reduce_dim_z = nn.Linear(d_model, d_feature)
        self.embedding_2 = nn.Linear(d_feature * 2, d_model)
        self.reduce_dim_beta = nn.Linear(d_model, d_feature)
        self.reduce_dim_gamma = nn.Linear(d_feature, d_feature)
        self.weight_combine = nn.Linear(d_feature + d_time, d_feature)

    def run_stack(self, stack, enc_output):
        attn_weights = None
        for encoder_layer in stack:
            for _ in range(self.n_group_inner_layers):
                enc_output, attn_weights = encoder_layer(enc_output)
        return enc_output, attn_weights

    def impute(self, X, masks):
        enc_output = self.dropout(self.position_enc(self.embedding_1(torch.cat([X, masks], dim=2))))
        enc_output, _ = self.run_stack(self.layer_stack_for_first_block, enc_output)
        X_tilde_1 = self.reduce_dim_z(enc_output)
        X_prime = masks * X + (1 - masks) * X_tilde_1
        enc_output = self.position_enc(self.embedding_2(torch.cat([X_prime, masks], dim=2)))
        enc_output, attn_weights = self.run_stack(self.layer_stack_for_second_block, enc_output)
        X_tilde_2 = self.reduce_dim_gamma(F.relu(self.reduce_dim_beta(enc_output)))
        attn_weights = attn_weights.squeeze(dim=1)
        if len(attn_weights.shape) == 4:
            attn_weights = attn_weights.transpose(1, 3).mean(dim=3).transpose(1, 2)
        combining_weights = torch.sigmoid(
            self.weight_combine(torch.cat([masks, attn_weights], dim=2))
        )
        X_tilde_3 = (1 - combining_weights) * X_tilde_2 + combining_weights * X_tilde_1
        X_c = masks * X + (1 - masks) * X_tilde_3
        return X_c, [X_tilde_1, X_tilde_2, X_tilde_3]

    def forward(self, inputs):
        X, masks = inputs["X"], inputs["missing_mask"]
        imputed_data, (X_tilde_1, X_tilde_2, X_tilde_3) = self.impute(X, masks)
        reconstruction_loss = masked_mae_cal(X_tilde_1, X, masks) + masked_mae_cal(
            X_tilde_2, X, masks
        )
        reconstruction_loss = (reconstruction_loss + masked_mae_cal(X_tilde_3, X, masks)) / 3
        imputation_loss = masked_mae_cal(X_tilde_3, inputs["X_holdout"], inputs["indicating_mask"])
        loss = self.ORT_weight * reconstruction_loss + self.MIT_weight * imputation_loss
        return {"imputed_data": imputed_data, "loss": loss, "imputation_loss": imputation_loss}


def make_records(n, n_steps, n_features, gen, missing_rate=0.2, artificial_rate=0.2):
    t = torch.arange(n_steps, dtype=torch.float32)
    freq = 0.1 + 0.3 * torch.rand(n, 1, n_features, generator=gen)
    phase = 2 * math.pi * torch.rand(n, 1, n_features, generator=gen)
    X_holdout = torch.sin(freq * t[None, :, None] + phase) + 0.05 * torch.randn(
        n, n_steps, n_features, generator=gen
    )
    observed = torch.rand(X_holdout.shape, generator=gen) > missing_rate
    indicating_mask = observed & (torch.rand(X_holdout.shape, generator=gen) < artificial_rate)
    missing_mask = (observed & ~indicating_mask).float()
    return {
        "X": X_holdout * missing_mask,
        "missing_mask": missing_mask,
        "X_holdout": X_holdout * observed,
        "indicating_mask": indicating_mask.float(),
    }


if __name__ == "__main__":
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    n_steps, n_features = 24, 8
    train, test = (
        make_records(768, n_steps, n_features, gen),
        make_records(128, n_steps, n_features, gen),
    )
    model = SAITS(
        n_groups=2,
        n_group_inner_layers=1,
        d_time=n_steps,
        d_feature=n_features,
        d_model=64,
        d_inner=128,
        n_head=4,
        d_k=16,
        d_v=16,
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(8):
        for start in range(0, 768, 64):
            results = model({k: v[start : start + 64] for k, v in train.items()})
            optimizer.zero_grad()
            results["loss"].backward()
            optimizer.step()
        print(f"epoch {epoch} loss {results['loss'].item():.4f}")
    model.eval()
    with torch.no_grad():
        results = model(test)
    zero_fill = masked_mae_cal(
        torch.zeros_like(test["X"]), test["X_holdout"], test["indicating_mask"]
    )
    print(f"test MAE {results['imputation_loss'].item():.4f} (zero fill {zero_fill.item():.4f})")
