"""Long-sequence electricity load forecasting with Informer (Zhou et al., AAAI 2021) on ECL-like data.

zhouhaoyi/Informer2020's layout: DataEmbedding (circular Conv1d token embedding, positional
and fixed temporal embeddings of month / day / weekday / hour), an encoder of ProbSparse
self-attention with distilling ConvLayers, a decoder fed the last `label_len` observations plus
`pred_len` zero placeholders, masked self-attention and full cross-attention, the
multivariate (features="M") setting with MSE / MAE on the standardised series.

Source: seed self_attention_mask_guide.txt section 3 (generate_causal_mask) and section 7 Q3, conventions.md section 2.3
"""

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class TriangularCausalMask:
    def __init__(self, B, L, device="cpu"):
        mask_shape = [B, 1, L, L]
        with torch.no_grad():
            self._mask = torch.triu(torch.full(mask_shape, float("-inf")), diagonal=1).to(device)

    @property
    def mask(self):
        return self._mask


class FullAttention(nn.Module):
    def __init__(self, mask_flag=True, scale=None, attention_dropout=0.1):
        super().__init__()
        self.scale, self.mask_flag = scale, mask_flag
        self.dropout = nn.Dropout(attention_dropout)

    def forward(self, queries, keys, values, attn_mask):
        B, L, H, E = queries.shape
        scale = self.scale or 1.0 / math.sqrt(E)
        scores = torch.einsum("blhe,bshe->bhls", queries, keys)
        if self.mask_flag:
            if attn_mask is None:
                attn_mask = TriangularCausalMask(B, L, device=queries.device)
            scores = scores + attn_mask.mask
        A = self.dropout(torch.softmax(scale * scores, dim=-1))
        return torch.einsum("bhls,bshd->blhd", A, values).contiguous()


class ProbAttention(nn.Module):
    def __init__(self, factor=5, scale=None, attention_dropout=0.1):
        super().__init__()
        self.factor, self.scale = factor, scale
        self.dropout = nn.Dropout(attention_dropout)

    def _prob_QK(self, Q, K, sample_k, n_top):
        B, H, L_K, E = K.shape
        L_Q = Q.shape[2]
        K_expand = K.unsqueeze(-3).expand(B, H, L_Q, L_K, E)
        index_sample = torch.randint(L_K, (L_Q, sample_k))
        K_sample = K_expand[:, :, torch.arange(L_Q).unsqueeze(1), index_sample, :]
        Q_K_sample = torch.matmul(Q.unsqueeze(-2), K_sample.transpose(-2, -1)).squeeze(-2)
        M = Q_K_sample.max(-1)[0] - torch.div(Q_K_sample.sum(-1), L_K)
        M_top = M.topk(n_top, sorted=False)[1]
        Q_reduce = Q[torch.arange(B)[:, None, None], torch.arange(H)[None, :, None], M_top, :]
        return torch.matmul(Q_reduce, K.transpose(-2, -1)), M_top

    def forward(self, queries, keys, values, attn_mask):
        B, L_Q, H, D = queries.shape
        L_K = keys.shape[1]
        queries, keys, values = queries.transpose(2, 1), keys.transpose(2, 1), values.transpose(2, 1)
        U_part = min(self.factor * int(np.ceil(np.log(L_K))), L_K)
        u = min(self.factor * int(np.ceil(np.log(L_Q))), L_Q)
        scores_top, index = self._prob_QK(queries, keys, sample_k=U_part, n_top=u)
        attn = self.dropout(torch.softmax(scores_top * (self.scale or 1.0 / math.sqrt(D)), dim=-1))
        context = values.mean(dim=-2, keepdim=True).expand(B, H, L_Q, D).clone()
        context[torch.arange(B)[:, None, None], torch.arange(H)[None, :, None], index, :] = torch.matmul(attn, values)
        return context.transpose(2, 1).contiguous()


