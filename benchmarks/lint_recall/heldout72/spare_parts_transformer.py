"""Encoder-decoder Transformer for intermittent spare-parts demand.

A GluonTS-style `TransformerModel` port: lagged targets scaled by the mean of
the observed history, `past_is_pad` for part numbers with a short history
(padded at the start), `past_observed_values` for days the depot did not
report, and a negative-binomial head for the sparse counts.

Source: seed self_attention_mask_guide.txt section 3 (generate_causal_mask);
pytorch/pytorch#103749 (conventions.md section 3 item 5); conventions.md section 2.3.
"""
from typing import Dict, List

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import NegativeBinomial

LAGS: List[int] = [1, 2, 3, 7, 14]


class MeanScaler(nn.Module):
    def __init__(self, minimum_scale: float = 1e-3):
        super().__init__()
        self.minimum_scale = minimum_scale

    def forward(self, data: torch.Tensor, observed_indicator: torch.Tensor) -> torch.Tensor:
        num_observed = observed_indicator.sum(dim=1)
        sum_observed = (data.abs() * observed_indicator).sum(dim=1)
        default_scale = sum_observed.sum() / num_observed.sum().clamp(min=1.0)
        scale = sum_observed / num_observed.clamp(min=1.0)
        scale = torch.where(sum_observed > 0, scale, default_scale)
        return scale.clamp(min=self.minimum_scale).unsqueeze(1)


def lagged_subsequences(sequence: torch.Tensor, subsequences_length: int, lags: List[int]) -> torch.Tensor:
    sequence_length = sequence.shape[1]
    lagged = []
    for lag in lags:
        begin = sequence_length - lag - subsequences_length
        end = sequence_length - lag
        lagged.append(sequence[:, begin:end])
    return torch.stack(lagged, dim=-1)


class NegativeBinomialOutput(nn.Module):
    def __init__(self, d_model: int):
        super().__init__()
        self.proj = nn.Linear(d_model, 2)

    def forward(self, h: torch.Tensor, scale: torch.Tensor) -> NegativeBinomial:
        mu_raw, alpha_raw = self.proj(h).unbind(-1)
        mu = F.softplus(mu_raw) * scale
        alpha = F.softplus(alpha_raw) + 1e-4
        return NegativeBinomial(total_count=1.0 / alpha, logits=torch.log(mu * alpha))


class SparePartsTransformer(nn.Module):
    def __init__(self, context_length: int, prediction_length: int, num_time_feat: int, d_model: int = 32):
        super().__init__()
        self.context_length = context_length
        self.prediction_length = prediction_length
        self.history_length = context_length + max(LAGS)
        self.scaler = MeanScaler()
        self.input_proj = nn.Linear(len(LAGS) + num_time_feat + 1, d_model)
        enc_layer = nn.TransformerEncoderLayer(d_model, 4, 4 * d_model, 0.1, batch_first=True)
        dec_layer = nn.TransformerDecoderLayer(d_model, 4, 4 * d_model, 0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(enc_layer, 2, enable_nested_tensor=False)
        self.decoder = nn.TransformerDecoder(dec_layer, 2)
        self.distr_output = NegativeBinomialOutput(d_model)

    @staticmethod
    def _upper_triangular_mask(size: int, device=None) -> torch.Tensor:
        return torch.triu(torch.full((size, size), float("-inf"), device=device), diagonal=0)  # expect: MC503 diagonal

    def _inputs(self, sequence, time_feat, scale, length):
        lags = lagged_subsequences(sequence, length, LAGS) / scale.unsqueeze(-1)
        log_scale = scale.log().unsqueeze(1).expand(-1, length, 1)
        return self.input_proj(torch.cat([lags, time_feat, log_scale], dim=-1))

    def encode(self, past_target, past_observed_values, past_is_pad, past_time_feat):
        scale = self.scaler(past_target[:, -self.context_length :], past_observed_values[:, -self.context_length :])
        enc_in = self._inputs(past_target, past_time_feat[:, -self.context_length :], scale, self.context_length)
        padding = past_is_pad[:, -self.context_length :].bool()
        memory = self.encoder(enc_in, src_key_padding_mask=padding)
        return memory, padding, scale

    def decode(self, memory, padding, scale, sequence, time_feat):
        length = time_feat.shape[1]
        dec_in = self._inputs(sequence, time_feat, scale, length)
        tgt_mask = self._upper_triangular_mask(length, device=dec_in.device)
        h = self.decoder(dec_in, memory, tgt_mask=tgt_mask, memory_key_padding_mask=padding)
        return self.distr_output(h, scale)

    def forward(self, batch: Dict[str, torch.Tensor]) -> torch.Tensor:
        memory, padding, scale = self.encode(
            batch["past_target"], batch["past_observed_values"], batch["past_is_pad"], batch["past_time_feat"]
        )
        sequence = torch.cat([batch["past_target"], batch["future_target"]], dim=1)
        distr = self.decode(memory, padding, scale, sequence, batch["future_time_feat"])
        nll = -distr.log_prob(batch["future_target"])
        weights = batch["future_observed_values"]
        return (nll * weights).sum() / weights.sum().clamp(min=1.0)

    @torch.no_grad()
    def predict_mean(self, batch: Dict[str, torch.Tensor]) -> torch.Tensor:
        memory, padding, scale = self.encode(
            batch["past_target"], batch["past_observed_values"], batch["past_is_pad"], batch["past_time_feat"]
        )
        sequence = batch["past_target"]
        for t in range(self.prediction_length):
            current = torch.cat([sequence, torch.zeros_like(sequence[:, :1])], dim=1)
            distr = self.decode(memory, padding, scale, current, batch["future_time_feat"][:, : t + 1])
            sequence = torch.cat([sequence, distr.mean[:, -1:]], dim=1)
        return sequence[:, -self.prediction_length :]


def make_batch(num_parts: int, history_lengths: List[int], context_length: int, prediction_length: int):
    history_length = context_length + max(LAGS)
    total = history_length + prediction_length
    demand = (torch.rand(num_parts, total) < 0.3).float() * torch.randint(1, 6, (num_parts, total)).float()
    time_feat = torch.stack([torch.arange(total) % 7 / 6.0, torch.arange(total) % 30 / 29.0], -1)
    time_feat = time_feat.expand(num_parts, -1, -1)
    is_pad = torch.zeros(num_parts, history_length)
    for i, n in enumerate(history_lengths):
        is_pad[i, : history_length - n] = 1.0
        demand[i, : history_length - n] = 0.0
    observed = (1.0 - is_pad) * (torch.rand(num_parts, history_length) > 0.05).float()
    return {
        "past_target": demand[:, :history_length],
        "past_observed_values": observed,
        "past_is_pad": is_pad,
        "past_time_feat": time_feat[:, :history_length],
        "future_target": demand[:, history_length:],
        "future_observed_values": torch.ones(num_parts, prediction_length),
        "future_time_feat": time_feat[:, history_length:],
    }


if __name__ == "__main__":
    torch.manual_seed(0)
    context_length, prediction_length = 28, 7
    batch = make_batch(4, [42, 30, 25, 42], context_length, prediction_length)
    model = SparePartsTransformer(context_length, prediction_length, num_time_feat=2)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(5):
        loss = model(batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    forecast = model.predict_mean(batch)
    print("nll %.4f" % loss.item(), "forecast", tuple(forecast.shape), bool(torch.isfinite(forecast).all()))
