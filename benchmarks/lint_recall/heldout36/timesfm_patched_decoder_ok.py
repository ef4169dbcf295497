"""TimesFM: a decoder-only patched time-series foundation model (Das et al., ICML 2024).

Written in the layout of google-research/timesfm's pytorch_patched_decoder.py (`_masked_mean_std`,
`_shift_padded_seq`, `convert_paddings_to_mask`, `causal_mask`, `merge_masks` with `expand_t`,
`ResidualBlock`, `RMSNorm`, `TransformerMLP` zeroing padded outputs, `TimesFMAttention` with
`_per_dim_scaling`, `StackedDecoder`, `PatchedTimeSeriesDecoder` with `_preprocess_input`, the
mean and quantile heads), pretrained briefly on synthetic series left-padded to the context.

Source: huggingface/transformers PR #27114 and NVIDIA-NeMo/Automodel PR #2658 (conventions.md §3
items 15 and 16); conventions.md §2.3 and §5 item 4; tools.md §0 P5.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class TimesFMConfig:
    num_layers: int = 2
    num_heads: int = 2
    hidden_size: int = 32
    intermediate_size: int = 32
    head_dim: int = 16
    rms_norm_eps: float = 1e-6
    patch_len: int = 32
    horizon_len: int = 32
    quantiles: list[float] = field(default_factory=lambda: [0.1, 0.5, 0.9])
    tolerance: float = 1e-6
    use_positional_embedding: bool = True


def _masked_mean_std(inputs, padding):
    pad_sum = torch.sum(1 - padding, dim=2)

    def _get_patch_index(arr):
        indices = torch.argmax((arr >= 3).to(torch.int32), dim=1)
        row_sum = (arr >= 3).to(torch.int32).sum(dim=1)
        return torch.where(row_sum == 0, arr.shape[1] - 1, indices)

    patch_indices = _get_patch_index(pad_sum)
    bidxs = torch.arange(inputs.shape[0])
    arr, mask = inputs[bidxs, patch_indices, :], 1 - padding[bidxs, patch_indices, :]
    num_valid_elements = torch.sum(mask, dim=1).clamp(min=1)
    masked_mean = torch.sum(arr * mask, dim=1) / num_valid_elements
    masked_var = torch.sum((arr * mask) ** 2, dim=1) / num_valid_elements - masked_mean**2
    return masked_mean, torch.sqrt(masked_var.clamp(min=0.0))


def _shift_padded_seq(mask, seq):
    batch_size, num_seq, feature_dim = seq.shape
    new_mask = mask == 0
    indices = new_mask.to(torch.int32).argmax(dim=1)
    indices[~new_mask.any(dim=1)] = -1
    idx_range = torch.arange(num_seq, device=seq.device)[None, :, None]
    shifted_idx = (idx_range.expand(batch_size, -1, feature_dim) - indices[:, None, None]) % num_seq
    return seq.gather(1, shifted_idx)


def convert_paddings_to_mask(paddings, dtype=torch.float32):
    attention_mask = paddings.detach().clone()
    attention_mask = attention_mask[:, None, None, :]
    attention_mask *= torch.finfo(dtype).min
    return attention_mask


def causal_mask(input_t):
    large_negative_number = torch.finfo(input_t.dtype).min
    t = input_t.shape[1]
    col_idx = torch.arange(t).unsqueeze(0).repeat(t, 1)
    row_idx = torch.arange(t).unsqueeze(1).repeat(1, t)
    mask = (row_idx < col_idx).to(input_t.dtype) * large_negative_number
    return mask.unsqueeze(0).unsqueeze(0).to(input_t.device)


def merge_masks(a, b):
    def expand_t(key_mask):
        query_mask = key_mask.transpose(-1, -2)
        return torch.minimum(query_mask, key_mask)

    if a.shape[2] != b.shape[2]:
        if a.shape[2] == 1:
            a = expand_t(a)
        else:
            assert b.shape[2] == 1
            b = expand_t(b)
    assert a.shape[1:] == b.shape[1:], f"a.shape={a.shape}, b.shape={b.shape}."
    return torch.minimum(a, b)


class ResidualBlock(nn.Module):
    def __init__(self, input_dims, hidden_dims, output_dims):
        super().__init__()
        self.hidden_layer = nn.Sequential(nn.Linear(input_dims, hidden_dims), nn.SiLU())
        self.output_layer = nn.Linear(hidden_dims, output_dims)
        self.residual_layer = nn.Linear(input_dims, output_dims)

    def forward(self, x):
        return self.output_layer(self.hidden_layer(x)) + self.residual_layer(x)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        output = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return (output * self.weight.float()).type_as(x)


class TransformerMLP(nn.Module):
    def __init__(self, hidden_size, intermediate_size):
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size)
        self.down_proj = nn.Linear(intermediate_size, hidden_size)
        self.layer_norm = nn.LayerNorm(normalized_shape=hidden_size, eps=1e-6)

    def forward(self, x, paddings=None):
        outputs = self.down_proj(F.gelu(self.gate_proj(self.layer_norm(x))))
        if paddings is not None:
            outputs = outputs * (1.0 - paddings[:, :, None])
        return outputs + x


class TimesFMAttention(nn.Module):
    def __init__(self, hidden_size, num_heads, head_dim):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, head_dim
        self.scaling = nn.Parameter(torch.zeros((self.head_dim,)))
        self.qkv_proj = nn.Linear(hidden_size, 3 * num_heads * head_dim)
        self.o_proj = nn.Linear(num_heads * head_dim, hidden_size)

    def _per_dim_scaling(self, query):
        r_softplus_0 = 1.442695041
        return query * r_softplus_0 / math.sqrt(self.head_dim) * F.softplus(self.scaling)

    def forward(self, hidden_states, mask):
        batch_size, input_len, _ = hidden_states.shape
        qkv = self.qkv_proj(hidden_states).view(batch_size, input_len, 3, self.num_heads, -1)
        xq, xk, xv = qkv.unbind(dim=2)
        xq = self._per_dim_scaling(xq).transpose(1, 2)
        scores = torch.matmul(xq, xk.transpose(1, 2).transpose(2, 3))
        scores = scores + mask
        scores = F.softmax(scores.float(), dim=-1).type_as(xq)
        output = torch.matmul(scores, xv.transpose(1, 2)).transpose(1, 2).contiguous()
        return self.o_proj(output.view(batch_size, input_len, -1))


class TimesFMDecoderLayer(nn.Module):
    def __init__(self, config: TimesFMConfig):
        super().__init__()
        self.self_attn = TimesFMAttention(config.hidden_size, config.num_heads, config.head_dim)
        self.mlp = TransformerMLP(config.hidden_size, config.intermediate_size)
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, hidden_states, mask, paddings):
        residual = hidden_states
        hidden_states = self.self_attn(self.input_layernorm(hidden_states), mask=mask)
        return self.mlp(residual + hidden_states, paddings=paddings)


class StackedDecoder(nn.Module):
    def __init__(self, config: TimesFMConfig):
        super().__init__()
        self.layers = nn.ModuleList(TimesFMDecoderLayer(config) for _ in range(config.num_layers))

    def forward(self, hidden_states, paddings):
        padding_mask = convert_paddings_to_mask(paddings, hidden_states.dtype)
        atten_mask = causal_mask(hidden_states)
        mask = merge_masks(padding_mask, atten_mask)
        for layer in self.layers:
            hidden_states = layer(hidden_states, mask=mask, paddings=paddings)
        return hidden_states


class PositionalEmbedding(nn.Module):
    def __init__(self, embedding_dims, min_timescale=1, max_timescale=10_000):
        super().__init__()
        self.embedding_dims = embedding_dims
        self.min_timescale, self.max_timescale = min_timescale, max_timescale

    def forward(self, seq_length):
        position = torch.arange(seq_length, dtype=torch.float32)[None, :, None]
        num_timescales = self.embedding_dims // 2
        increment = math.log(self.max_timescale / self.min_timescale) / max(num_timescales - 1, 1)
        inv_timescales = self.min_timescale * torch.exp(torch.arange(num_timescales) * -increment)
        scaled_time = position * inv_timescales[None, None, :]
        return torch.cat([torch.sin(scaled_time), torch.cos(scaled_time)], dim=2)


class PatchedTimeSeriesDecoder(nn.Module):
    def __init__(self, config: TimesFMConfig):
        super().__init__()
        self.config = config
        num_outputs = 1 + len(config.quantiles)
        hidden, inner = config.hidden_size, config.intermediate_size
        self.input_ff_layer = ResidualBlock(2 * config.patch_len, inner, hidden)
        self.freq_emb = nn.Embedding(num_embeddings=3, embedding_dim=hidden)
        self.horizon_ff_layer = ResidualBlock(hidden, inner, config.horizon_len * num_outputs)
        self.stacked_transformer = StackedDecoder(config)
        self.position_emb = PositionalEmbedding(config.hidden_size)

    def _forward_transform(self, inputs, patched_pads):
        mu, sigma = _masked_mean_std(inputs, patched_pads)
        sigma = torch.where(sigma < self.config.tolerance, torch.ones_like(sigma), sigma)
        return (inputs - mu[:, None, None]) / sigma[:, None, None], (mu, sigma)

    def _reverse_transform(self, outputs, stats):
        mu, sigma = stats
        return outputs * sigma[:, None, None, None] + mu[:, None, None, None]

    def _preprocess_input(self, input_ts, input_padding):
        bsize = input_ts.shape[0]
        patched_inputs = input_ts.view(bsize, -1, self.config.patch_len)
        patched_pads = input_padding.view(bsize, -1, self.config.patch_len)
        is_pad = torch.abs(patched_pads - 1.0) < self.config.tolerance
        patched_inputs = torch.where(is_pad, torch.zeros_like(patched_inputs), patched_inputs)
        patched_inputs, stats = self._forward_transform(patched_inputs, patched_pads)
        patched_inputs = patched_inputs * (1.0 - patched_pads)
        model_input = self.input_ff_layer(torch.cat([patched_inputs, patched_pads], dim=-1))
        patched_padding = torch.min(patched_pads, dim=-1)[0]
        if self.config.use_positional_embedding:
            pos_emb = self.position_emb(model_input.shape[1]).to(model_input.device)
            pos_emb = _shift_padded_seq(patched_padding, pos_emb.expand(bsize, -1, -1))
            model_input = model_input + pos_emb
        return model_input, patched_padding, stats

    def forward(self, input_ts, input_padding, freq):
        num_outputs = len(self.config.quantiles) + 1
        model_input, patched_padding, stats = self._preprocess_input(input_ts, input_padding)
        model_input = model_input + self.freq_emb(freq)
        model_output = self.stacked_transformer(model_input, patched_padding)
        output_ts = self.horizon_ff_layer(model_output)
        output_ts = output_ts.view(*output_ts.shape[:2], self.config.horizon_len, num_outputs)
        return self._reverse_transform(output_ts, stats), patched_padding


def synthetic_batch(config: TimesFMConfig, batch_size, num_patches, rng):
    total = (num_patches + 1) * config.patch_len
    t = np.arange(total)[None, :]
    period = rng.choice([12, 24, 48], size=(batch_size, 1))
    level, amp = rng.uniform(-5, 5, (batch_size, 1)), rng.uniform(0.5, 3, (batch_size, 1))
    noise = 0.1 * rng.normal(size=(batch_size, total))
    series = level + amp * np.sin(2 * np.pi * t / period) + noise
    padding = np.zeros_like(series)
    for i, n_pad in enumerate(rng.integers(0, num_patches - 1, batch_size) * config.patch_len):
        padding[i, :n_pad] = 1.0
        series[i, :n_pad] = 0.0
    return {
        "input_ts": torch.tensor(series, dtype=torch.float32),
        "input_padding": torch.tensor(padding, dtype=torch.float32),
        "freq": torch.zeros(batch_size, 1, dtype=torch.long),
    }


def pretrain_loss(model, batch, config: TimesFMConfig):
    context = {k: batch[k][:, : -config.patch_len] for k in ("input_ts", "input_padding")}
    outputs, patched_padding = model(**context, freq=batch["freq"])
    targets = batch["input_ts"].view(outputs.shape[0], -1, config.patch_len)[:, 1:]
    keep = (1.0 - patched_padding)[:, :, None]
    count = keep.sum() * config.patch_len
    loss = ((outputs[..., 0] - targets) ** 2 * keep).sum() / count
    for i, q in enumerate(config.quantiles):
        err = targets - outputs[..., i + 1]
        loss = loss + (torch.max((q - 1) * err, q * err) * keep).sum() / count
    return loss


def main():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    config = TimesFMConfig()
    model = PatchedTimeSeriesDecoder(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(60):
        loss = pretrain_loss(model, synthetic_batch(config, 32, 6, rng), config)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            print(f"step {step} loss {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        batch = synthetic_batch(config, 64, 6, rng)
        context = {k: batch[k][:, : -config.patch_len] for k in ("input_ts", "input_padding")}
        outputs, _ = model(**context, freq=batch["freq"])
        mae = (outputs[:, -1, :, 0] - batch["input_ts"][:, -32:]).abs().mean()
    print(f"next-patch MAE {mae.item():.4f}")


if __name__ == "__main__":
    main()