class AttentionLayer(nn.Module):
    def __init__(self, attention, d_model, n_heads):
        super().__init__()
        self.inner_attention = attention
        self.query_projection = nn.Linear(d_model, d_model)
        self.key_projection = nn.Linear(d_model, d_model)
        self.value_projection = nn.Linear(d_model, d_model)
        self.out_projection = nn.Linear(d_model, d_model)
        self.n_heads = n_heads

    def forward(self, queries, keys, values, attn_mask):
        B, L, _ = queries.shape
        S, H = keys.shape[1], self.n_heads
        out = self.inner_attention(self.query_projection(queries).view(B, L, H, -1), self.key_projection(keys).view(B, S, H, -1),
                                   self.value_projection(values).view(B, S, H, -1), attn_mask)
        return self.out_projection(out.view(B, L, -1))


class DataEmbedding(nn.Module):
    def __init__(self, c_in, d_model, dropout=0.05, max_len=512):
        super().__init__()
        self.tokenConv = nn.Conv1d(c_in, d_model, kernel_size=3, padding=1, padding_mode="circular")
        position = torch.arange(max_len).float().unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(position * div_term), torch.cos(position * div_term)
        self.register_buffer("pe", pe)
        self.month_embed, self.day_embed = nn.Embedding(13, d_model), nn.Embedding(32, d_model)
        self.weekday_embed, self.hour_embed = nn.Embedding(7, d_model), nn.Embedding(24, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, x_mark):
        temporal = (self.month_embed(x_mark[..., 0]) + self.day_embed(x_mark[..., 1])
                    + self.weekday_embed(x_mark[..., 2]) + self.hour_embed(x_mark[..., 3]))
        value = self.tokenConv(x.permute(0, 2, 1)).transpose(1, 2)
        return self.dropout(value + self.pe[: x.size(1)] + temporal)


class ConvLayer(nn.Module):
    def __init__(self, c_in):
        super().__init__()
        self.downConv = nn.Conv1d(c_in, c_in, kernel_size=3, padding=1, padding_mode="circular")
        self.norm = nn.BatchNorm1d(c_in)
        self.maxPool = nn.MaxPool1d(kernel_size=3, stride=2, padding=1)

    def forward(self, x):
        return self.maxPool(F.elu(self.norm(self.downConv(x.permute(0, 2, 1))))).transpose(1, 2)


class EncoderLayer(nn.Module):
    def __init__(self, attention, d_model, d_ff, dropout=0.05):
        super().__init__()
        self.attention = attention
        self.conv1, self.conv2 = nn.Conv1d(d_model, d_ff, 1), nn.Conv1d(d_ff, d_model, 1)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, attn_mask=None):
        x = self.norm1(x + self.dropout(self.attention(x, x, x, attn_mask=attn_mask)))
        y = self.dropout(F.gelu(self.conv1(x.transpose(-1, 1))))
        return self.norm2(x + self.dropout(self.conv2(y).transpose(-1, 1)))


class DecoderLayer(nn.Module):
    def __init__(self, self_attention, cross_attention, d_model, d_ff, dropout=0.05):
        super().__init__()
        self.self_attention, self.cross_attention = self_attention, cross_attention
        self.conv1, self.conv2 = nn.Conv1d(d_model, d_ff, 1), nn.Conv1d(d_ff, d_model, 1)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, cross, x_mask=None, cross_mask=None):
        x = self.norm1(x + self.dropout(self.self_attention(x, x, x, attn_mask=x_mask)))
        x = self.norm2(x + self.dropout(self.cross_attention(x, cross, cross, attn_mask=cross_mask)))
        y = self.dropout(F.gelu(self.conv1(x.transpose(-1, 1))))
        return self.norm3(x + self.dropout(self.conv2(y).transpose(-1, 1)))


