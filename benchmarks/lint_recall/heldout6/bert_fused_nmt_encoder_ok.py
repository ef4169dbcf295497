"""Held-out 6 twin: the BERT-fused encoder inverting the padding comparison with `~` for BERT.

Source: the inversion the error quoted on bert-nmt/bert-nmt#3 recommends (`~` / `bitwise_not()`).
"""

from typing import Dict, Optional

import torch
import torch.nn as nn


class TransformerEncoderWithBert(nn.Module):
    def __init__(self, embed_tokens: nn.Embedding, bert_encoder: nn.Module, layers: nn.ModuleList,
                 bert_pad_id: int, padding_idx: int = 1) -> None:
        super().__init__()
        self.embed_tokens = embed_tokens
        self.bert_encoder = bert_encoder
        self.layers = layers
        self.padding_idx = padding_idx
        self.bert_pad_id = bert_pad_id
        self.embed_scale = embed_tokens.embedding_dim ** 0.5

    def forward_bert(self, bert_input: torch.Tensor) -> Dict[str, torch.Tensor]:
        bert_encoder_padding_mask = bert_input.eq(self.bert_pad_id)
        bert_out, _ = self.bert_encoder(
            bert_input,
            output_all_encoded_layers=True,
            attention_mask=~bert_encoder_padding_mask,
        )
        return {"bert_encoder_out": bert_out[-1].permute(1, 0, 2).contiguous(),
                "bert_encoder_padding_mask": bert_encoder_padding_mask}

    def forward(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor,
                bert_input: Optional[torch.Tensor] = None) -> Dict[str, torch.Tensor]:
        x = self.embed_scale * self.embed_tokens(src_tokens)
        x = x.transpose(0, 1)
        encoder_padding_mask = src_tokens.eq(self.padding_idx)
        bert = self.forward_bert(bert_input) if bert_input is not None else {}
        for layer in self.layers:
            x = layer(x, encoder_padding_mask, bert.get("bert_encoder_out"),
                      bert.get("bert_encoder_padding_mask"))
        return {"encoder_out": x, "encoder_padding_mask": encoder_padding_mask, **bert}
