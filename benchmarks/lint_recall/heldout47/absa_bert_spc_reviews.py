"""Aspect-based sentiment analysis of restaurant reviews with BERT-SPC.

Imitates songyouwei/ABSA-PyTorch: `Tokenizer4Bert.text_to_sequence` with `pad_and_truncate`,
`ABSADataset` producing `concat_bert_indices` / `concat_segments_indices` / `polarity` for
"[CLS] sentence [SEP] aspect [SEP]", the `BERT_SPC` model (`bert`, `dropout`, `dense` on the
pooled output), an `opt` namespace with `inputs_cols`, and the `Instructor` with `_train`
and `_evaluate_acc_f1` (accuracy and macro-F1). The BERT it fine-tunes is a small one in
transformers' `modeling_bert.py` layout (`BertEmbeddings`, `BertSelfAttention` with
`transpose_for_scores`, `BertSelfOutput`, `BertIntermediate` / `BertOutput`, `BertLayer`,
`BertPooler`); like ABSA-PyTorch's calls, it is given no attention mask and derives the
padding from the token ids.
Synthetic data: SemEval-2014-restaurant-like sentences with two aspects of opposite or equal
polarity ("the pasta was delicious but the waiter was rude"), padded to `max_seq_len`.

Source: hyunwoongko/transformer PR #40 and bentrevett/pytorch-seq2seq#96 (conventions.md §3
item 21).
"""

import argparse
import math
import random

import numpy as np
import torch
import torch.nn as nn

ASPECTS = {"food": ["pasta", "pizza", "sushi", "steak"], "service": ["waiter", "staff", "service"],
           "price": ["price", "bill"], "ambience": ["music", "decor", "atmosphere"]}
OPINIONS = {0: ["awful", "rude", "bland", "overpriced", "noisy"],
            1: ["okay", "average", "fine"],
            2: ["delicious", "friendly", "great", "cozy", "fair"]}


def pad_and_truncate(sequence, maxlen, dtype="int64", padding="post", truncating="post", value=0):
    x = (np.ones(maxlen) * value).astype(dtype)
    trunc = sequence[-maxlen:] if truncating == "pre" else sequence[:maxlen]
    trunc = np.asarray(trunc, dtype=dtype)
    if padding == "post":
        x[: len(trunc)] = trunc
    else:
        x[-len(trunc):] = trunc
    return x


class Tokenizer4Bert:
    def __init__(self, max_seq_len, words):
        self.max_seq_len = max_seq_len
        self.vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3}
        for w in sorted(words):
            self.vocab.setdefault(w, len(self.vocab))

    def text_to_sequence(self, text, reverse=False, padding="post", truncating="post"):
        sequence = [self.vocab.get(w, 1) for w in text.split()]
        if len(sequence) == 0:
            sequence = [0]
        if reverse:
            sequence = sequence[::-1]
        return pad_and_truncate(sequence, self.max_seq_len, padding=padding, truncating=truncating)


class ABSADataset(torch.utils.data.Dataset):
    def __init__(self, samples, tokenizer):
        self.data = []
        for text, aspect, polarity in samples:
            text_len = len(text.split())
            aspect_len = len(aspect.split())
            concat_bert_indices = tokenizer.text_to_sequence("[CLS] " + text + " [SEP] " + aspect + " [SEP]")
            concat_segments_indices = [0] * (text_len + 2) + [1] * (aspect_len + 1)
            concat_segments_indices = pad_and_truncate(concat_segments_indices, tokenizer.max_seq_len)
            self.data.append({"concat_bert_indices": concat_bert_indices,
                              "concat_segments_indices": concat_segments_indices,
                              "polarity": polarity})

    def __getitem__(self, index):
        return self.data[index]

    def __len__(self):
        return len(self.data)


def get_extended_padding_mask(input_ids, pad_token_id=0):
    return (input_ids != pad_token_id).unsqueeze(1).unsqueeze(3)  # expect: MC514 helper


class BertEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=0)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(2, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=1e-12)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids, token_type_ids):
        position_ids = torch.arange(input_ids.size(1)).unsqueeze(0)
        embeddings = (self.word_embeddings(input_ids) + self.position_embeddings(position_ids)
                      + self.token_type_embeddings(token_type_ids))
        return self.dropout(self.LayerNorm(embeddings))


class BertSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.all_head_size = self.num_attention_heads * self.attention_head_size
        self.query = nn.Linear(config.hidden_size, self.all_head_size)
        self.key = nn.Linear(config.hidden_size, self.all_head_size)
        self.value = nn.Linear(config.hidden_size, self.all_head_size)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

    def transpose_for_scores(self, x):
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        return x.view(new_x_shape).permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        attention_scores = attention_scores.masked_fill(attention_mask == 0, -10000.0)  # also: MC514
        attention_probs = self.dropout(nn.functional.softmax(attention_scores, dim=-1))
        context_layer = torch.matmul(attention_probs, value_layer).permute(0, 2, 1, 3).contiguous()
        return context_layer.view(context_layer.size()[:-2] + (self.all_head_size,))


class BertLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = BertSelfAttention(config)
        self.attention_output = nn.Linear(config.hidden_size, config.hidden_size)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=1e-12)
        self.intermediate = nn.Linear(config.hidden_size, config.intermediate_size)
        self.output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.output_norm = nn.LayerNorm(config.hidden_size, eps=1e-12)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states, attention_mask):
        attention_output = self.attention(hidden_states, attention_mask)
        attention_output = self.attention_norm(
            self.dropout(self.attention_output(attention_output)) + hidden_states)
        intermediate_output = nn.functional.gelu(self.intermediate(attention_output))
        return self.output_norm(self.dropout(self.output(intermediate_output)) + attention_output)


class BertModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.layer = nn.ModuleList([BertLayer(config) for _ in range(config.num_hidden_layers)])
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, input_ids, token_type_ids=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        attention_mask = get_extended_padding_mask(input_ids, self.config.pad_token_id)
        hidden_states = self.embeddings(input_ids, token_type_ids)
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states, attention_mask)
        pooled_output = torch.tanh(self.pooler(hidden_states[:, 0]))
        return hidden_states, pooled_output


class BERT_SPC(nn.Module):
    def __init__(self, bert, opt):
        super().__init__()
        self.bert = bert
        self.dropout = nn.Dropout(opt.dropout)
        self.dense = nn.Linear(opt.bert_dim, opt.polarities_dim)

    def forward(self, inputs):
        text_bert_indices, bert_segments_ids = inputs[0], inputs[1]
        _, pooled_output = self.bert(text_bert_indices, token_type_ids=bert_segments_ids)
        return self.dense(self.dropout(pooled_output))


class Instructor:
    def __init__(self, opt, trainset, testset, bert):
        self.opt = opt
        self.model = BERT_SPC(bert, opt)
        self.trainset, self.testset = trainset, testset

    def _evaluate_acc_f1(self, data_loader):
        self.model.eval()
        t_targets_all, t_outputs_all = [], []
        with torch.no_grad():
            for t_batch in data_loader:
                t_inputs = [t_batch[col] for col in self.opt.inputs_cols]
                t_targets_all.append(t_batch["polarity"])
                t_outputs_all.append(self.model(t_inputs))
        targets = torch.cat(t_targets_all)
        preds = torch.argmax(torch.cat(t_outputs_all), -1)
        acc = (preds == targets).float().mean().item()
        f1s = []
        for c in range(self.opt.polarities_dim):
            tp = ((preds == c) & (targets == c)).sum().item()
            denom = (preds == c).sum().item() + (targets == c).sum().item()
            f1s.append(2 * tp / denom if denom else 0.0)
        return acc, sum(f1s) / len(f1s)

    def _train(self, criterion, optimizer, train_data_loader, test_data_loader):
        for i_epoch in range(self.opt.num_epoch):
            self.model.train()
            loss_total, n_total = 0.0, 0
            for sample_batched in train_data_loader:
                inputs = [sample_batched[col] for col in self.opt.inputs_cols]
                outputs = self.model(inputs)
                loss = criterion(outputs, sample_batched["polarity"])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                loss_total += loss.item() * len(outputs)
                n_total += len(outputs)
            acc, f1 = self._evaluate_acc_f1(test_data_loader)
            print(f"epoch: {i_epoch}, loss: {loss_total / n_total:.4f}, test_acc: {acc:.4f}, test_f1: {f1:.4f}")

    def run(self):
        train_data_loader = torch.utils.data.DataLoader(self.trainset, batch_size=self.opt.batch_size, shuffle=True)
        test_data_loader = torch.utils.data.DataLoader(self.testset, batch_size=self.opt.batch_size)
        optimizer = torch.optim.Adam(self.model.parameters(), lr=self.opt.lr, weight_decay=self.opt.l2reg)
        self._train(nn.CrossEntropyLoss(), optimizer, train_data_loader, test_data_loader)


def make_review(rng):
    a1, a2 = rng.sample(list(ASPECTS), 2)
    t1, t2 = rng.choice(ASPECTS[a1]), rng.choice(ASPECTS[a2])
    p1, p2 = rng.randrange(3), rng.randrange(3)
    joiner = "but" if p1 != p2 else "and"
    filler = " ".join(rng.choice(["we", "went", "there", "last", "night"]) for _ in range(rng.randrange(0, 5)))
    text = f"{filler} the {t1} was {rng.choice(OPINIONS[p1])} {joiner} the {t2} was {rng.choice(OPINIONS[p2])}".strip()
    return (text, t1, p1) if rng.random() < 0.5 else (text, t2, p2)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--num_epoch", default=10, type=int)
    opt = parser.parse_args()
    opt.batch_size, opt.lr, opt.l2reg, opt.dropout = 32, 2e-3, 0.0, 0.1
    opt.bert_dim, opt.polarities_dim, opt.max_seq_len = 48, 3, 24
    opt.inputs_cols = ["concat_bert_indices", "concat_segments_indices"]
    torch.manual_seed(5)
    rng = random.Random(5)
    samples = [make_review(rng) for _ in range(800)]
    words = {w for text, aspect, _ in samples for w in (text + " " + aspect).split()}
    tokenizer = Tokenizer4Bert(opt.max_seq_len, words)
    config = argparse.Namespace(vocab_size=len(tokenizer.vocab), hidden_size=opt.bert_dim,
                                num_hidden_layers=2, num_attention_heads=4, intermediate_size=96,
                                max_position_embeddings=opt.max_seq_len, hidden_dropout_prob=0.1,
                                attention_probs_dropout_prob=0.1, pad_token_id=0)
    trainset = ABSADataset(samples[:640], tokenizer)
    testset = ABSADataset(samples[640:], tokenizer)
    Instructor(opt, trainset, testset, BertModel(config)).run()


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
