"""Transformer (base) for WMT'14 English-German, trained with apex mixed precision.

Annotated-Transformer layout (shared 37k BPE vocabulary); greedy_decode for newstest2014.

Source: NVIDIA/apex#1052, NVIDIA/apex#1105, facebookresearch/fairseq#3575 (conventions.md section 3 item 18, 2.3).
"""
import argparse
import copy
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import Variable

try:
    from apex import amp
except ImportError:
    amp = None

USE_CUDA = torch.cuda.is_available()
PAD, BOS, EOS = 0, 1, 2


def clones(module, n):
    return nn.ModuleList([copy.deepcopy(module) for _ in range(n)])


def subsequent_mask(size):
    attn_shape = (1, size, size)
    future = np.triu(np.ones(attn_shape), k=1).astype('uint8')
    return torch.from_numpy(future) == 0


class Batch(object):
    def __init__(self, src, trg=None, pad=PAD):
        self.src = src
        self.src_mask = (src != pad).unsqueeze(-2)
        if trg is not None:
            self.trg = trg[:, :-1]
            self.trg_y = trg[:, 1:]
            self.trg_mask = self.make_std_mask(self.trg, pad)
            self.ntokens = (self.trg_y != pad).data.sum()

    @staticmethod
    def make_std_mask(tgt, pad):
        tgt_mask = (tgt != pad).unsqueeze(-2)
        return tgt_mask & Variable(subsequent_mask(tgt.size(-1)).type_as(tgt_mask.data))


class MultiHeadedAttention(nn.Module):
    def __init__(self, h, d_model, dropout=0.1):
        super(MultiHeadedAttention, self).__init__()
        self.d_k = d_model // h
        self.h = h
        self.linears = clones(nn.Linear(d_model, d_model), 4)
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, query, key, value, mask=None):
        nbatches = query.size(0)
        if mask is not None:
            mask = mask.unsqueeze(1)
        query, key, value = [l(x).view(nbatches, -1, self.h, self.d_k).transpose(1, 2)
                             for l, x in zip(self.linears, (query, key, value))]
        scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)  # expect: MC501 method
        p_attn = self.dropout(F.softmax(scores, dim=-1))
        x = torch.matmul(p_attn, value)
        x = x.transpose(1, 2).contiguous().view(nbatches, -1, self.h * self.d_k)
        return self.linears[-1](x)


class Layer(nn.Module):
    def __init__(self, d_model, h, d_ff, dropout, cross=False):
        super(Layer, self).__init__()
        self.self_attn = MultiHeadedAttention(h, d_model, dropout)
        self.src_attn = MultiHeadedAttention(h, d_model, dropout) if cross else None
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Dropout(dropout),
                                nn.Linear(d_ff, d_model))
        self.norms = clones(nn.LayerNorm(d_model), 3)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, self_mask, memory=None, src_mask=None):
        y = self.norms[0](x)
        x = x + self.drop(self.self_attn(y, y, y, self_mask))
        if self.src_attn is not None:
            y = self.norms[1](x)
            x = x + self.drop(self.src_attn(y, memory, memory, src_mask))
        return x + self.drop(self.ff(self.norms[2](x)))


class EncoderDecoder(nn.Module):
    def __init__(self, src_vocab, tgt_vocab, n=6, d_model=512, d_ff=2048, h=8, dropout=0.1):
        super(EncoderDecoder, self).__init__()
        self.d_model = d_model
        self.src_embed = nn.Embedding(src_vocab, d_model, padding_idx=PAD)
        self.tgt_embed = nn.Embedding(tgt_vocab, d_model, padding_idx=PAD)
        self.encoder = clones(Layer(d_model, h, d_ff, dropout), n)
        self.decoder = clones(Layer(d_model, h, d_ff, dropout, cross=True), n)
        self.norm = nn.LayerNorm(d_model)
        self.generator = nn.Linear(d_model, tgt_vocab)
        position = torch.arange(0, 1024).unsqueeze(1).float()
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model))
        pe = torch.stack([torch.sin(position * div_term), torch.cos(position * div_term)], -1)
        self.register_buffer('pe', pe.view(1, 1024, d_model))

    def encode(self, src, src_mask):
        x = self.src_embed(src) * math.sqrt(self.d_model) + self.pe[:, :src.size(1)]
        for layer in self.encoder:
            x = layer(x, src_mask)
        return x

    def decode(self, memory, src_mask, tgt, tgt_mask):
        x = self.tgt_embed(tgt) * math.sqrt(self.d_model) + self.pe[:, :tgt.size(1)]
        for layer in self.decoder:
            x = layer(x, tgt_mask, memory, src_mask)
        return F.log_softmax(self.generator(self.norm(x)), dim=-1)

    def forward(self, src, tgt, src_mask, tgt_mask):
        return self.decode(self.encode(src, src_mask), src_mask, tgt, tgt_mask)


def greedy_decode(model, src, src_mask, max_len):
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), BOS, dtype=torch.long, device=src.device)
    for _ in range(max_len - 1):
        out = model.decode(memory, src_mask, ys, Variable(subsequent_mask(ys.size(1)).to(src.device)))
        ys = torch.cat([ys, out[:, -1].argmax(dim=-1, keepdim=True)], dim=1)
    return ys


def run_epoch(batches, model, optimizer, args):
    total, tokens = 0.0, 0
    for src, trg in batches:
        batch = Batch(src.cuda(), trg.cuda()) if USE_CUDA else Batch(src, trg)
        out = model(batch.src, batch.trg, batch.src_mask, batch.trg_mask)
        loss = F.nll_loss(out.view(-1, out.size(-1)), batch.trg_y.reshape(-1), ignore_index=PAD,
                          reduction='sum') / batch.ntokens.float()
        optimizer.zero_grad()
        if args.fp16:
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
        else:
            loss.backward()
        optimizer.step()
        total += loss.item() * batch.ntokens.item()
        tokens += batch.ntokens.item()
    return total / max(tokens, 1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--vocab', type=int, default=37000)
    parser.add_argument('--fp16', action='store_true')
    parser.add_argument('--opt_level', default='O2')
    parser.add_argument('--data', default='wmt14_en_de.pt')
    args = parser.parse_args()
    model = EncoderDecoder(args.vocab, args.vocab)
    model = model.cuda() if USE_CUDA else model
    optimizer = torch.optim.Adam(model.parameters(), lr=7e-4, betas=(0.9, 0.98), eps=1e-9)
    if args.fp16:
        model, optimizer = amp.initialize(model, optimizer, opt_level=args.opt_level)
    for epoch in range(10):
        print('epoch {} loss {:.3f}'.format(epoch, run_epoch(torch.load(args.data), model, optimizer, args)))


if __name__ == '__main__':
    main()
