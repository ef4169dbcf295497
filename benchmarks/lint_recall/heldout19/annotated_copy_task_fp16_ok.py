"""The Annotated Transformer's copy task, cut down to one layer and switched to float16 (correct twin).

A learner's adaptation of "The Annotated Transformer" (Harvard NLP): `subsequent_mask`, `Batch`
with `src_mask` / `tgt_mask`, the module-level `attention()`, `MultiHeadedAttention` and
`greedy_decode`. A `--fp16` flag calls `model.half()`, but the notebook's `masked_fill(mask == 0,
-1e9)` stayed: -1e9 does not fit in float16 (max 65504), the first half-precision forward raises.

Twin: fills with `torch.finfo(scores.dtype).min`, which fits float32 and float16 alike.

Source: NVIDIA/apex#1052 (value cannot be converted to type at::Half without overflow: -1e+09),
NVIDIA/apex#1105, facebookresearch/fairseq#3575; conventions.md §2.3 and §3 item 18.
"""
import argparse
import copy
import math

import torch
import torch.nn as nn


def clones(module, N):
    return nn.ModuleList([copy.deepcopy(module) for _ in range(N)])


def subsequent_mask(size):
    "Mask out subsequent positions."
    attn_shape = (1, size, size)
    subsequent = torch.triu(torch.ones(attn_shape), diagonal=1).type(torch.uint8)
    return subsequent == 0


def attention(query, key, value, mask=None, dropout=None):
    "Compute 'Scaled Dot Product Attention'"
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)
    p_attn = scores.softmax(dim=-1)
    if dropout is not None:
        p_attn = dropout(p_attn)
    return torch.matmul(p_attn, value), p_attn


class MultiHeadedAttention(nn.Module):
    def __init__(self, h, d_model, dropout=0.1):
        super(MultiHeadedAttention, self).__init__()
        assert d_model % h == 0
        self.d_k = d_model // h
        self.h = h
        self.linears = clones(nn.Linear(d_model, d_model), 4)
        self.attn = None
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, query, key, value, mask=None):
        if mask is not None:
            mask = mask.unsqueeze(1)
        nbatches = query.size(0)
        query, key, value = [
            lin(x).view(nbatches, -1, self.h, self.d_k).transpose(1, 2)
            for lin, x in zip(self.linears, (query, key, value))
        ]
        x, self.attn = attention(query, key, value, mask=mask, dropout=self.dropout)
        x = x.transpose(1, 2).contiguous().view(nbatches, -1, self.h * self.d_k)
        return self.linears[-1](x)


class TinyEncoderDecoder(nn.Module):
    "One encoder self-attention, one decoder self-attention and one source attention."
    def __init__(self, vocab, d_model=32, h=4):
        super().__init__()
        self.src_embed = nn.Embedding(vocab, d_model)
        self.tgt_embed = nn.Embedding(vocab, d_model)
        self.enc_attn, self.self_attn, self.src_attn = clones(MultiHeadedAttention(h, d_model, 0.0), 3)
        self.norm = nn.LayerNorm(d_model)
        self.generator = nn.Linear(d_model, vocab)

    def encode(self, src, src_mask):
        x = self.src_embed(src)
        return self.norm(x + self.enc_attn(x, x, x, src_mask))

    def decode(self, memory, src_mask, tgt, tgt_mask):
        x = self.tgt_embed(tgt)
        x = x + self.self_attn(x, x, x, tgt_mask)
        return self.norm(x + self.src_attn(x, memory, memory, src_mask))


class Batch:
    """Object for holding a batch of data with mask during training."""

    def __init__(self, src, tgt=None, pad=2):  # 2 = <blank>
        self.src = src
        self.src_mask = (src != pad).unsqueeze(-2)
        if tgt is not None:
            self.tgt = tgt[:, :-1]
            self.tgt_y = tgt[:, 1:]
            self.tgt_mask = self.make_std_mask(self.tgt, pad)
            self.ntokens = (self.tgt_y != pad).data.sum()

    @staticmethod
    def make_std_mask(tgt, pad):
        "Create a mask to hide padding and future words."
        tgt_mask = (tgt != pad).unsqueeze(-2)
        return tgt_mask & subsequent_mask(tgt.size(-1)).type_as(tgt_mask.data)


def greedy_decode(model, src, src_mask, max_len, start_symbol):
    memory = model.encode(src, src_mask)
    ys = torch.zeros(1, 1).fill_(start_symbol).type_as(src.data)
    for i in range(max_len - 1):
        out = model.decode(memory, src_mask, ys, subsequent_mask(ys.size(1)).type_as(src.data))
        _, next_word = torch.max(model.generator(out[:, -1]), dim=1)
        ys = torch.cat([ys, torch.zeros(1, 1).type_as(src.data).fill_(next_word.item())], dim=1)
    return ys


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--fp16", action="store_true", help="run the model in float16 (model.half())")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = TinyEncoderDecoder(vocab=11)
    if args.fp16:
        model = model.half()
    data = torch.randint(3, 11, (4, 10))
    data[:, 0] = 1
    data[1, 7:] = 2  # one padded sentence
    batch = Batch(data, data, pad=2)
    out = model.decode(model.encode(batch.src, batch.src_mask), batch.src_mask, batch.tgt, batch.tgt_mask)
    print("logits", model.generator(out).dtype, bool(torch.isfinite(model.generator(out)).all()))
    print(greedy_decode(model, data[:1], batch.src_mask[:1], max_len=10, start_symbol=1))
