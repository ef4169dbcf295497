"""Chronos-style tokenized forecasting of monthly international tourist arrivals.

Series are mean-scaled and quantised into uniform bins (`MeanScaleUniformBins`);
countries with shorter records are padded at the start with NaN, as Chronos
left-pads contexts, and months the statistics office did not publish are NaN too.
The tokenizer has a Hugging Face call signature. A small T5-like
encoder-decoder is trained with cross-entropy over the bins and decodes the
horizon greedily.

Source: conventions.md section 1 (HF attention_mask row and nn.MultiheadAttention row),
section 2.4 and section 5 item 7.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class MeanScaleUniformBins:
    def __init__(self, n_tokens=64, low_limit=-5.0, high_limit=5.0, n_special_tokens=2):
        self.pad_token_id, self.eos_token_id = 0, 1
        self.n_special_tokens = n_special_tokens
        self.centers = torch.linspace(low_limit, high_limit, n_tokens - n_special_tokens - 1)
        self.boundaries = torch.cat([torch.tensor([-1e20]), (self.centers[1:] + self.centers[:-1]) / 2,
                                     torch.tensor([1e20])])

    def __call__(self, context, return_tensors="pt"):
        observed = ~torch.isnan(context)
        scale = (torch.nan_to_num(context).abs() * observed).sum(-1) / observed.sum(-1).clamp(min=1)
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))
        scaled = torch.nan_to_num(context) / scale[:, None]
        token_ids = torch.bucketize(scaled, self.boundaries, right=True) + self.n_special_tokens - 1
        token_ids = token_ids.clamp(self.n_special_tokens, self.n_special_tokens + len(self.centers) - 1)
        token_ids = token_ids.masked_fill(~observed, self.pad_token_id)
        return {"input_ids": token_ids, "attention_mask": observed.long(), "scale": scale}

    def label_input_transform(self, label, scale):
        observed = ~torch.isnan(label)
        token_ids = torch.bucketize(torch.nan_to_num(label) / scale[:, None], self.boundaries, right=True)
        token_ids = (token_ids + self.n_special_tokens - 1).clamp(self.n_special_tokens,
                                                                   self.n_special_tokens + len(self.centers) - 1)
        return token_ids.masked_fill(~observed, -100)

    def output_transform(self, token_ids, scale):
        idx = (token_ids - self.n_special_tokens).clamp(0, len(self.centers) - 1)
        return self.centers[idx] * scale[:, None]


class T5Attention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model, bias=False) for _ in range(4))

    def forward(self, hidden_states, position_bias):
        b, n, d = hidden_states.shape
        q, k, v = (proj(hidden_states).view(b, n, self.n_heads, -1).transpose(1, 2) for proj in (self.q, self.k, self.v))
        scores = torch.matmul(q, k.transpose(-1, -2)) + position_bias
        attn = F.softmax(scores.float(), dim=-1).type_as(scores)
        return self.o(torch.matmul(attn, v).transpose(1, 2).reshape(b, n, d))


class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.attn, self.ln1, self.ln2 = T5Attention(d_model, n_heads), nn.RMSNorm(d_model), nn.RMSNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, 2 * d_model, bias=False), nn.ReLU(), nn.Linear(2 * d_model, d_model, bias=False))

    def forward(self, x, position_bias):
        x = x + self.attn(self.ln1(x), position_bias)
        return x + self.ff(self.ln2(x))


class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, n_heads, bias=False, batch_first=True)
        self.cross_attn = nn.MultiheadAttention(d_model, n_heads, bias=False, batch_first=True)
        self.lns = nn.ModuleList([nn.RMSNorm(d_model) for _ in range(3)])
        self.ff = nn.Sequential(nn.Linear(d_model, 2 * d_model, bias=False), nn.ReLU(), nn.Linear(2 * d_model, d_model, bias=False))

    def forward(self, y, memory, causal, memory_key_padding_mask):
        h = self.lns[0](y)
        y = y + self.self_attn(h, h, h, attn_mask=causal)[0]
        h = self.lns[1](y)
        y = y + self.cross_attn(h, memory, memory, key_padding_mask=memory_key_padding_mask)[0]
        return y + self.ff(self.lns[2](y))


class ChronosLike(nn.Module):
    def __init__(self, vocab_size=64, d_model=32, n_heads=4, n_layers=2, max_len=256):
        super().__init__()
        self.shared = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.encoder = nn.ModuleList([EncoderBlock(d_model, n_heads) for _ in range(n_layers)])
        self.decoder = nn.ModuleList([DecoderBlock(d_model, n_heads) for _ in range(n_layers)])
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)

    def encode(self, input_ids, attention_mask):
        x = self.shared(input_ids) + self.pos(torch.arange(input_ids.shape[1], device=input_ids.device))
        extended = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for block in self.encoder:
            x = block(x, extended)
        return x

    def decode(self, decoder_input_ids, memory, attention_mask):
        n = decoder_input_ids.shape[1]
        y = self.shared(decoder_input_ids) + self.pos(torch.arange(n, device=decoder_input_ids.device))
        causal = nn.Transformer.generate_square_subsequent_mask(n, device=y.device, dtype=torch.bool)
        memory_key_padding_mask = (~attention_mask).bool()  # expect: MC518 invert
        for block in self.decoder:
            y = block(y, memory, causal, memory_key_padding_mask)
        return self.lm_head(y)

    def forward(self, input_ids, attention_mask, labels):
        memory = self.encode(input_ids, attention_mask)
        start = torch.zeros_like(labels[:, :1])
        decoder_input_ids = torch.cat([start, labels[:, :-1].clamp(min=0)], dim=1)
        logits = self.decode(decoder_input_ids, memory, attention_mask)
        return F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=-100)

    @torch.no_grad()
    def generate(self, input_ids, attention_mask, horizon):
        memory = self.encode(input_ids, attention_mask)
        out = torch.zeros_like(input_ids[:, :1])
        for _ in range(horizon):
            logits = self.decode(out, memory, attention_mask)
            out = torch.cat([out, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        return out[:, 1:]


def arrivals(n_countries, n_months, record_start):
    months = torch.arange(n_months, dtype=torch.float32)
    seasonal = 1 + 0.4 * torch.sin(2 * math.pi * (months - 3) / 12)
    base = torch.rand(n_countries, 1) * 500 + 50
    series = base * seasonal * (1 + 0.01 * months) * (1 + 0.05 * torch.randn(n_countries, n_months))
    series[months[None, :] < torch.tensor(record_start)[:, None]] = float("nan")
    series[torch.rand(n_countries, n_months) < 0.03] = float("nan")
    return series


if __name__ == "__main__":
    torch.manual_seed(0)
    tokenizer = MeanScaleUniformBins()
    series = arrivals(4, 72, record_start=[0, 12, 30, 0])
    context, future = series[:, :60], series[:, 60:]
    enc = tokenizer(context, return_tensors="pt")
    labels = tokenizer.label_input_transform(future, enc["scale"])
    model = ChronosLike()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(5):
        loss = model(enc["input_ids"], enc["attention_mask"], labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    tokens = model.generate(enc["input_ids"], enc["attention_mask"], horizon=12)
    forecast = tokenizer.output_transform(tokens, enc["scale"])
    print("ce %.4f" % loss.item(), "forecast", tuple(forecast.shape))
