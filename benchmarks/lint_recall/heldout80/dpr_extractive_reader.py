"""DPR extractive reader for open-domain QA over retrieved passages.

For each question the reader gets M retrieved passages as `[CLS] question [SEP] title
[SEP] passage`, encodes the N x M sequences with a small BERT, predicts start / end logits
per token and a relevance logit per passage from [CLS]. Training uses the positive passage
first and samples negatives (relevance cross-entropy over the M passages, span loss
marginalised over all gold spans); inference picks the most relevant passage and the best
span inside its passage text (`get_best_spans`, spans of at most `max_answer_length`).

Source: hyunwoongko/transformer PR #40, bentrevett/pytorch-seq2seq#96 (conventions.md §3 item 21).
"""
import math
from collections import namedtuple

import torch
import torch.nn as nn
import torch.nn.functional as F

SpanPrediction = namedtuple("SpanPrediction", ["prediction_text", "span_score", "relevance_score", "passage_index"])
PAD_ID, CLS_ID, SEP_ID = 0, 101, 102


class BasicTokenizer:
    def __init__(self, vocab_size=2000):
        self.vocab_size = vocab_size

    def tokenize(self, text):
        return text.lower().replace("?", " ?").split()

    def convert_tokens_to_ids(self, tokens):
        return [200 + (sum(ord(c) * 37 ** i for i, c in enumerate(t)) % (self.vocab_size - 200)) for t in tokens]


def create_reader_input(tokenizer, question, passages, max_len=28):
    rows, offsets, words = [], [], []
    q = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(question))
    for title, text in passages:
        head = [CLS_ID] + q + [SEP_ID] + tokenizer.convert_tokens_to_ids(tokenizer.tokenize(title)) + [SEP_ID]
        toks = tokenizer.tokenize(text)[: max_len - len(head)]
        rows.append(head + tokenizer.convert_tokens_to_ids(toks))
        offsets.append(len(head))
        words.append(toks)
    width = max(len(r) for r in rows)
    input_ids = torch.tensor([r + [PAD_ID] * (width - len(r)) for r in rows])
    return input_ids, torch.tensor(offsets), words


class BertSelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.query, self.key, self.value = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.dense = nn.Linear(hidden, hidden)

    def forward(self, x, mask):
        b, n, d = x.shape
        q, k, v = (f(x).view(b, n, self.heads, self.head_dim).transpose(1, 2) for f in (self.query, self.key, self.value))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)
        return self.dense((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d))


class BertEncoder(nn.Module):
    def __init__(self, vocab_size=2000, hidden=64, heads=4, layers=2, pad_id=PAD_ID):
        super().__init__()
        self.pad_id = pad_id
        self.tok_emb = nn.Embedding(vocab_size, hidden, padding_idx=pad_id)
        self.pos_emb = nn.Embedding(64, hidden)
        self.attn = nn.ModuleList(BertSelfAttention(hidden, heads) for _ in range(layers))
        self.ffn = nn.ModuleList(nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))
                                 for _ in range(layers))
        self.norm1 = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(layers))
        self.norm2 = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(layers))

    def forward(self, input_ids):
        mask = (input_ids != self.pad_id)[:, None, :, None]  # expect: MC514 padmask
        x = self.tok_emb(input_ids) + self.pos_emb(torch.arange(input_ids.size(1)))
        for attn, ffn, n1, n2 in zip(self.attn, self.ffn, self.norm1, self.norm2):
            x = n1(x + attn(x, mask))
            x = n2(x + ffn(x))
        return x


class Reader(nn.Module):
    def __init__(self, encoder, hidden_size=64):
        super().__init__()
        self.encoder = encoder
        self.qa_outputs = nn.Linear(hidden_size, 2)
        self.qa_classifier = nn.Linear(hidden_size, 1)

    def forward(self, input_ids):
        N, M, L = input_ids.size()
        sequence_output = self.encoder(input_ids.view(N * M, L))
        start_logits, end_logits = self.qa_outputs(sequence_output).split(1, dim=-1)
        relevance_logits = self.qa_classifier(sequence_output[:, 0, :])
        return start_logits.view(N, M, L), end_logits.view(N, M, L), relevance_logits.view(N, M)


def compute_loss(start_positions, end_positions, answer_mask, start_logits, end_logits, relevance_logits):
    N, M, L = start_logits.shape
    switch_loss = F.cross_entropy(relevance_logits, torch.zeros(N, dtype=torch.long))
    start_lp = start_logits[:, 0].log_softmax(-1)
    end_lp = end_logits[:, 0].log_softmax(-1)
    span_lp = start_lp.gather(1, start_positions) + end_lp.gather(1, end_positions)
    span_lp = span_lp.masked_fill(~answer_mask, torch.finfo(span_lp.dtype).min)
    return switch_loss - torch.logsumexp(span_lp, dim=1).mean()


def get_best_spans(start_logits, end_logits, offset, words, max_answer_length=4):
    n = len(words)
    start, end = start_logits[offset:offset + n], end_logits[offset:offset + n]
    scores = start[:, None] + end[None, :]
    valid = torch.ones(n, n, dtype=torch.bool).triu() & ~torch.ones(n, n, dtype=torch.bool).triu(max_answer_length)
    scores = scores.masked_fill(~valid, float("-inf"))
    best = scores.flatten().argmax().item()
    s, e = divmod(best, n)
    return " ".join(words[s:e + 1]), scores[s, e].item()


if __name__ == "__main__":
    torch.manual_seed(0)
    tokenizer = BasicTokenizer()
    question = "what is the capital of australia?"
    passages = [("Canberra", "canberra is the capital city of australia located in the act"),
                ("Sydney", "sydney is the largest city in australia"),
                ("Wellington", "wellington is the capital of new zealand")]
    input_ids, offsets, words = create_reader_input(tokenizer, question, passages)
    reader = Reader(BertEncoder())
    optimizer = torch.optim.AdamW(reader.parameters(), lr=5e-4)
    start_positions = torch.tensor([[offsets[0].item(), offsets[0].item()]])
    end_positions = torch.tensor([[offsets[0].item(), offsets[0].item() + 1]])
    answer_mask = torch.tensor([[True, False]])
    for step in range(5):
        reader.train()
        start_logits, end_logits, relevance_logits = reader(input_ids[None])
        loss = compute_loss(start_positions, end_positions, answer_mask, start_logits, end_logits, relevance_logits)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print("loss", round(loss.item(), 4))
    reader.eval()
    with torch.no_grad():
        start_logits, end_logits, relevance_logits = reader(input_ids[None])
    best = relevance_logits[0].argmax().item()
    text, score = get_best_spans(start_logits[0, best], end_logits[0, best], offsets[best].item(), words[best])
    print(SpanPrediction(text, round(score, 3), round(relevance_logits[0, best].item(), 3), best))
