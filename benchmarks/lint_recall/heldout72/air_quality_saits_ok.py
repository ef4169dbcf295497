"""SAITS imputation of missing pollutant readings at a Beijing monitoring station.

Two diagonally-masked self-attention (DMSA) blocks, the learned combination of
their estimates from the missing mask and the attention map, and SAITS's
joint objective: the observed reconstruction task (ORT) on what the station
reported and the masked imputation task (MIT) on readings held out on purpose.
Every time step may not attend to itself.

Source: seed self_attention_mask_guide.txt section 3 (generate_causal_mask) and
section 7 Q3; conventions.md section 1 (direction cheat-sheet).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

POLLUTANTS = ["PM2.5", "PM10", "SO2", "NO2", "CO", "O3"]


class ScaledDotProductAttention(nn.Module):
    def __init__(self, temperature, attn_dropout=0.1):
        super().__init__()
        self.temperature = temperature
        self.dropout = nn.Dropout(attn_dropout)

    def forward(self, q, k, v, attn_mask=None):
        attn = torch.matmul(q / self.temperature, k.transpose(2, 3))
        if attn_mask is not None:
            attn = attn + attn_mask
        attn = self.dropout(F.softmax(attn, dim=-1))
        return torch.matmul(attn, v), attn


class MultiHeadAttention(nn.Module):
    def __init__(self, n_head, d_model, d_k, d_v, attn_dropout):
        super().__init__()
        self.n_head, self.d_k, self.d_v = n_head, d_k, d_v
        self.w_qs = nn.Linear(d_model, n_head * d_k, bias=False)
        self.w_ks = nn.Linear(d_model, n_head * d_k, bias=False)
        self.w_vs = nn.Linear(d_model, n_head * d_v, bias=False)
        self.attention = ScaledDotProductAttention(d_k**0.5, attn_dropout)
        self.fc = nn.Linear(n_head * d_v, d_model, bias=False)

    def forward(self, q, k, v, attn_mask=None):
        b, n = q.size(0), q.size(1)
        q = self.w_qs(q).view(b, n, self.n_head, self.d_k).transpose(1, 2)
        k = self.w_ks(k).view(b, n, self.n_head, self.d_k).transpose(1, 2)
        v = self.w_vs(v).view(b, n, self.n_head, self.d_v).transpose(1, 2)
        out, attn_weights = self.attention(q, k, v, attn_mask)
        return self.fc(out.transpose(1, 2).reshape(b, n, -1)), attn_weights


class EncoderLayer(nn.Module):
    def __init__(self, d_time, d_model, d_inner, n_head, d_k, d_v, dropout=0.1, attn_dropout=0.1,
                 diagonal_attention_mask=True):
        super().__init__()
        self.diagonal_attention_mask = diagonal_attention_mask
        diagonal = torch.eye(d_time, dtype=torch.bool)
        self.register_buffer("diag_bias", torch.zeros(d_time, d_time).masked_fill(diagonal, float("-inf")))
        self.layer_norm = nn.LayerNorm(d_model, eps=1e-6)
        self.slf_attn = MultiHeadAttention(n_head, d_model, d_k, d_v, attn_dropout)
        self.dropout = nn.Dropout(dropout)
        self.pos_ffn = nn.Sequential(nn.LayerNorm(d_model, eps=1e-6), nn.Linear(d_model, d_inner), nn.ReLU(),
                                     nn.Linear(d_inner, d_model), nn.Dropout(dropout))

    def forward(self, enc_input):
        mask_time = self.diag_bias if self.diagonal_attention_mask else None
        residual = enc_input
        enc_input = self.layer_norm(enc_input)
        enc_output, attn_weights = self.slf_attn(enc_input, enc_input, enc_input, attn_mask=mask_time)
        enc_output = self.dropout(enc_output) + residual
        return enc_output + self.pos_ffn(enc_output), attn_weights


class PositionalEncoding(nn.Module):
    def __init__(self, d_hid, n_position=200):
        super().__init__()
        position = torch.arange(n_position, dtype=torch.float32)[:, None]
        div = torch.exp(torch.arange(0, d_hid, 2, dtype=torch.float32) * (-math.log(10000.0) / d_hid))
        table = torch.zeros(n_position, d_hid)
        table[:, 0::2], table[:, 1::2] = torch.sin(position * div), torch.cos(position * div)
        self.register_buffer("pos_table", table[None])

    def forward(self, x):
        return x + self.pos_table[:, : x.size(1)]


class SAITS(nn.Module):
    def __init__(self, d_time, d_feature, d_model=32, d_inner=64, n_head=4, d_k=8, d_v=8, n_layers=1, dropout=0.1):
        super().__init__()
        def block():
            return nn.ModuleList([EncoderLayer(d_time, d_model, d_inner, n_head, d_k, d_v, dropout, 0.0)
                                  for _ in range(n_layers)])
        self.layer_stack_for_first_block, self.layer_stack_for_second_block = block(), block()
        self.dropout = nn.Dropout(p=dropout)
        self.position_enc = PositionalEncoding(d_model, n_position=d_time)
        self.embedding_1 = nn.Linear(2 * d_feature, d_model)
        self.reduce_dim_z = nn.Linear(d_model, d_feature)
        self.embedding_2 = nn.Linear(2 * d_feature, d_model)
        self.reduce_dim_beta = nn.Linear(d_model, d_feature)
        self.reduce_dim_gamma = nn.Linear(d_feature, d_feature)
        self.weight_combine = nn.Linear(d_feature + d_time, d_feature)

    def impute(self, X, masks):
        enc_output = self.dropout(self.position_enc(self.embedding_1(torch.cat([X, masks], dim=2))))
        for encoder_layer in self.layer_stack_for_first_block:
            enc_output, _ = encoder_layer(enc_output)
        X_tilde_1 = self.reduce_dim_z(enc_output)
        X_prime = masks * X + (1 - masks) * X_tilde_1
        enc_output = self.position_enc(self.embedding_2(torch.cat([X_prime, masks], dim=2)))
        for encoder_layer in self.layer_stack_for_second_block:
            enc_output, attn_weights = encoder_layer(enc_output)
        X_tilde_2 = self.reduce_dim_gamma(F.relu(self.reduce_dim_beta(enc_output)))
        attn_weights = attn_weights.mean(dim=1)
        combining_weights = torch.sigmoid(self.weight_combine(torch.cat([masks, attn_weights], dim=2)))
        X_tilde_3 = (1 - combining_weights) * X_tilde_2 + combining_weights * X_tilde_1
        X_c = masks * X + (1 - masks) * X_tilde_3
        return X_c, [X_tilde_1, X_tilde_2, X_tilde_3]


def masked_mae_cal(inputs, target, mask):
    return torch.sum(torch.abs(inputs - target) * mask) / (torch.sum(mask) + 1e-9)


def mit_split(X, missing_mask, rate=0.2):
    indicating_mask = ((torch.rand_like(X) < rate) & (missing_mask == 1)).float()
    X_holdout = X * missing_mask
    masks = missing_mask * (1 - indicating_mask)
    return X_holdout * masks, masks, X_holdout, indicating_mask


def station_days(n_days, d_time=24):
    hours = torch.arange(d_time, dtype=torch.float32)
    daily = torch.sin((hours - 8) / 24 * 2 * math.pi)
    level = torch.rand(n_days, 1, len(POLLUTANTS)) * 2
    X = level + daily[None, :, None] * torch.tensor([1.0, 1.0, 0.2, 0.6, 0.4, -0.8]) + 0.2 * torch.randn(n_days, d_time, len(POLLUTANTS))
    missing_mask = (torch.rand(n_days, d_time, len(POLLUTANTS)) > 0.1).float()
    missing_mask[0, 5:11, 2] = 0.0
    return X * missing_mask, missing_mask


if __name__ == "__main__":
    torch.manual_seed(0)
    X, missing_mask = station_days(8)
    model = SAITS(d_time=24, d_feature=len(POLLUTANTS))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(5):
        X_in, masks, X_holdout, indicating_mask = mit_split(X, missing_mask)
        X_c, (x1, x2, x3) = model.impute(X_in, masks)
        ort = sum(masked_mae_cal(x, X_in, masks) for x in (x1, x2, x3)) / 3
        mit = masked_mae_cal(x3, X_holdout, indicating_mask)
        loss = ort + mit
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        X_c, _ = model.impute(X, missing_mask)
    print("ORT %.4f MIT %.4f" % (ort.item(), mit.item()), "imputed", tuple(X_c.shape))
