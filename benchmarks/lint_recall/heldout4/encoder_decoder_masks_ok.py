"""Held-out 4 twin: the look-ahead mask is made from ones, the encoder gets the padding positions
as its key padding mask, and the padding mask is cast to int before the arithmetic.

Source: pytorch/pytorch#29820, pytorch/examples#784, zai-org/GLM-4-Voice#182.
"""

import torch
import torch.nn as nn


def future_mask(size: int, device: torch.device) -> torch.Tensor:
    mask = torch.ones(size, size, device=device)
    mask.tril_()
    mask.masked_fill_(mask == 0, float("-inf"))
    mask.masked_fill_(mask == 1, 0.0)
    return mask


class Seq2Seq(nn.Module):
    def __init__(self, vocab: int, d_model: int, nhead: int, layers: int) -> None:
        super().__init__()
        self.src_embed = nn.Embedding(vocab, d_model)
        self.tgt_embed = nn.Embedding(vocab, d_model)
        enc_layer = nn.TransformerEncoderLayer(d_model, nhead, batch_first=True)
        dec_layer = nn.TransformerDecoderLayer(d_model, nhead, batch_first=True)
        self.encoder = nn.TransformerEncoder(enc_layer, layers)
        self.decoder = nn.TransformerDecoder(dec_layer, layers)
        self.generator = nn.Linear(d_model, vocab)

    def forward(self, src_ids: torch.Tensor, attention_mask: torch.Tensor, tgt_ids: torch.Tensor) -> torch.Tensor:
        memory = self.encoder(self.src_embed(src_ids), None, attention_mask == 0)
        tgt_mask = future_mask(tgt_ids.size(1), tgt_ids.device)
        out = self.decoder(self.tgt_embed(tgt_ids), memory, tgt_mask=tgt_mask,
                           memory_key_padding_mask=attention_mask == 0)
        return self.generator(out)


def get_masks(input_ids: torch.Tensor, pad_token_id: int) -> torch.Tensor:
    batch_size, seq_length = input_ids.shape
    padding_mask = input_ids.ne(pad_token_id).int()
    full_attention_mask = torch.ones(batch_size, seq_length, seq_length, device=input_ids.device)
    full_attention_mask.tril_()
    full_attention_mask = full_attention_mask * padding_mask.unsqueeze(1)
    full_attention_mask += padding_mask.unsqueeze(-1).sub(1)
    full_attention_mask = (full_attention_mask < 0.5).bool()
    return full_attention_mask.unsqueeze(1)
