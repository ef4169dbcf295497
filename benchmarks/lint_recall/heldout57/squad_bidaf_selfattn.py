"""BiDAF with a self-matching layer for SQuAD v1.1, on WordPiece tokens.

Questions and contexts are tokenised separately with the bert-base-uncased vocabulary
(transformers 2.x `batch_encode_plus`); embeddings are trained from scratch.

Source: seed self_attention_mask_guide.txt section 2 and section 7 Q1; conventions.md section 1
(direction cheat-sheet; HF attention_mask row), section 5 item 1.
"""
import argparse
import json

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from transformers import BertTokenizer

USE_CUDA = torch.cuda.is_available()


def encode_batch(tokenizer, examples, max_c=320, max_q=48):
    enc_c = tokenizer.batch_encode_plus([e['context'] for e in examples], max_length=max_c,
                                        pad_to_max_length=True, add_special_tokens=False, return_tensors='pt')
    enc_q = tokenizer.batch_encode_plus([e['question'] for e in examples], max_length=max_q,
                                        pad_to_max_length=True, add_special_tokens=False, return_tensors='pt')
    batch = {'c_ids': enc_c['input_ids'], 'c_mask': enc_c['attention_mask'],
             'q_ids': enc_q['input_ids'], 'q_mask': enc_q['attention_mask']}
    if 'start' in examples[0]:
        batch['start'] = torch.LongTensor([e['start'] for e in examples])
        batch['end'] = torch.LongTensor([e['end'] for e in examples])
    return batch


def run_rnn(rnn, x, keep):
    packed = pack_padded_sequence(x, keep.sum(1).cpu(), batch_first=True, enforce_sorted=False)
    out, _ = rnn(packed)
    return pad_packed_sequence(out, batch_first=True, total_length=x.size(1))[0]


class BiDAFSelfAttn(nn.Module):
    def __init__(self, vocab_size, emb=300, hid=100, heads=4, dropout=0.2):
        super(BiDAFSelfAttn, self).__init__()
        self.embed = nn.Embedding(vocab_size, emb, padding_idx=0)
        self.ctx_rnn = nn.LSTM(emb, hid, batch_first=True, bidirectional=True)
        self.w_c = nn.Linear(2 * hid, 1)
        self.w_q = nn.Linear(2 * hid, 1)
        self.w_cq = nn.Parameter(torch.ones(1, 1, 2 * hid) / (2 * hid) ** 0.5)
        self.model_rnn = nn.LSTM(8 * hid, hid, num_layers=2, batch_first=True, bidirectional=True, dropout=dropout)
        self.self_attn = nn.MultiheadAttention(2 * hid, heads, dropout=dropout)
        self.end_rnn = nn.LSTM(4 * hid, hid, batch_first=True, bidirectional=True)
        self.start_out = nn.Linear(4 * hid, 1)
        self.end_out = nn.Linear(4 * hid, 1)
        self.dropout = nn.Dropout(dropout)

    def attention_flow(self, c, q, c_keep, q_keep):
        s = self.w_c(c) + self.w_q(q).transpose(1, 2) + torch.bmm(c * self.w_cq, q.transpose(1, 2))
        a = F.softmax(s.masked_fill(~q_keep.unsqueeze(1), float('-inf')), dim=2)
        c2q = torch.bmm(a, q)
        b = F.softmax(s.max(dim=2)[0].masked_fill(~c_keep, float('-inf')), dim=1)
        q2c = torch.bmm(b.unsqueeze(1), c).expand_as(c)
        return torch.cat([c, c2q, c * c2q, c * q2c], dim=-1)

    def forward(self, batch):
        c_keep = batch['c_mask'].bool()
        q_keep = batch['q_mask'].bool()
        c = run_rnn(self.ctx_rnn, self.dropout(self.embed(batch['c_ids'])), c_keep)
        q = run_rnn(self.ctx_rnn, self.dropout(self.embed(batch['q_ids'])), q_keep)
        g = self.attention_flow(c, q, c_keep, q_keep)
        m = run_rnn(self.model_rnn, self.dropout(g), c_keep)
        x = m.transpose(0, 1)
        h, _ = self.self_attn(x, x, x, key_padding_mask=c_keep)  # expect: MC511 tokenizer
        h = h.transpose(0, 1)
        m = torch.cat([m, h], dim=-1)
        m2 = run_rnn(self.end_rnn, self.dropout(m), c_keep)
        start = self.start_out(m).squeeze(-1).masked_fill(~c_keep, float('-inf'))
        end = self.end_out(torch.cat([m2, h], dim=-1)).squeeze(-1)
        return start, end.masked_fill(~c_keep, float('-inf'))


def best_span(start, end, max_len=30):
    p = F.softmax(start, dim=1).unsqueeze(2) * F.softmax(end, dim=1).unsqueeze(1)
    p = torch.triu(p) - torch.triu(p, diagonal=max_len)
    flat = p.view(p.size(0), -1).argmax(dim=1)
    return flat // p.size(2), flat % p.size(2)


def exact_match(model, batches):
    model.eval()
    hits, n = 0, 0
    with torch.no_grad():
        for batch in batches:
            s, e = best_span(*model(batch))
            hits += ((s == batch['start']) & (e == batch['end'])).sum().item()
            n += s.size(0)
    return hits / max(n, 1)


def run(args):
    tokenizer = BertTokenizer.from_pretrained('bert-base-uncased')
    with open(args.train_file) as f:
        train = json.load(f)
    model = BiDAFSelfAttn(tokenizer.vocab_size)
    if USE_CUDA:
        model = model.cuda()
    optimizer = torch.optim.Adadelta(model.parameters(), lr=0.5)
    for epoch in range(args.epochs):
        model.train()
        for i in range(0, len(train), args.batch_size):
            batch = encode_batch(tokenizer, train[i:i + args.batch_size])
            if USE_CUDA:
                batch = dict((k, v.cuda()) for k, v in batch.items())
            start, end = model(batch)
            loss = F.cross_entropy(start, batch['start']) + F.cross_entropy(end, batch['end'])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if i % (100 * args.batch_size) == 0:
                print('epoch {} step {} loss {:.3f}'.format(epoch, i // args.batch_size, loss.item()))
        torch.save(model.state_dict(), 'bidaf_self_attn_{}.pt'.format(epoch))
        print('epoch {} train EM {:.3f}'.format(epoch, exact_match(model, [encode_batch(tokenizer, train[:500])])))


if __name__ == '__main__':
    parser = argparse.ArgumentParser()
    parser.add_argument('--train_file', default='data/squad_train_wordpiece.json')
    parser.add_argument('--batch_size', type=int, default=60)
    parser.add_argument('--epochs', type=int, default=12)
    run(parser.parse_args())
