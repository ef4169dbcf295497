"""Informer-style encoder-decoder for the ECL electricity benchmark (321 clients, hourly).

The encoder reads one week (168 h) with attention kept inside each day; the decoder gets a
48 h start token plus 24 zero placeholders and predicts the next day.

Source: seed self_attention_mask_guide.txt section 6 (create_block_mask) and section 7 Q1.
"""
import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class TriangularCausalMask(object):
    def __init__(self, B, L, device='cpu'):
        mask_shape = [B, 1, L, L]
        with torch.no_grad():
            self._mask = torch.triu(torch.ones(mask_shape, dtype=torch.bool), diagonal=1).to(device)

    @property
    def mask(self):
        return self._mask


def day_block_bias(n, block):
    bias = torch.zeros(n, n)
    for start in range(0, n, block):
        bias[start:start + block, start:start + block] = 0  # expect: MC504 loop
    bias[bias == 0] = float('-inf')  # also: MC504
    bias[bias == 1] = 0.0
    return bias


class FullAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.05):
        super(FullAttention, self).__init__()
        self.n_heads = n_heads
        self.query = nn.Linear(d_model, d_model)
        self.key = nn.Linear(d_model, d_model)
        self.value = nn.Linear(d_model, d_model)
        self.out = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, queries, keys, values, attn_mask=None, attn_bias=None):
        B, L, _ = queries.shape
        S, H = keys.size(1), self.n_heads
        q = self.query(queries).view(B, L, H, -1)
        k = self.key(keys).view(B, S, H, -1)
        v = self.value(values).view(B, S, H, -1)
        scores = torch.einsum('blhe,bshe->bhls', q, k) / np.sqrt(q.size(-1))
        if attn_mask is not None:
            scores = scores.masked_fill(attn_mask.mask, -np.inf)
        if attn_bias is not None:
            scores = scores + attn_bias
        A = self.dropout(torch.softmax(scores, dim=-1))
        return self.out(torch.einsum('bhls,bshd->blhd', A, v).reshape(B, L, -1))


class DataEmbedding(nn.Module):
    def __init__(self, c_in, d_model, max_len=512):
        super(DataEmbedding, self).__init__()
        self.token = nn.Conv1d(c_in, d_model, 3, padding=1, padding_mode='circular')
        self.hour = nn.Embedding(24, d_model)
        self.weekday = nn.Embedding(7, d_model)
        self.position = nn.Embedding(max_len, d_model)

    def forward(self, x, x_mark):
        pos = torch.arange(x.size(1), device=x.device).unsqueeze(0)
        x = self.token(x.permute(0, 2, 1)).transpose(1, 2)
        return x + self.hour(x_mark[:, :, 0]) + self.weekday(x_mark[:, :, 1]) + self.position(pos)


class Block(nn.Module):
    def __init__(self, d_model, n_heads, cross=False, dropout=0.05):
        super(Block, self).__init__()
        self.attn = FullAttention(d_model, n_heads, dropout)
        self.cross = FullAttention(d_model, n_heads, dropout) if cross else None
        self.ff = nn.Sequential(nn.Conv1d(d_model, 4 * d_model, 1), nn.GELU(), nn.Conv1d(4 * d_model, d_model, 1))
        self.norms = nn.ModuleList([nn.LayerNorm(d_model) for _ in range(3)])

    def forward(self, x, attn_mask=None, attn_bias=None, memory=None):
        x = self.norms[0](x + self.attn(x, x, x, attn_mask=attn_mask, attn_bias=attn_bias))
        if self.cross is not None:
            x = self.norms[1](x + self.cross(x, memory, memory))
        return self.norms[2](x + self.ff(x.transpose(1, 2)).transpose(1, 2))


class BlockInformer(nn.Module):
    def __init__(self, args):
        super(BlockInformer, self).__init__()
        self.pred_len = args.pred_len
        self.enc_embedding = DataEmbedding(args.enc_in, args.d_model)
        self.dec_embedding = DataEmbedding(args.enc_in, args.d_model)
        self.encoder = nn.ModuleList([Block(args.d_model, args.n_heads) for _ in range(args.e_layers)])
        self.decoder = nn.ModuleList([Block(args.d_model, args.n_heads, cross=True) for _ in range(args.d_layers)])
        self.projection = nn.Linear(args.d_model, args.enc_in)
        self.register_buffer('enc_bias', day_block_bias(args.seq_len, args.block))

    def forward(self, x_enc, x_mark_enc, x_dec, x_mark_dec):
        enc = self.enc_embedding(x_enc, x_mark_enc)
        for layer in self.encoder:
            enc = layer(enc, attn_bias=self.enc_bias)
        dec = self.dec_embedding(x_dec, x_mark_dec)
        causal = TriangularCausalMask(dec.size(0), dec.size(1), device=dec.device)
        for layer in self.decoder:
            dec = layer(dec, attn_mask=causal, memory=enc)
        return self.projection(dec)[:, -self.pred_len:, :]


def make_windows(values, marks, args):
    xs, ys = [], []
    for s in range(0, len(values) - args.seq_len - args.pred_len, args.stride):
        xs.append(s)
        ys.append(s + args.seq_len - args.label_len)
    values = torch.from_numpy(values).type(torch.FloatTensor)
    marks = torch.from_numpy(marks).long()
    for s, r in zip(xs, ys):
        e, t = s + args.seq_len, r + args.label_len + args.pred_len
        yield values[s:e], marks[s:e], values[r:t], marks[r:t]


def train(args):
    raw = np.load(args.data)
    values = (raw['load'] - raw['load'].mean(0)) / (raw['load'].std(0) + 1e-5)
    model = BlockInformer(args)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    for epoch in range(args.epochs):
        losses = []
        for x, xm, y, ym in make_windows(values.astype('float32'), raw['marks'], args):
            dec_inp = torch.cat([y[:args.label_len], torch.zeros(args.pred_len, y.size(-1))], 0)
            pred = model(x[None], xm[None], dec_inp[None], ym[None])
            loss = F.mse_loss(pred, y[None, -args.pred_len:])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        print('epoch {} mse {:.4f}'.format(epoch, np.mean(losses)))
    return model


if __name__ == '__main__':
    parser = argparse.ArgumentParser(description='[BlockInformer] ECL forecasting')
    parser.add_argument('--data', default='./data/ECL.npz')
    parser.add_argument('--enc_in', type=int, default=321)
    parser.add_argument('--seq_len', type=int, default=168)
    parser.add_argument('--label_len', type=int, default=48)
    parser.add_argument('--pred_len', type=int, default=24)
    parser.add_argument('--block', type=int, default=24)
    parser.add_argument('--stride', type=int, default=24)
    parser.add_argument('--d_model', type=int, default=512)
    parser.add_argument('--n_heads', type=int, default=8)
    parser.add_argument('--e_layers', type=int, default=2)
    parser.add_argument('--d_layers', type=int, default=1)
    parser.add_argument('--lr', type=float, default=1e-4)
    parser.add_argument('--epochs', type=int, default=6)
    train(parser.parse_args())
