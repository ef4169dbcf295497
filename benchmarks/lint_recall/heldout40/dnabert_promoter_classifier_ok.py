"""DNABERT-style promoter classification of variable-length DNA fragments.

Sequences are cut into overlapping k-mers with ``seq2kmer`` and tokenised by a ``DNATokenizer``
over all 4^k k-mers plus the BERT special tokens, as in jerryji1993/DNABERT
(``motif/motif_utils.py`` and the ``prom-core`` fine-tuning task); the model is DNABERT's BERT
(``BertEmbeddings``, ``BertSelfAttention``, ``BertSelfOutput``, ``BertIntermediate``,
``BertOutput``, ``BertLayer``, ``BertPooler``, ``BertForSequenceClassification``) at a small
size. Promoters carry a TATA-box-like motif near a fixed offset upstream of the fragment's end.

Source: TransformerLensOrg/TransformerLens PR #366 (conventions.md §3 item 20), conventions.md §1
(values used in the wild) and §5 item 5, seed masked_fill_inplace.txt (例子)
"""

import itertools
import math
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def seq2kmer(seq, k):
    return " ".join(seq[x : x + k] for x in range(len(seq) + 1 - k))


class DNATokenizer:
    def __init__(self, k=3):
        self.k = k
        kmers = ["".join(p) for p in itertools.product("ACGT", repeat=k)]
        self.vocab = {t: i for i, t in enumerate(SPECIAL_TOKENS + kmers)}
        self.pad_token_id = self.vocab["[PAD]"]

    def __call__(self, sequences, max_length):
        ids = [
            [self.vocab["[CLS]"]]
            + [self.vocab.get(t, 1) for t in seq2kmer(s, self.k).split()][: max_length - 2]
            + [self.vocab["[SEP]"]]
            for s in sequences
        ]
        width = max(len(x) for x in ids)
        input_ids = torch.tensor([x + [self.pad_token_id] * (width - len(x)) for x in ids])
        attention_mask = (input_ids != self.pad_token_id).long()
        return {"input_ids": input_ids, "attention_mask": attention_mask}


@dataclass
class BertConfig:
    vocab_size: int = 69
    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    intermediate_size: int = 128
    max_position_embeddings: int = 128
    hidden_dropout_prob: float = 0.1
    num_labels: int = 2


class BertEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=0)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(2, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=1e-12)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids):
        position_ids = torch.arange(input_ids.size(1), device=input_ids.device)[None]
        embeddings = self.word_embeddings(input_ids) + self.position_embeddings(position_ids)
        embeddings = embeddings + self.token_type_embeddings(torch.zeros_like(input_ids))
        return self.dropout(self.LayerNorm(embeddings))


class BertSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)

    def transpose_for_scores(self, x):
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        return x.view(*new_x_shape).permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        attention_scores = attention_scores.masked_fill(attention_mask == 0, torch.finfo(attention_scores.dtype).min)
        attention_probs = nn.Softmax(dim=-1)(attention_scores)
        context_layer = torch.matmul(attention_probs, value_layer).permute(0, 2, 1, 3).contiguous()
        return context_layer.view(*context_layer.size()[:-2], -1)


class BertSelfOutput(nn.Module):
    def __init__(self, config, in_size):
        super().__init__()
        self.dense = nn.Linear(in_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=1e-12)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states, input_tensor):
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


BertOutput = BertSelfOutput


class BertLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = BertSelfAttention(config)
        self.attention_output = BertSelfOutput(config, config.hidden_size)
        self.intermediate = nn.Linear(config.hidden_size, config.intermediate_size)
        self.output = BertOutput(config, config.intermediate_size)

    def forward(self, hidden_states, attention_mask):
        attention_output = self.attention_output(
            self.attention(hidden_states, attention_mask), hidden_states
        )
        return self.output(F.gelu(self.intermediate(attention_output)), attention_output)


class BertForSequenceClassification(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embeddings = BertEmbeddings(config)
        self.layer = nn.ModuleList([BertLayer(config) for _ in range(config.num_hidden_layers)])
        self.pooler = nn.Sequential(nn.Linear(config.hidden_size, config.hidden_size), nn.Tanh())
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, input_ids, attention_mask, labels=None):
        extended_attention_mask = attention_mask[:, None, None, :]
        hidden_states = self.embeddings(input_ids)
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states, extended_attention_mask)
        logits = self.classifier(self.dropout(self.pooler(hidden_states[:, 0])))
        loss = None if labels is None else F.cross_entropy(logits, labels)
        return loss, logits


def make_prom_core(n, rng):
    sequences, labels = [], []
    for _ in range(n):
        length = rng.randint(40, 80)
        seq = [rng.choice("ACGT") for _ in range(length)]
        label = rng.random() < 0.5
        if label:
            start = length - 30 + rng.randint(-2, 2)
            seq[start : start + 6] = list("TATAAA")
        sequences.append("".join(seq))
        labels.append(int(label))
    return sequences, torch.tensor(labels)


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = random.Random(0)
    tokenizer = DNATokenizer(k=3)
    model = BertForSequenceClassification(BertConfig(vocab_size=len(tokenizer.vocab)))
    train_seqs, train_labels = make_prom_core(1536, rng)
    test_seqs, test_labels = make_prom_core(256, rng)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    for epoch in range(3):
        for start in range(0, 1536, 32):
            batch = tokenizer(train_seqs[start : start + 32], max_length=128)
            loss, _ = model(**batch, labels=train_labels[start : start + 32])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        _, logits = model(**tokenizer(test_seqs, max_length=128))
        _, alone = model(**tokenizer(test_seqs[:1], max_length=128))
    accuracy = (logits.argmax(-1) == test_labels).float().mean().item()
    print(
        f"accuracy {accuracy:.3f}, "
        f"first fragment alone vs padded {(alone[0] - logits[0]).abs().max():.2e}"
    )
