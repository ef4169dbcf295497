"""Sequence-to-sequence semantic parser with attention-based copying for GeoQuery (Jia and Liang, 2016).

Questions go in, lambda-calculus logical forms come out; entity names are copied from the
question through the attention distribution (OpenNMT-py 0.x GlobalAttention layout).

Source: conventions.md section 1 (HF 4.x AttentionMaskConverter row),
huggingface/transformers#32195 (conventions.md section 3 item 25).
"""
import argparse
import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import Variable
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

USE_CUDA = torch.cuda.is_available()
PAD, BOS, EOS, UNK = 0, 1, 2, 3


def sequence_mask(lengths, max_len=None):
    batch_size = lengths.numel()
    max_len = max_len or lengths.max()
    return (torch.arange(0, max_len).type_as(lengths).repeat(batch_size, 1).lt(lengths.unsqueeze(1)))


class GlobalAttention(nn.Module):
    def __init__(self, dim):
        super(GlobalAttention, self).__init__()
        self.linear_in = nn.Linear(dim, dim, bias=False)
        self.linear_out = nn.Linear(dim * 2, dim, bias=False)

    def forward(self, source, memory_bank, memory_lengths=None):
        align = torch.bmm(self.linear_in(source), memory_bank.transpose(1, 2))
        if memory_lengths is not None:
            mask = sequence_mask(memory_lengths, max_len=align.size(-1)).unsqueeze(1)
            align = align.masked_fill(~mask, -float('inf'))
        align_vectors = F.softmax(align, -1)
        c = torch.bmm(align_vectors, memory_bank)
        attn_h = torch.tanh(self.linear_out(torch.cat([c, source], 2)))
        return attn_h, align_vectors


class CopyParser(nn.Module):
    def __init__(self, src_vocab, tgt_vocab, emb=100, hid=200, dropout=0.3):
        super(CopyParser, self).__init__()
        self.src_emb = nn.Embedding(src_vocab, emb, padding_idx=PAD)
        self.tgt_emb = nn.Embedding(tgt_vocab, emb, padding_idx=PAD)
        self.encoder = nn.LSTM(emb, hid // 2, batch_first=True, bidirectional=True)
        self.decoder = nn.LSTMCell(emb + hid, hid)
        self.attn = GlobalAttention(hid)
        self.gen = nn.Linear(hid, tgt_vocab)
        self.p_copy = nn.Linear(hid, 1)
        self.dropout = nn.Dropout(dropout)
        self.hid = hid

    def encode(self, src, src_lengths):
        packed = pack_padded_sequence(self.src_emb(src), src_lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, (h, c) = self.encoder(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=src.size(1))
        return out, (torch.cat([h[0], h[1]], -1), torch.cat([c[0], c[1]], -1))

    def forward(self, src, src_lengths, src_map, tgt_in):
        memory, state = self.encode(src, src_lengths)
        feed = memory.new_zeros(src.size(0), self.hid)
        dists = []
        tgt_in = tgt_in.masked_fill(tgt_in >= self.tgt_emb.num_embeddings, UNK)
        for t in range(tgt_in.size(1)):
            state = self.decoder(torch.cat([self.tgt_emb(tgt_in[:, t]), feed], -1), state)
            attn_h, align = self.attn(state[0].unsqueeze(1), memory, src_lengths)
            feed = self.dropout(attn_h.squeeze(1))
            gate = torch.sigmoid(self.p_copy(feed))
            copy = torch.bmm(align, src_map).squeeze(1)
            gen = F.pad(F.softmax(self.gen(feed), -1), (0, copy.size(1) - self.gen.out_features))
            dists.append((1 - gate) * gen + gate * copy)
        return torch.stack(dists, 1)


def make_src_map(src_ext, ext_vocab):
    return torch.zeros(src_ext.size(0), src_ext.size(1), ext_vocab).scatter_(2, src_ext.unsqueeze(2), 1.0)


def parser_loss(dists, tgt_out, tgt_lengths):
    keep = sequence_mask(tgt_lengths, max_len=tgt_out.size(1))
    nll = -torch.log(dists.gather(2, tgt_out.unsqueeze(2)).squeeze(2) + 1e-12)
    return nll.masked_select(keep).mean()


def train(args, data):
    model = CopyParser(args.src_vocab, args.tgt_vocab)
    if USE_CUDA:
        model.cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(args.epochs):
        random.shuffle(data)
        total = 0.0
        for src, src_lengths, src_ext, tgt, tgt_lengths in data:
            src_map = Variable(make_src_map(src_ext, args.tgt_vocab + src.size(1)))
            dists = model(src, src_lengths, src_map, tgt[:, :-1])
            loss = parser_loss(dists, tgt[:, 1:], tgt_lengths - 1)
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
            total += loss.item()
        print('epoch {} loss {:.4f}'.format(epoch, total / len(data)))
    return model


if __name__ == '__main__':
    parser = argparse.ArgumentParser()
    parser.add_argument('--data', default='data/geoquery_train.pt')
    parser.add_argument('--src_vocab', type=int, default=160)
    parser.add_argument('--tgt_vocab', type=int, default=90)
    parser.add_argument('--epochs', type=int, default=30)
    args = parser.parse_args()
    torch.save(train(args, torch.load(args.data)).state_dict(), 'geoquery_copy.pt')
