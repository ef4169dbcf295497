"""Music Transformer (Huang et al., 2018) on MAESTRO v2 performance events.

388-event vocabulary (128 note-on, 128 note-off, 100 time-shift, 32 velocity), 2048-event
training windows, relative global attention with the memory-efficient skewing trick.

Source: seed self_attention_mask_guide.txt section 3 (常见误区) and section 7 Q3; conventions.md
section 1 (direction cheat-sheet, additive masks).
"""
import argparse
import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

USE_CUDA = torch.cuda.is_available()
VOCAB, PAD = 388, 388


def sequence_mask(lengths, max_len):
    return torch.arange(max_len, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)


class RelativeGlobalAttention(nn.Module):
    def __init__(self, d_model, h, max_seq, dropout=0.1):
        super(RelativeGlobalAttention, self).__init__()
        self.h, self.dh, self.max_seq = h, d_model // h, max_seq
        self.Wq = nn.Linear(d_model, d_model)
        self.Wk = nn.Linear(d_model, d_model)
        self.Wv = nn.Linear(d_model, d_model)
        self.fc = nn.Linear(d_model, d_model)
        self.E = nn.Parameter(torch.randn(max_seq, self.dh) * 0.02)
        self.dropout = nn.Dropout(dropout)

    def _split(self, x):
        return x.view(x.size(0), x.size(1), self.h, self.dh).transpose(1, 2)

    @staticmethod
    def _qe_masking(qe):
        length = qe.size(-1)
        invalid = sequence_mask(torch.arange(length - 1, -1, -1, device=qe.device), length)
        return qe * (~invalid).to(qe.dtype)

    @staticmethod
    def _skewing(t):
        B, H, L, M = t.size()
        padded = F.pad(t, (1, 0))
        return padded.reshape(B, H, M + 1, L)[:, :, 1:].reshape(B, H, L, M)

    def forward(self, x, mask):
        L = x.size(1)
        q, k, v = self._split(self.Wq(x)), self._split(self.Wk(x)), self._split(self.Wv(x))
        E = self.E[self.max_seq - L:]
        srel = self._skewing(self._qe_masking(torch.einsum('bhld,md->bhlm', q, E)))
        logits = (torch.matmul(q, k.transpose(-2, -1)) + srel) / math.sqrt(self.dh)
        logits = logits + mask
        weights = self.dropout(F.softmax(logits, dim=-1))
        out = torch.matmul(weights, v).transpose(1, 2).contiguous().view(x.size(0), L, -1)
        return self.fc(out)


class DecoderLayer(nn.Module):
    def __init__(self, d_model, h, max_seq, dropout=0.1):
        super(DecoderLayer, self).__init__()
        self.attn = RelativeGlobalAttention(d_model, h, max_seq, dropout)
        self.ffn = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.ReLU(), nn.Linear(4 * d_model, d_model))
        self.norm1 = nn.LayerNorm(d_model, eps=1e-6)
        self.norm2 = nn.LayerNorm(d_model, eps=1e-6)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask):
        x = self.norm1(x + self.dropout(self.attn(x, mask)))
        return self.norm2(x + self.dropout(self.ffn(x)))


class MusicTransformer(nn.Module):
    def __init__(self, d_model=512, h=8, num_layers=6, max_seq=2048, dropout=0.1):
        super(MusicTransformer, self).__init__()
        self.embedding = nn.Embedding(VOCAB + 1, d_model, padding_idx=PAD)
        self.layers = nn.ModuleList([DecoderLayer(d_model, h, max_seq, dropout) for _ in range(num_layers)])
        self.fc = nn.Linear(d_model, VOCAB)
        self.d_model = d_model
        future = torch.ones(max_seq, max_seq).triu(1).bool()
        self.register_buffer('future', torch.zeros(max_seq, max_seq).masked_fill(future, float('-inf')))

    def forward(self, x):
        L = x.size(1)
        h = self.embedding(x) * math.sqrt(self.d_model)
        for layer in self.layers:
            h = layer(h, self.future[:L, :L])
        return self.fc(h)

    def generate(self, primer, length=1024, temperature=1.0):
        self.eval()
        seq = primer
        with torch.no_grad():
            for _ in range(length):
                logits = self.forward(seq[:, -2048:])[:, -1] / temperature
                nxt = torch.multinomial(F.softmax(logits, dim=-1), 1)
                seq = torch.cat([seq, nxt], dim=1)
        return seq


def sample_windows(sequences, batch_size, length):
    batch = torch.full((batch_size, length + 1), PAD, dtype=torch.long)
    for i in range(batch_size):
        seq = random.choice(sequences)
        start = random.randint(0, max(0, len(seq) - length - 1))
        piece = torch.LongTensor(seq[start:start + length + 1])
        batch[i, :piece.size(0)] = piece
    return batch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--data', default='dataset/maestro_v2_events.pt')
    parser.add_argument('--max_seq', type=int, default=2048)
    parser.add_argument('--batch_size', type=int, default=2)
    parser.add_argument('--steps', type=int, default=300000)
    args = parser.parse_args()
    train_seqs = torch.load(args.data)['train']
    model = MusicTransformer(max_seq=args.max_seq)
    if USE_CUDA:
        model = model.cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    for step in range(args.steps):
        model.train()
        batch = sample_windows(train_seqs, args.batch_size, args.max_seq)
        if USE_CUDA:
            batch = batch.cuda()
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1), ignore_index=PAD)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 1000 == 0:
            print('step {} loss {:.4f}'.format(step, loss.item()))


if __name__ == '__main__':
    main()
