"""iTransformer for day-ahead power forecasting of the inverters of a solar farm.

Time-Series-Library layout (`DataEmbedding_inverted`, `Encoder`, `EncoderLayer`,
`AttentionLayer`, `FullAttention`, a `configs` namespace): every inverter's
whole look-back window is one token, the timestamp features are extra tokens,
and attention runs across inverters. Inverters that were offline during the
look-back (maintenance, tripped strings) are left out as keys and out of the loss.

Source: conventions.md section 2.6 and section 5 item 6; seed
self_attention_mask_guide.txt section 2 (key_padding_mask) and section 5.
"""
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F


class DataEmbedding_inverted(nn.Module):
    def __init__(self, c_in, d_model, dropout=0.1):
        super().__init__()
        self.value_embedding = nn.Linear(c_in, d_model)
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x, x_mark):
        x = x.permute(0, 2, 1)
        if x_mark is None:
            x = self.value_embedding(x)
        else:
            x = self.value_embedding(torch.cat([x, x_mark.permute(0, 2, 1)], 1))
        return self.dropout(x)


class FullAttention(nn.Module):
    def __init__(self, mask_flag=False, factor=5, scale=None, attention_dropout=0.1):
        super().__init__()
        self.scale = scale
        self.mask_flag = mask_flag
        self.dropout = attention_dropout

    def forward(self, queries, keys, values, attn_mask):
        q, k, v = (t.transpose(1, 2) for t in (queries, keys, values))
        p = self.dropout if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=p, scale=self.scale)
        return out.transpose(1, 2).contiguous()


class AttentionLayer(nn.Module):
    def __init__(self, attention, d_model, n_heads):
        super().__init__()
        d_keys = d_model // n_heads
        self.inner_attention = attention
        self.query_projection = nn.Linear(d_model, d_keys * n_heads)
        self.key_projection = nn.Linear(d_model, d_keys * n_heads)
        self.value_projection = nn.Linear(d_model, d_keys * n_heads)
        self.out_projection = nn.Linear(d_keys * n_heads, d_model)
        self.n_heads = n_heads

    def forward(self, queries, keys, values, attn_mask):
        B, L, _ = queries.shape
        _, S, _ = keys.shape
        H = self.n_heads
        queries = self.query_projection(queries).view(B, L, H, -1)
        keys = self.key_projection(keys).view(B, S, H, -1)
        values = self.value_projection(values).view(B, S, H, -1)
        out = self.inner_attention(queries, keys, values, attn_mask)
        return self.out_projection(out.view(B, L, -1))


class EncoderLayer(nn.Module):
    def __init__(self, attention, d_model, d_ff=None, dropout=0.1):
        super().__init__()
        d_ff = d_ff or 4 * d_model
        self.attention = attention
        self.conv1 = nn.Conv1d(in_channels=d_model, out_channels=d_ff, kernel_size=1)
        self.conv2 = nn.Conv1d(in_channels=d_ff, out_channels=d_model, kernel_size=1)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, attn_mask=None):
        x = x + self.dropout(self.attention(x, x, x, attn_mask=attn_mask))
        y = x = self.norm1(x)
        y = self.dropout(F.gelu(self.conv1(y.transpose(-1, 1))))
        y = self.dropout(self.conv2(y).transpose(-1, 1))
        return self.norm2(x + y)


class Encoder(nn.Module):
    def __init__(self, attn_layers, norm_layer=None):
        super().__init__()
        self.attn_layers = nn.ModuleList(attn_layers)
        self.norm = norm_layer

    def forward(self, x, attn_mask=None):
        for attn_layer in self.attn_layers:
            x = attn_layer(x, attn_mask=attn_mask)
        return self.norm(x) if self.norm is not None else x


class Model(nn.Module):
    def __init__(self, configs):
        super().__init__()
        self.seq_len, self.pred_len, self.use_norm = configs.seq_len, configs.pred_len, configs.use_norm
        self.enc_embedding = DataEmbedding_inverted(configs.seq_len, configs.d_model, configs.dropout)
        self.encoder = Encoder(
            [EncoderLayer(AttentionLayer(FullAttention(False, configs.factor, attention_dropout=configs.dropout),
                                         configs.d_model, configs.n_heads), configs.d_model, configs.d_ff,
                          dropout=configs.dropout) for _ in range(configs.e_layers)],
            norm_layer=nn.LayerNorm(configs.d_model),
        )
        self.projector = nn.Linear(configs.d_model, configs.pred_len, bias=True)

    def forecast(self, x_enc, x_mark_enc, online):
        if self.use_norm:
            means = x_enc.mean(1, keepdim=True).detach()
            x_enc = x_enc - means
            stdev = torch.sqrt(torch.var(x_enc, dim=1, keepdim=True, unbiased=False) + 1e-5)
            x_enc = x_enc / stdev
        _, _, N = x_enc.shape
        enc_out = self.enc_embedding(x_enc, x_mark_enc)
        mark_keep = torch.ones(online.shape[0], enc_out.shape[1] - N, dtype=torch.bool, device=online.device)
        token_keep = torch.cat([online, mark_keep], dim=1)
        enc_out = self.encoder(enc_out, attn_mask=token_keep)  # expect: MC515 variates
        dec_out = self.projector(enc_out).permute(0, 2, 1)[:, :, :N]
        if self.use_norm:
            dec_out = dec_out * stdev[:, 0, :].unsqueeze(1) + means[:, 0, :].unsqueeze(1)
        return dec_out

    def forward(self, x_enc, x_mark_enc, online):
        return self.forecast(x_enc, x_mark_enc, online)[:, -self.pred_len :, :]


def make_windows(n_windows, n_inverters, seq_len, pred_len):
    steps = torch.arange(seq_len + pred_len, dtype=torch.float32)
    start = torch.randint(0, 24 * 30, (n_windows, 1)).float()
    hour = (start + steps) % 24
    day = ((start + steps) // 24) % 365
    irradiance = torch.clamp(torch.sin((hour - 6) / 12 * torch.pi), min=0)
    capacity = 0.8 + 0.4 * torch.rand(n_windows, 1, n_inverters)
    power = irradiance[..., None] * capacity * (1 + 0.05 * torch.randn(n_windows, seq_len + pred_len, n_inverters))
    online = torch.rand(n_windows, n_inverters) > 0.15
    power[:, :seq_len] *= online[:, None, :]
    marks = torch.stack([hour / 23 - 0.5, day / 364 - 0.5], dim=-1)
    return power[:, :seq_len], marks[:, :seq_len], power[:, seq_len:], online


if __name__ == "__main__":
    torch.manual_seed(0)
    configs = SimpleNamespace(seq_len=48, pred_len=24, d_model=32, n_heads=4, e_layers=2, d_ff=64,
                              factor=1, dropout=0.1, use_norm=True, batch_size=8, n_inverters=6)
    model = Model(configs)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(5):
        x, x_mark, y, online = make_windows(configs.batch_size, configs.n_inverters, configs.seq_len, configs.pred_len)
        pred = model(x, x_mark, online)
        loss = F.mse_loss(pred[online[:, None, :].expand_as(pred)], y[online[:, None, :].expand_as(y)])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        pred = model(x, x_mark, online)
    print("mse %.4f" % loss.item(), "forecast", tuple(pred.shape))
