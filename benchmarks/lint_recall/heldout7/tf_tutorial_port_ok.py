"""Held-out 7 (correct twin): the TensorFlow "Transformer model for language understanding" tutorial ported to
PyTorch by hand (create_padding_mask / create_look_ahead_mask, scaled_dot_product_attention with
`logits += mask * -1e9`, an nn.MultiheadAttention decoder and a tokenizer-driven predict()).

Source: conventions.md section 1 (TF tutorial convention: mask = 1 on padding and `+= mask * -1e9`;
stats.stackexchange.com/q/541448) with NVIDIA/apex#1052 (-1e9 overflows fp16, here through `+=`),
pytorch/pytorch#103963 (a float 0/1 look-ahead mask given to nn.MultiheadAttention, which adds it),
conventions.md section 1 and the seed guide (a tokenizer's keep-mask cast to bool given as
`key_padding_mask`, True = padding).
Surroundings: TF-style function names, `1 - torch.tril(...)` look-ahead mask, augmented addition,
a predict() that calls the tokenizer.
"""

import torch
import torch.nn as nn


def create_padding_mask(seq: torch.Tensor) -> torch.Tensor:
    seq = (seq == 0).float()
    return seq[:, None, None, :]  # (batch, 1, 1, seq_len)


def create_look_ahead_mask(size: int) -> torch.Tensor:
    return torch.ones(size, size, dtype=torch.bool).triu(1)  # (seq_len, seq_len), True = hidden


def scaled_dot_product_attention(q, k, v, mask=None):
    matmul_qk = q @ k.transpose(-1, -2)
    dk = k.shape[-1]
    scaled_attention_logits = matmul_qk / dk ** 0.5
    if mask is not None:
        scaled_attention_logits += mask * torch.finfo(scaled_attention_logits.dtype).min
    attention_weights = torch.softmax(scaled_attention_logits, dim=-1)
    return attention_weights @ v, attention_weights


class DecoderLayer(nn.Module):
    def __init__(self, d_model: int, num_heads: int, dff: int, rate: float = 0.1):
        super().__init__()
        self.mha1 = nn.MultiheadAttention(d_model, num_heads, dropout=rate, batch_first=True)
        self.ffn = nn.Sequential(nn.Linear(d_model, dff), nn.ReLU(), nn.Linear(dff, d_model))
        self.layernorm1 = nn.LayerNorm(d_model, eps=1e-6)
        self.layernorm2 = nn.LayerNorm(d_model, eps=1e-6)

    def forward(self, x: torch.Tensor, look_ahead_mask: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        attn1, _ = self.mha1(x, x, x, attn_mask=look_ahead_mask, key_padding_mask=padding)
        out1 = self.layernorm1(attn1 + x)
        return self.layernorm2(out1 + self.ffn(out1))


class Decoder(nn.Module):
    def __init__(self, vocab: int, d_model: int = 128, num_heads: int = 8, dff: int = 512, num_layers: int = 4):
        super().__init__()
        self.embedding = nn.Embedding(vocab, d_model)
        self.dec_layers = nn.ModuleList([DecoderLayer(d_model, num_heads, dff) for _ in range(num_layers)])
        self.final = nn.Linear(d_model, vocab)

    def forward(self, tar: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        look_ahead_mask = create_look_ahead_mask(tar.size(1))
        x = self.embedding(tar)
        for layer in self.dec_layers:
            x = layer(x, look_ahead_mask, padding)
        return self.final(x)


def predict(model: Decoder, tokenizer, sentence: str) -> torch.Tensor:
    enc = tokenizer([sentence], return_tensors="pt", padding="max_length", max_length=40)
    padding = enc["attention_mask"] == 0
    with torch.no_grad():
        return model(enc["input_ids"], padding).argmax(-1)
