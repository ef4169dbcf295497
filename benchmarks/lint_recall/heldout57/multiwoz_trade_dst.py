"""TRADE-style dialogue state tracker for MultiWOZ 2.1 (30 domain-slot pairs).

Per turn: the dialogue history is encoded by a GRU, the last system utterance by a small
self-attention block; each slot gets a gate (ptr / dontcare / none) and, for ptr, a value
copied from the history by a pointer decoder.

Source: huggingface/transformers PR #27114 and PR #26421 (conventions.md section 3 item 15),
NVIDIA-NeMo/Automodel PR #2658 (item 16), conventions.md section 2.3 and section 5 item 4.
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import Variable
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

USE_CUDA = torch.cuda.is_available()
PAD_token, SOS_token, EOS_token = 1, 3, 2
GATES = {'ptr': 0, 'dontcare': 1, 'none': 2}


def length_mask(lengths, max_len):
    return torch.arange(max_len, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)


class SystemActEncoder(nn.Module):
    def __init__(self, hidden):
        super(SystemActEncoder, self).__init__()
        self.q = nn.Linear(hidden, hidden)
        self.k = nn.Linear(hidden, hidden)
        self.v = nn.Linear(hidden, hidden)
        self.norm = nn.LayerNorm(hidden)

    def forward(self, x, keep):
        scores = torch.bmm(self.q(x), self.k(x).transpose(1, 2)) / math.sqrt(x.size(-1))
        neg = torch.finfo(scores.dtype).min
        row_bias = torch.zeros_like(scores).masked_fill(~keep.unsqueeze(2), neg)
        col_bias = torch.zeros_like(scores).masked_fill(~keep.unsqueeze(1), neg)
        bias = row_bias + col_bias  # expect: MC513 sum
        attn = F.softmax(scores + bias, dim=-1)
        h = self.norm(x + torch.bmm(attn, self.v(x)))
        weights = keep.unsqueeze(-1).type_as(h)
        return (h * weights).sum(1) / weights.sum(1).clamp(min=1.0)


class TRADE(nn.Module):
    def __init__(self, vocab_size, n_slots, hidden=400, dropout=0.2):
        super(TRADE, self).__init__()
        self.embedding = nn.Embedding(vocab_size, hidden, padding_idx=PAD_token)
        self.encoder = nn.GRU(hidden, hidden, batch_first=True, bidirectional=True)
        self.system_enc = SystemActEncoder(hidden)
        self.slot_emb = nn.Embedding(n_slots, hidden)
        self.decoder = nn.GRU(hidden, hidden, batch_first=True)
        self.gate = nn.Linear(3 * hidden, len(GATES))
        self.dropout = nn.Dropout(dropout)
        self.hidden = hidden

    def encode(self, story, story_lengths):
        emb = self.dropout(self.embedding(story))
        packed = pack_padded_sequence(emb, story_lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, h = self.encoder(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=story.size(1))
        out = out[:, :, :self.hidden] + out[:, :, self.hidden:]
        return out, (h[0] + h[1]).unsqueeze(0)

    def attend(self, enc, query, story_keep):
        scores = torch.bmm(enc, query.unsqueeze(2)).squeeze(2)
        scores = scores.masked_fill(~story_keep, -float('inf'))
        prob = F.softmax(scores, dim=1)
        return torch.bmm(prob.unsqueeze(1), enc).squeeze(1), scores

    def forward(self, data, max_res_len=10):
        story, story_lengths = data['context'], data['context_len']
        story_keep = length_mask(story_lengths, story.size(1))
        sys_keep = length_mask(data['sys_len'], data['sys'].size(1))
        enc, hidden = self.encode(story, story_lengths)
        sys_vec = self.system_enc(self.embedding(data['sys']), sys_keep)
        batch_size, n_slots = story.size(0), self.slot_emb.num_embeddings
        all_gates, all_points = [], []
        for s in range(n_slots):
            slot_ids = Variable(torch.LongTensor([s] * batch_size))
            slot = self.slot_emb(slot_ids.cuda() if USE_CUDA else slot_ids)
            h, inp, points = hidden, slot.unsqueeze(1), []
            for t in range(max_res_len):
                out, h = self.decoder(self.dropout(inp), h)
                ctx, scores = self.attend(enc, h.squeeze(0), story_keep)
                if t == 0:
                    all_gates.append(self.gate(torch.cat([h.squeeze(0), ctx, sys_vec], -1)))
                points.append(F.log_softmax(scores, dim=1))
                inp = self.embedding(story.gather(1, scores.argmax(1, keepdim=True)))
            all_points.append(torch.stack(points, 1))
        return torch.stack(all_gates, 1), torch.stack(all_points, 1)


def trade_loss(gates, points, data):
    gate_loss = F.cross_entropy(gates.reshape(-1, len(GATES)), data['gate_label'].reshape(-1))
    target, target_len = data['value_pos'], data['value_len']
    keep = length_mask(target_len.reshape(-1), target.size(-1)).view_as(target)
    nll = -points.gather(3, target.unsqueeze(3)).squeeze(3)
    ptr_loss = nll.masked_select(keep).mean()
    return gate_loss + ptr_loss


def joint_goal_accuracy(gates, points, data):
    pred_gate = gates.argmax(-1)
    pred_pos = points.argmax(-1)
    ok = (pred_gate == data['gate_label'])
    is_ptr = data['gate_label'] == GATES['ptr']
    keep = length_mask(data['value_len'].reshape(-1), pred_pos.size(-1)).view_as(pred_pos)
    same_value = ((pred_pos == data['value_pos']) | ~keep).all(-1)
    ok = ok & (~is_ptr | same_value)
    return ok.all(-1).float().mean().item()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--data', default='data/multiwoz21_trade.pt')
    parser.add_argument('--vocab_size', type=int, default=18311)
    parser.add_argument('--n_slots', type=int, default=30)
    parser.add_argument('--epochs', type=int, default=20)
    args = parser.parse_args()
    train_batches, dev_batches = torch.load(args.data)
    model = TRADE(args.vocab_size, args.n_slots)
    if USE_CUDA:
        model = model.cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(args.epochs):
        model.train()
        for data in train_batches:
            gates, points = model(data)
            loss = trade_loss(gates, points, data)
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 10)
            optimizer.step()
        model.eval()
        jga = []
        with torch.no_grad():
            for d in dev_batches:
                gates, points = model(d)
                jga.append(joint_goal_accuracy(gates, points, d))
        print('epoch {} dev joint goal acc {:.4f}'.format(epoch, sum(jga) / len(jga)))


if __name__ == '__main__':
    main()
