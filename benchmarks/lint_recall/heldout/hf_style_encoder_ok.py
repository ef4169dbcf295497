"""Held-out twin: the Hugging Face-style encoder with every conversion done right.

Source: transformers' get_extended_attention_mask ((1.0 - mask.to(dtype)) * finfo(dtype).min).
"""

from typing import Optional

import torch
from torch import nn


class TextEncoder(nn.Module):
    def __init__(self, vocab: int, hidden: int, heads: int, layers: int) -> None:
        super().__init__()
        self.embeddings = nn.Embedding(vocab, hidden)
        layer = nn.TransformerEncoderLayer(hidden, heads, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.dtype = torch.float16

    def get_extended_attention_mask(self, attention_mask: torch.Tensor) -> torch.Tensor:
        extended = attention_mask[:, None, None, :].to(dtype=self.dtype)
        return (1.0 - extended) * torch.finfo(self.dtype).min

    def forward(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        hidden = self.embeddings(input_ids)
        return self.encoder(hidden, src_key_padding_mask=attention_mask == 0)

    def forward_half(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        hidden = self.embeddings(input_ids).to(torch.float16)
        scores = torch.einsum("bqd,bkd->bqk", hidden, hidden)
        scores = scores.masked_fill(attention_mask[:, None, :] == 0, torch.finfo(scores.dtype).min)
        return scores.softmax(-1) @ hidden
