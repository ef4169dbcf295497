"""Encoder whose additive attention mask comes from staticmethod/classmethod factories.

`MaskConverter` follows the transformers 4.x `AttentionMaskConverter._expand_mask` recipe: a
2-D keep-mask (1/True = real token, 0/False = padding) is expanded to (B, 1, T, S), inverted
and filled with finfo(dtype).min, giving an additive mask (0 = attend, finfo.min = hidden)
for F.scaled_dot_product_attention. `MaskConverter.from_input_ids` builds the keep-mask from
the token ids.

Source: huggingface/transformers#32113 (boolean masks into the 4-D mask preparation) and
#32195, conventions.md §1 (HF 4.x AttentionMaskConverter row: masks inverted with `1 - mask`
and filled with finfo.min); torch refuses `-` on a bool tensor.
"""
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD_ID = 1


class MaskConverter:
    @staticmethod
    def expand_mask(mask: torch.Tensor, dtype: torch.dtype, tgt_len: Optional[int] = None):
        """(B, S) keep-mask -> (B, 1, T, S) additive mask, finfo(dtype).min at padding."""
        bsz, src_len = mask.shape
        tgt_len = tgt_len if tgt_len is not None else src_len
        expanded = mask[:, None, None, :].expand(bsz, 1, tgt_len, src_len)
        inverted = 1.0 - expanded  # expect: MC512 factory
        return inverted.to(dtype).masked_fill(inverted.bool(), torch.finfo(dtype).min)

    @classmethod
    def from_input_ids(cls, input_ids: torch.Tensor, dtype: torch.dtype = torch.float32):
        keep = input_ids.ne(PAD_ID)
        return cls.expand_mask(keep, dtype)


class EncoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.ln1 = nn.LayerNorm(dim)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x, attn_bias):
        b, n, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_bias)
        x = x + self.out(y.transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.ln2(x))


class RobertaLikeEncoder(nn.Module):
    def __init__(self, vocab: int = 60, dim: int = 32, heads: int = 4, layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, padding_idx=PAD_ID)
        self.layers = nn.ModuleList(EncoderLayer(dim, heads) for _ in range(layers))

    def forward(self, input_ids):
        x = self.embed(input_ids)
        attn_bias = MaskConverter.from_input_ids(input_ids, x.dtype)
        for layer in self.layers:
            x = layer(x, attn_bias)
        return x


if __name__ == "__main__":
    torch.manual_seed(0)
    model = RobertaLikeEncoder().eval()
    ids = torch.tensor([[0, 17, 23, 2, 1, 1], [0, 31, 8, 44, 9, 2]])  # PAD_ID = 1
    with torch.no_grad():
        batched = model(ids)[0, :4]
        alone = model(ids[:1, :4])[0]
    print("sentence 0 batched vs alone:", (batched - alone).abs().max().item())
