"""Temporal Fusion Transformer in the style of pytorch-forecasting.

Gated residual networks and variable selection over the observed and known
inputs, an LSTM encoder over the (right-padded, packed) history and an LSTM
decoder over the known future, then interpretable multi-head attention in
which every decoder step attends to the real encoder steps and to the decoder
steps up to itself. Quantile loss over the decoder steps of each series.

Source: TransformerLensOrg/TransformerLens PR #366, conventions.md §3 item 20 and §5 item 5, seed masked_fill_inplace.txt (例子)
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import rnn


@dataclass
class TFTConfig:
    n_observed: int = 3
    n_known: int = 2
    hidden_size: int = 32
    attention_head_size: int = 4
    dropout: float = 0.1
    quantiles: tuple = (0.1, 0.5, 0.9)
    max_encoder_length: int = 24
    max_prediction_length: int = 6


def create_mask(size, lengths, inverse=False):
    if inverse:
        return torch.arange(size, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(-1)
    return torch.arange(size, device=lengths.device).unsqueeze(0) >= lengths.unsqueeze(-1)


class GatedLinearUnit(nn.Module):
    def __init__(self, input_size, hidden_size, dropout=None):
        super().__init__()
        self.dropout = nn.Dropout(dropout) if dropout else nn.Identity()
        self.fc = nn.Linear(input_size, hidden_size * 2)

    def forward(self, x):
        return F.glu(self.fc(self.dropout(x)), dim=-1)


class GatedResidualNetwork(nn.Module):
    def __init__(self, input_size, hidden_size, output_size, dropout=0.1):
        super().__init__()
        self.resample = nn.Linear(input_size, output_size) if input_size != output_size else nn.Identity()
        self.fc1 = nn.Linear(input_size, hidden_size)
        self.elu = nn.ELU()
        self.fc2 = nn.Linear(hidden_size, hidden_size)
        self.gate = GatedLinearUnit(hidden_size, output_size, dropout)
        self.norm = nn.LayerNorm(output_size)

    def forward(self, x):
        residual = self.resample(x)
        x = self.fc2(self.elu(self.fc1(x)))
        return self.norm(self.gate(x) + residual)


class VariableSelectionNetwork(nn.Module):
    def __init__(self, n_inputs, hidden_size, dropout=0.1):
        super().__init__()
        self.prescalers = nn.ModuleList([nn.Linear(1, hidden_size) for _ in range(n_inputs)])
        self.single_variable_grns = nn.ModuleList(
            [GatedResidualNetwork(hidden_size, hidden_size, hidden_size, dropout) for _ in range(n_inputs)]
        )
        self.flattened_grn = GatedResidualNetwork(n_inputs * hidden_size, hidden_size, n_inputs, dropout)

    def forward(self, x):
        embedded = [pre(x[..., i: i + 1]) for i, pre in enumerate(self.prescalers)]
        sparse_weights = torch.softmax(self.flattened_grn(torch.cat(embedded, dim=-1)), dim=-1).unsqueeze(-2)
        var_outputs = torch.stack([grn(e) for grn, e in zip(self.single_variable_grns, embedded)], dim=-1)
        return (var_outputs * sparse_weights).sum(dim=-1), sparse_weights


class ScaledDotProductAttention(nn.Module):
    def __init__(self, dropout=None, scale=True):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout) if dropout else nn.Identity()
        self.softmax = nn.Softmax(dim=2)
        self.scale = scale

    def forward(self, q, k, v, mask=None):
        attn = torch.bmm(q, k.permute(0, 2, 1))
        if self.scale:
            attn = attn / torch.sqrt(torch.as_tensor(k.size(-1), dtype=attn.dtype))
        if mask is not None:
            attn = attn.masked_fill(mask, torch.finfo(attn.dtype).min)
        attn = self.dropout(self.softmax(attn))
        return torch.bmm(attn, v), attn


class InterpretableMultiHeadAttention(nn.Module):
    def __init__(self, n_head, d_model, dropout=0.0):
        super().__init__()
        self.n_head = n_head
        self.d_k = self.d_q = self.d_v = d_model // n_head
        self.dropout = nn.Dropout(p=dropout)
        self.v_layer = nn.Linear(d_model, self.d_v)
        self.q_layers = nn.ModuleList([nn.Linear(d_model, self.d_q) for _ in range(n_head)])
        self.k_layers = nn.ModuleList([nn.Linear(d_model, self.d_k) for _ in range(n_head)])
        self.attention = ScaledDotProductAttention()
        self.w_h = nn.Linear(self.d_v, d_model, bias=False)

    def forward(self, q, k, v, mask=None):
        heads, attns = [], []
        vs = self.v_layer(v)
        for i in range(self.n_head):
            head, attn = self.attention(self.q_layers[i](q), self.k_layers[i](k), vs, mask)
            heads.append(self.dropout(head))
            attns.append(attn)
        head = torch.stack(heads, dim=2).mean(dim=2)
        return self.dropout(self.w_h(head)), torch.stack(attns, dim=2)


class TemporalFusionTransformer(nn.Module):
    def __init__(self, cfg: TFTConfig):
        super().__init__()
        self.cfg = cfg
        h = cfg.hidden_size
        self.encoder_variable_selection = VariableSelectionNetwork(cfg.n_observed + cfg.n_known, h, cfg.dropout)
        self.decoder_variable_selection = VariableSelectionNetwork(cfg.n_known, h, cfg.dropout)
        self.lstm_encoder = nn.LSTM(h, h, batch_first=True)
        self.lstm_decoder = nn.LSTM(h, h, batch_first=True)
        self.post_lstm_gate = GatedLinearUnit(h, h, cfg.dropout)
        self.post_lstm_norm = nn.LayerNorm(h)
        self.multihead_attn = InterpretableMultiHeadAttention(cfg.attention_head_size, h, cfg.dropout)
        self.post_attn_gate = GatedLinearUnit(h, h, cfg.dropout)
        self.post_attn_norm = nn.LayerNorm(h)
        self.pos_wise_ff = GatedResidualNetwork(h, h, h, cfg.dropout)
        self.output_layer = nn.Linear(h, len(cfg.quantiles))

    def get_attention_mask(self, encoder_lengths, decoder_lengths):
        decoder_length = int(decoder_lengths.max())
        attend_step = torch.arange(decoder_length, device=encoder_lengths.device)
        predict_step = torch.arange(0, decoder_length, device=encoder_lengths.device)[:, None]
        decoder_mask = (attend_step > predict_step).unsqueeze(0).expand(encoder_lengths.size(0), -1, -1)
        encoder_mask = create_mask(int(encoder_lengths.max()), encoder_lengths).unsqueeze(1).expand(-1, decoder_length, -1)
        return torch.cat((encoder_mask, decoder_mask), dim=2)

    def forward(self, x):
        encoder_lengths, decoder_lengths = x["encoder_lengths"], x["decoder_lengths"]
        enc_in = torch.cat([x["encoder_cont"], x["encoder_known"]], dim=-1)
        embeddings_varying_encoder, encoder_sparse_weights = self.encoder_variable_selection(enc_in)
        embeddings_varying_decoder, decoder_sparse_weights = self.decoder_variable_selection(x["decoder_known"])

        packed = rnn.pack_padded_sequence(embeddings_varying_encoder, encoder_lengths.cpu(), batch_first=True,
                                          enforce_sorted=False)
        encoder_output, (hidden, cell) = self.lstm_encoder(packed)
        encoder_output, _ = rnn.pad_packed_sequence(encoder_output, batch_first=True,
                                                    total_length=embeddings_varying_encoder.size(1))
        decoder_output, _ = self.lstm_decoder(embeddings_varying_decoder, (hidden, cell))

        lstm_output = torch.cat([encoder_output, decoder_output], dim=1)
        embeddings = torch.cat([embeddings_varying_encoder, embeddings_varying_decoder], dim=1)
        lstm_output = self.post_lstm_norm(self.post_lstm_gate(lstm_output) + embeddings)

        max_encoder_length = encoder_output.size(1)
        attn_output, attn_weights = self.multihead_attn(
            q=lstm_output[:, max_encoder_length:], k=lstm_output, v=lstm_output,
            mask=self.get_attention_mask(encoder_lengths, decoder_lengths),
        )
        attn_output = self.post_attn_norm(self.post_attn_gate(attn_output) + lstm_output[:, max_encoder_length:])
        output = self.pos_wise_ff(attn_output)
        return {"prediction": self.output_layer(output), "attention": attn_weights,
                "encoder_variables": encoder_sparse_weights}


def quantile_loss(pred, target, quantiles, decoder_lengths):
    errors = target.unsqueeze(-1) - pred
    q = torch.tensor(quantiles, dtype=pred.dtype)
    losses = torch.max((q - 1) * errors, q * errors)
    keep = create_mask(target.size(1), decoder_lengths, inverse=True).unsqueeze(-1).to(pred.dtype)
    return (losses * keep).sum() / (keep.sum() * len(quantiles))


def make_batch(cfg: TFTConfig, n=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    T, D = cfg.max_encoder_length, cfg.max_prediction_length
    encoder_lengths = torch.randint(6, T + 1, (n,), generator=g)
    t = torch.arange(T + D).float()[None, :] + torch.randint(0, 100, (n, 1), generator=g)
    known = torch.stack([torch.sin(t / 7.0), torch.cos(t / 7.0)], dim=-1)
    level = torch.sin(t / 7.0) * 2 + 0.1 * torch.randn(n, T + D, generator=g)
    observed = torch.stack([level, level.roll(1, 1), torch.randn(n, T + D, generator=g)], dim=-1)
    enc_keep = create_mask(T, encoder_lengths, inverse=True).unsqueeze(-1)
    return {
        "encoder_cont": observed[:, :T] * enc_keep, "encoder_known": known[:, :T] * enc_keep,
        "decoder_known": known[:, T:], "encoder_lengths": encoder_lengths,
        "decoder_lengths": torch.full((n,), D),
    }, level[:, T:]


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = TFTConfig()
    x, y = make_batch(cfg)
    model = TemporalFusionTransformer(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(30):
        model.train()
        loss = quantile_loss(model(x)["prediction"], y, cfg.quantiles, x["decoder_lengths"])
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("quantile loss", round(loss.item(), 4))

    model.eval()
    with torch.no_grad():
        out = model(x)
        junk = dict(x)
        pad = create_mask(cfg.max_encoder_length, x["encoder_lengths"]).unsqueeze(-1)
        junk["encoder_cont"] = x["encoder_cont"] + pad * 5.0
        later = dict(x)
        later["decoder_known"] = x["decoder_known"].clone()
        later["decoder_known"][:, -1] += 1.0
        p = out["prediction"]
        print("attention on padded encoder steps:", out["attention"][..., : cfg.max_encoder_length].mul(pad.transpose(1, 2)[:, :, None]).sum().item())
        print("padding values changed:", (p - model(junk)["prediction"]).abs().max().item(),
              "earlier steps moved by the last known input:", (p[:, :-1] - model(later)["prediction"][:, :-1]).abs().max().item())
