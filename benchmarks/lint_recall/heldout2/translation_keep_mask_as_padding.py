"""Held-out 2: a keep mask (`tokens != PAD`, True = real token) used where True must mean padding.

Source: mlwithme/TransformerTranslation#2 and #6 (the maintainer's answer: a mask built as
`src != PAD_IDX` is True at real tokens, so it must be `== False` before masked_fill / before
key_padding_mask), facebookresearch/detr#96 (key_padding_mask True = ignored), and
huggingface/transformers#205 (attention_mask 1 = real token).
"""

import torch
import torch.nn as nn


class TranslationModel(nn.Module):
    PAD_IDX = 1

    def __init__(self, vocab: int, d_model: int = 64, nhead: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model, padding_idx=self.PAD_IDX)
        self.transformer = nn.Transformer(d_model, nhead, num_encoder_layers=2,
                                          num_decoder_layers=2, batch_first=True)
        self.out = nn.Linear(d_model, vocab)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        src_padding_mask = src != self.PAD_IDX
        tgt_mask = self.transformer.generate_square_subsequent_mask(tgt.size(1))
        out = self.transformer(self.embed(src), self.embed(tgt), tgt_mask=tgt_mask,
                               src_key_padding_mask=src_padding_mask)  # expect: MC511 module-kwarg
        return self.out(out)


def multi_head_attention_forward(q, k, v, input_ids, num_heads):
    bsz, tgt_len, _ = q.shape
    key_padding_mask = input_ids.ne(0)
    attn_output_weights = torch.bmm(q, k.transpose(1, 2))
    attn_output_weights = attn_output_weights.view(bsz, num_heads, tgt_len, -1)
    attn_output_weights = attn_output_weights.masked_fill(
        key_padding_mask.unsqueeze(1).unsqueeze(2), float("-inf"))  # expect: MC519 multiline
    return torch.softmax(attn_output_weights, dim=-1)


def encode(tokenizer, texts, layer: nn.MultiheadAttention, x: torch.Tensor) -> torch.Tensor:
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    out, _ = layer(x, x, x, key_padding_mask=batch["attention_mask"].bool())  # expect: MC502 tokenizer
    return out
