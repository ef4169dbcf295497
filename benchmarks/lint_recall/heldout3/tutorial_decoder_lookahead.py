"""Held-out 3: look-ahead masks built the wrong way round in a from-scratch translation
Transformer, a word-level language model and a blog-post self-attention.

Source: hkproj/pytorch-transformer#19 (translate.py builds `torch.triu(torch.ones((1, n, n)),
diagonal=1)` as the decoder mask while the attention fills `mask == 0`: only the future is kept),
pytorch/examples#649 (word_language_model: "the attention mask is flipped (masking future elements,
rather than past)"), pbloem/former#10 (`torch.triu_indices(t, t, offset=0)` also masks the diagonal:
"an offset of 0 will create a row of all -inf, which gives a complete row of NaNs").
Surroundings: a greedy-decode loop, a model's mask method, a blog-style function.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    scores = (query @ key.transpose(-2, -1)) / math.sqrt(query.shape[-1])
    scores = scores.masked_fill(mask == 0, float("-inf"))
    return scores.softmax(dim=-1) @ value


def causal_mask(size: int) -> torch.Tensor:
    mask = torch.triu(torch.ones((1, size, size)), diagonal=1).type(torch.int)
    return mask == 0


def greedy_decode(model: nn.Module, source: torch.Tensor, source_mask: torch.Tensor,
                  sos_idx: int, eos_idx: int, max_len: int) -> torch.Tensor:
    encoder_output = model.encode(source, source_mask)
    decoder_input = torch.full((1, 1), sos_idx, dtype=source.dtype, device=source.device)
    while decoder_input.size(1) < max_len:
        n = decoder_input.size(1)
        decoder_mask = torch.triu(torch.ones((1, n, n)), diagonal=1).type(torch.int).type_as(source_mask)  # expect: MC521 decode-loop
        q = k = v = model.embed_tgt(decoder_input)
        out = attention(q, k, v, decoder_mask)  # also: MC521
        prob = model.project(out[:, -1])
        next_word = prob.argmax(dim=-1, keepdim=True)
        decoder_input = torch.cat([decoder_input, next_word.to(decoder_input.dtype)], dim=1)
        if next_word.item() == eos_idx:
            break
    return decoder_input.squeeze(0)


class TransformerLM(nn.Module):
    def __init__(self, ntoken: int, ninp: int, nhead: int, nhid: int, nlayers: int) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(ninp, nhead, nhid)
        self.transformer_encoder = nn.TransformerEncoder(layer, nlayers)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.decoder = nn.Linear(ninp, ntoken)
        self.ninp = ninp
        self.src_mask = None

    def _generate_square_subsequent_mask(self, sz: int) -> torch.Tensor:
        mask = torch.tril(torch.ones(sz, sz))  # expect: MC521 lm-mask
        mask = mask.masked_fill(mask == 1, float("-inf")).masked_fill(mask == 0, float(0.0))  # also: MC521
        return mask

    def forward(self, src: torch.Tensor) -> torch.Tensor:
        if self.src_mask is None or self.src_mask.size(0) != len(src):
            self.src_mask = self._generate_square_subsequent_mask(len(src)).to(src.device)
        x = self.encoder(src) * math.sqrt(self.ninp)
        return F.log_softmax(self.decoder(self.transformer_encoder(x, self.src_mask)), dim=-1)


def self_attention(x: torch.Tensor, mask: bool = True) -> torch.Tensor:
    b, t, e = x.size()
    dot = torch.bmm(x, x.transpose(1, 2)) / math.sqrt(e)
    if mask:
        indices = torch.triu_indices(t, t, offset=0)
        dot[:, indices[0], indices[1]] = float("-inf")  # expect: MC503 blog
    return torch.bmm(F.softmax(dot, dim=2), x)
