"""Code summarisation on CodeSearchNet (Python): function body in, first docstring sentence out.

RoBERTa BPE from the codebert-base checkpoint's tokenizer (transformers 2.x), a 6-layer
Transformer encoder trained from scratch and a GRU decoder with Luong attention; smoothed
BLEU-4 on the validation split.

Source: conventions.md section 1 (HF attention_mask row; direction cheat-sheet), section 2.9;
seed masked_fill_inplace.txt (语法; 作用).
"""
import argparse
import json
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import RobertaTokenizer

USE_CUDA = torch.cuda.is_available()


def encode_examples(tokenizer, examples, max_source_length=256, max_target_length=48):
    code = tokenizer.batch_encode_plus([' '.join(e['code_tokens']) for e in examples],
                                       max_length=max_source_length, pad_to_max_length=True, return_tensors='pt')
    doc = tokenizer.batch_encode_plus([' '.join(e['docstring_tokens']) for e in examples],
                                      max_length=max_target_length, pad_to_max_length=True, return_tensors='pt')
    return {'source_ids': code['input_ids'], 'source_mask': code['attention_mask'],
            'target_ids': doc['input_ids'], 'target_mask': doc['attention_mask']}


class LuongAttention(nn.Module):
    def __init__(self, hidden):
        super(LuongAttention, self).__init__()
        self.W = nn.Linear(hidden, hidden, bias=False)
        self.out = nn.Linear(2 * hidden, hidden)

    def forward(self, h, memory, memory_mask):
        scores = torch.bmm(memory, self.W(h).unsqueeze(2)).squeeze(2)
        scores = scores.masked_fill(memory_mask == 0, float('-inf'))
        attn = F.softmax(scores, dim=-1)
        context = torch.bmm(attn.unsqueeze(1), memory).squeeze(1)
        return torch.tanh(self.out(torch.cat([context, h], -1))), attn


class Seq2Seq(nn.Module):
    def __init__(self, vocab_size, hidden=512, heads=8, layers=6, max_len=512, pad_id=1):
        super(Seq2Seq, self).__init__()
        self.pad_id = pad_id
        self.embed = nn.Embedding(vocab_size, hidden, padding_idx=pad_id)
        self.pos = nn.Embedding(max_len, hidden)
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(hidden, heads, 4 * hidden, 0.1), layers)
        self.decoder = nn.GRUCell(2 * hidden, hidden)
        self.attention = LuongAttention(hidden)
        self.lm_head = nn.Linear(hidden, vocab_size)
        self.hidden = hidden

    def encode(self, source_ids, source_mask):
        pos = torch.arange(source_ids.size(1), device=source_ids.device).unsqueeze(0)
        x = (self.embed(source_ids) * math.sqrt(self.hidden) + self.pos(pos)).transpose(0, 1)
        memory = self.encoder(x, src_key_padding_mask=source_mask == 0).transpose(0, 1)
        keep = source_mask.unsqueeze(-1).type_as(memory)
        h0 = (memory * keep).sum(1) / keep.sum(1)
        return memory, h0

    def forward(self, source_ids, source_mask, target_ids):
        memory, h = self.encode(source_ids, source_mask)
        feed = torch.zeros_like(h)
        logits = []
        for t in range(target_ids.size(1) - 1):
            h = self.decoder(torch.cat([self.embed(target_ids[:, t]), feed], -1), h)
            feed, _ = self.attention(h, memory, source_mask)
            logits.append(self.lm_head(feed))
        return torch.stack(logits, 1)

    def generate(self, source_ids, source_mask, bos_id, eos_id, max_len=48):
        memory, h = self.encode(source_ids, source_mask)
        feed = torch.zeros_like(h)
        tok = torch.full((source_ids.size(0),), bos_id, dtype=torch.long, device=source_ids.device)
        out = []
        for _ in range(max_len):
            h = self.decoder(torch.cat([self.embed(tok), feed], -1), h)
            feed, _ = self.attention(h, memory, source_mask)
            tok = self.lm_head(feed).argmax(-1)
            out.append(tok)
        out = torch.stack(out, 1).tolist()
        return [seq[:seq.index(eos_id)] if eos_id in seq else seq for seq in out]


def summarization_loss(logits, target_ids, target_mask):
    active_loss = target_mask[..., 1:].ne(0).view(-1) == 1
    shift_logits = logits.contiguous().view(-1, logits.size(-1))[active_loss]
    shift_labels = target_ids[..., 1:].contiguous().view(-1)[active_loss]
    return F.cross_entropy(shift_logits, shift_labels)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--train_filename', default='dataset/python/train.jsonl')
    parser.add_argument('--train_batch_size', type=int, default=32)
    parser.add_argument('--num_train_epochs', type=int, default=10)
    parser.add_argument('--learning_rate', type=float, default=5e-4)
    args = parser.parse_args()
    tokenizer = RobertaTokenizer.from_pretrained('microsoft/codebert-base')
    with open(args.train_filename) as f:
        examples = [json.loads(line) for line in f]
    model = Seq2Seq(tokenizer.vocab_size, pad_id=tokenizer.pad_token_id)
    if USE_CUDA:
        model.cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.learning_rate)
    for epoch in range(args.num_train_epochs):
        model.train()
        for i in range(0, len(examples), args.train_batch_size):
            batch = encode_examples(tokenizer, examples[i:i + args.train_batch_size])
            if USE_CUDA:
                batch = dict((k, v.cuda()) for k, v in batch.items())
            logits = model(batch['source_ids'], batch['source_mask'], batch['target_ids'])
            loss = summarization_loss(logits, batch['target_ids'], batch['target_mask'])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print('epoch {} loss {:.4f}'.format(epoch, loss.item()))
        torch.save(model.state_dict(), 'checkpoint-epoch-{}.bin'.format(epoch))


if __name__ == '__main__':
    main()