class Informer(nn.Module):
    def __init__(self, enc_in, dec_in, c_out, out_len, factor=5, d_model=64, n_heads=4, e_layers=2, d_layers=1, d_ff=128):
        super().__init__()
        self.pred_len = out_len
        self.enc_embedding = DataEmbedding(enc_in, d_model)
        self.dec_embedding = DataEmbedding(dec_in, d_model)
        self.encoder_layers = nn.ModuleList(EncoderLayer(AttentionLayer(ProbAttention(factor), d_model, n_heads), d_model, d_ff)
                                            for _ in range(e_layers))
        self.conv_layers = nn.ModuleList(ConvLayer(d_model) for _ in range(e_layers - 1))
        self.encoder_norm = nn.LayerNorm(d_model)
        self.decoder_layers = nn.ModuleList(
            DecoderLayer(AttentionLayer(FullAttention(True), d_model, n_heads),
                         AttentionLayer(FullAttention(False), d_model, n_heads), d_model, d_ff) for _ in range(d_layers))
        self.decoder_norm = nn.LayerNorm(d_model)
        self.projection = nn.Linear(d_model, c_out)

    def forward(self, x_enc, x_mark_enc, x_dec, x_mark_dec, enc_self_mask=None, dec_self_mask=None, dec_enc_mask=None):
        enc_out = self.enc_embedding(x_enc, x_mark_enc)
        for attn_layer, conv_layer in zip(self.encoder_layers, self.conv_layers):
            enc_out = conv_layer(attn_layer(enc_out, attn_mask=enc_self_mask))
        enc_out = self.encoder_norm(self.encoder_layers[-1](enc_out, attn_mask=enc_self_mask))
        dec_out = self.dec_embedding(x_dec, x_mark_dec)
        for layer in self.decoder_layers:
            dec_out = layer(dec_out, enc_out, x_mask=dec_self_mask, cross_mask=dec_enc_mask)
        return self.projection(self.decoder_norm(dec_out))[:, -self.pred_len :, :]


def make_ecl(n_clients=8, days=120, seed=0):
    rng = np.random.default_rng(seed)
    hours = np.arange(days * 24)
    stamps = np.datetime64("2016-07-01T00") + hours.astype("timedelta64[h]")
    hour = hours % 24
    weekday = (stamps.astype("datetime64[D]").view("int64") - 4) % 7
    month = stamps.astype("datetime64[M]").astype(int) % 12 + 1
    day = (stamps.astype("datetime64[D]") - stamps.astype("datetime64[M]")).astype(int) + 1
    daily = np.exp(-((hour - 19) / 3.0) ** 2) + 0.6 * np.exp(-((hour - 8) / 2.0) ** 2)
    load = np.stack([(1 + c / 4) * daily * (0.7 if c % 2 else 1.0) ** (weekday >= 5) + 0.05 * rng.standard_normal(len(hours))
                     for c in range(n_clients)], axis=1)
    marks = np.stack([month, day, weekday, hour], axis=1)
    return torch.tensor(load, dtype=torch.float32), torch.tensor(marks, dtype=torch.long)


def main():
    torch.manual_seed(0)
    seq_len, label_len, pred_len = 96, 48, 24
    data, marks = make_ecl()
    border = int(len(data) * 0.8)
    mean, std = data[:border].mean(0), data[:border].std(0)
    data = (data - mean) / std
    model = Informer(8, 8, 8, pred_len)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def get_batch(starts):
        s = starts[:, None]
        x_enc, x_mark_enc = data[s + torch.arange(seq_len)], marks[s + torch.arange(seq_len)]
        dec_idx = s + seq_len - label_len + torch.arange(label_len + pred_len)
        y, x_mark_dec = data[dec_idx], marks[dec_idx]
        x_dec = torch.cat([y[:, :label_len], torch.zeros_like(y[:, label_len:])], dim=1)
        return x_enc, x_mark_enc, x_dec, x_mark_dec, y[:, -pred_len:]

    train_starts = torch.arange(0, border - seq_len - pred_len)
    test_starts = torch.arange(border - seq_len, len(data) - seq_len - pred_len, 6)
    for epoch in range(3):
        model.train()
        perm = train_starts[torch.randperm(len(train_starts))][:1024]
        for i in range(0, len(perm), 32):
            x_enc, x_mark_enc, x_dec, x_mark_dec, y = get_batch(perm[i : i + 32])
            loss = F.mse_loss(model(x_enc, x_mark_enc, x_dec, x_mark_dec), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            x_enc, x_mark_enc, x_dec, x_mark_dec, y = get_batch(test_starts)
            pred = model(x_enc, x_mark_enc, x_dec, x_mark_dec)
        print(f"epoch {epoch} train MSE {loss.item():.4f} test MSE {F.mse_loss(pred, y):.4f} MAE {F.l1_loss(pred, y):.4f}")


if __name__ == "__main__":
    main()
