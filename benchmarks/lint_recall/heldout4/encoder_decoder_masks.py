"""Held-out 4: a translation model on nn.Transformer modules: a look-ahead mask made from a zero
matrix (the `== 0` test then matches every cell), a tokenizer's attention_mask handed to
nn.TransformerEncoder positionally where the key padding mask goes, and a GLM-style prefix mask
that does arithmetic on a boolean padding mask.

Source: pytorch/pytorch#29820 (`generate_square_subsequent_mask` filled `mask == 0` on a mask
whose values were not what the code assumed, and every position came out wrong),
pytorch/examples#784 (src_mask vs src_key_padding_mask: which argument is which),
zai-org/GLM-4-Voice#182 (`full_attention_mask -= padding_mask.unsqueeze(-1) - 1` and the proposed
`+=`, on a padding mask that is boolean: `-` on a bool tensor raises).
Surroundings: a module-level helper filling in place, the third positional argument of
nn.TransformerEncoder, the method form `.sub(1)` in an augmented assignment.
"""

import torch
import torch.nn as nn


def future_mask(size: int, device: torch.device) -> torch.Tensor:
    mask = torch.zeros(size, size, device=device)
    mask.triu_(1)
    mask.masked_fill_(mask == 0, float("-inf"))  # expect: MC504 inplace-helper
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
        memory = self.encoder(self.src_embed(src_ids), None, attention_mask.bool())  # expect: MC502 positional-encoder
        tgt_mask = future_mask(tgt_ids.size(1), tgt_ids.device)
        out = self.decoder(self.tgt_embed(tgt_ids), memory, tgt_mask=tgt_mask,
                           memory_key_padding_mask=attention_mask == 0)
        return self.generator(out)


def get_masks(input_ids: torch.Tensor, pad_token_id: int) -> torch.Tensor:
    batch_size, seq_length = input_ids.shape
    padding_mask = input_ids.ne(pad_token_id)
    full_attention_mask = torch.ones(batch_size, seq_length, seq_length, device=input_ids.device)
    full_attention_mask.tril_()
    full_attention_mask = full_attention_mask * padding_mask.unsqueeze(1)
    full_attention_mask += padding_mask.unsqueeze(-1).sub(1)  # expect: MC512 method-sub
    full_attention_mask = (full_attention_mask < 0.5).bool()
    return full_attention_mask.unsqueeze(1)
