"""Held-out: a Hugging Face-style text encoder wrapping nn.TransformerEncoder, with the mask
plumbing people write around a tokenizer's int64 attention_mask.

Source: huggingface/transformers#205 (attention_mask = 1 for real tokens, LongTensor),
huggingface/transformers#32195 (`1 - mask`), ZikangZhou/HiVT#44 (`~` on a non-bool mask),
huggingface/lerobot PR #710 (float32 finfo.min reaching fp16).
"""

from typing import Optional

import torch
from torch import nn


class EncoderConfig:
    vocab_size = 100
    hidden_size = 32
    num_heads = 4
    num_layers = 2
    pad_token_id = 0
    torch_dtype = torch.float16


class TextEncoder(nn.Module):
    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        self.config = config
        self.embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        layer = nn.TransformerEncoderLayer(config.hidden_size, config.num_heads, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, config.num_layers)
        self.dtype = config.torch_dtype

    def get_extended_attention_mask(self, attention_mask: torch.Tensor) -> torch.Tensor:
        extended = attention_mask[:, None, None, :].bool()
        extended = (1.0 - extended) * -10000.0  # expect: MC512 method
        return extended

    def forward(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        hidden = self.embeddings(input_ids)
        padding = ~attention_mask  # expect: MC518 parameter
        return self.encoder(hidden, src_key_padding_mask=padding)

    def forward_half(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        hidden = self.embeddings(input_ids).to(torch.float16)
        scores = torch.einsum("bqd,bkd->bqk", hidden, hidden)
        scores = scores.masked_fill(attention_mask[:, None, :] == 0, torch.finfo(torch.float32).min)  # expect: MC517 einsum
        return scores.softmax(-1) @ hidden

    def pooled(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        out = self.encoder(self.embeddings(input_ids), src_key_padding_mask=attention_mask.bool())  # expect: MC502 transformer-encoder
        return out[:, 0]
