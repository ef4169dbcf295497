"""Federated text classification: FedAvg over non-IID clients with a small DistilBERT.

Layout of FedML's FedNLP (Lin et al., Findings of NAACL 2022): a Dirichlet label-skew partition
(partition_class_samples_with_dirichlet_distribution), TextClassificationTrainer with
train_model / test_model, FedAvgAPI with _client_sampling and _aggregate weighted by sample
counts, over a DistilBertForSequenceClassification in transformers' modeling_distilbert.py layout
(Embeddings, an SDPA MultiHeadSelfAttention with q_lin / k_lin / v_lin / out_lin, FFN,
TransformerBlock, pre_classifier on the [CLS] state) and a word-level tokenizer returning
input_ids / attention_mask, on a 20News-like synthetic corpus.

Source: pytorch/pytorch#103963, huggingface/transformers#32195, conventions.md §1 (SDPA row)
"""

import copy
import random
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class DistilBertConfig:
    vocab_size: int = 256
    max_position_embeddings: int = 64
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    hidden_dim: int = 128
    dropout: float = 0.1
    attention_dropout: float = 0.1
    seq_classif_dropout: float = 0.2
    num_labels: int = 4


class WordTokenizer:
    def __init__(self, vocab):
        self.vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3}
        for w in vocab:
            self.vocab.setdefault(w, len(self.vocab))

    def __call__(self, texts, padding=True, truncation=True, max_length=64, return_tensors="pt"):
        ids = [[2] + [self.vocab.get(w, 1) for w in t.split()][: max_length - 2] + [3] for t in texts]
        width = max(len(x) for x in ids)
        input_ids = torch.zeros(len(ids), width, dtype=torch.long)
        attention_mask = torch.zeros(len(ids), width, dtype=torch.long)
        for i, x in enumerate(ids):
            input_ids[i, : len(x)] = torch.tensor(x)
            attention_mask[i, : len(x)] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}


class Embeddings(nn.Module):
    def __init__(self, config: DistilBertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.dim, padding_idx=0)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.dim)
        self.LayerNorm = nn.LayerNorm(config.dim, eps=1e-12)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, input_ids):
        position_ids = torch.arange(input_ids.size(1), dtype=torch.long, device=input_ids.device)[None, :]
        embeddings = self.word_embeddings(input_ids) + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(embeddings))


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, config: DistilBertConfig):
        super().__init__()
        self.n_heads = config.n_heads
        self.dim = config.dim
        self.dropout_prob = config.attention_dropout
        self.q_lin = nn.Linear(config.dim, config.dim)
        self.k_lin = nn.Linear(config.dim, config.dim)
        self.v_lin = nn.Linear(config.dim, config.dim)
        self.out_lin = nn.Linear(config.dim, config.dim)

    def forward(self, query, key, value, mask):
        bs, q_length, dim = query.size()
        k_length = key.size(1)
        dim_per_head = self.dim // self.n_heads
        mask_reshp = (bs, 1, 1, k_length)

        def shape(x):
            return x.view(bs, -1, self.n_heads, dim_per_head).transpose(1, 2)

        def unshape(x):
            return x.transpose(1, 2).contiguous().view(bs, -1, self.n_heads * dim_per_head)

        q = shape(self.q_lin(query))
        k = shape(self.k_lin(key))
        v = shape(self.v_lin(value))
        attn_mask = mask.view(mask_reshp).to(torch.bool)
        context = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=self.dropout_prob if self.training else 0.0
        )
        return self.out_lin(unshape(context))


class TransformerBlock(nn.Module):
    def __init__(self, config: DistilBertConfig):
        super().__init__()
        self.attention = MultiHeadSelfAttention(config)
        self.sa_layer_norm = nn.LayerNorm(config.dim, eps=1e-12)
        self.ffn = nn.Sequential(nn.Linear(config.dim, config.hidden_dim), nn.GELU(),
                                 nn.Linear(config.hidden_dim, config.dim), nn.Dropout(config.dropout))
        self.output_layer_norm = nn.LayerNorm(config.dim, eps=1e-12)

    def forward(self, x, attn_mask):
        sa_output = self.sa_layer_norm(self.attention(query=x, key=x, value=x, mask=attn_mask) + x)
        return self.output_layer_norm(self.ffn(sa_output) + sa_output)


class DistilBertForSequenceClassification(nn.Module):
    def __init__(self, config: DistilBertConfig):
        super().__init__()
        self.embeddings = Embeddings(config)
        self.layer = nn.ModuleList([TransformerBlock(config) for _ in range(config.n_layers)])
        self.pre_classifier = nn.Linear(config.dim, config.dim)
        self.classifier = nn.Linear(config.dim, config.num_labels)
        self.dropout = nn.Dropout(config.seq_classif_dropout)

    def forward(self, input_ids, attention_mask):
        hidden_state = self.embeddings(input_ids)
        for layer_module in self.layer:
            hidden_state = layer_module(hidden_state, attention_mask)
        pooled_output = F.relu(self.pre_classifier(hidden_state[:, 0]))
        return self.classifier(self.dropout(pooled_output))


def partition_class_samples_with_dirichlet_distribution(labels, client_num, alpha, rng):
    idx_batch = [[] for _ in range(client_num)]
    for k in np.unique(labels):
        idx_k = np.where(labels == k)[0]
        rng.shuffle(idx_k)
        proportions = rng.dirichlet(np.repeat(alpha, client_num))
        cuts = (np.cumsum(proportions) * len(idx_k)).astype(int)[:-1]
        for client, part in enumerate(np.split(idx_k, cuts)):
            idx_batch[client] += part.tolist()
    for idx_j in idx_batch:
        rng.shuffle(idx_j)
    return idx_batch


class TextClassificationTrainer:
    def __init__(self, model, tokenizer, lr=1e-3, epochs=2, batch_size=32):
        self.model, self.tokenizer = model, tokenizer
        self.lr, self.epochs, self.batch_size = lr, epochs, batch_size

    def train_model(self, texts, labels):
        self.model.train()
        optimizer = torch.optim.AdamW(self.model.parameters(), lr=self.lr)
        for _ in range(self.epochs):
            for b in range(0, len(texts), self.batch_size):
                batch = self.tokenizer(texts[b:b + self.batch_size], padding=True, return_tensors="pt")
                loss = F.cross_entropy(self.model(**batch), torch.tensor(labels[b:b + self.batch_size]))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()

    @torch.no_grad()
    def test_model(self, texts, labels):
        self.model.eval()
        batch = self.tokenizer(texts, padding=True, return_tensors="pt")
        return (self.model(**batch).argmax(-1) == torch.tensor(labels)).float().mean().item()


class FedAvgAPI:
    def __init__(self, model, tokenizer, client_data, client_num_per_round):
        self.model, self.tokenizer, self.client_data = model, tokenizer, client_data
        self.client_num_per_round = client_num_per_round

    def _client_sampling(self, round_idx, client_num_in_total, client_num_per_round):
        np.random.seed(round_idx)
        return np.random.choice(range(client_num_in_total), client_num_per_round, replace=False)

    def _aggregate(self, w_locals):
        training_num = sum(n for n, _ in w_locals)
        averaged_params = copy.deepcopy(w_locals[0][1])
        for k in averaged_params.keys():
            averaged_params[k] = sum(params[k] * (n / training_num) for n, params in w_locals)
        return averaged_params

    def train(self, comm_round):
        w_global = self.model.state_dict()
        for round_idx in range(comm_round):
            w_locals = []
            for client_idx in self._client_sampling(round_idx, len(self.client_data), self.client_num_per_round):
                texts, labels = self.client_data[client_idx]
                if not texts:
                    continue
                local = copy.deepcopy(self.model)
                local.load_state_dict(w_global)
                TextClassificationTrainer(local, self.tokenizer).train_model(texts, labels)
                w_locals.append((len(texts), local.state_dict()))
            w_global = self._aggregate(w_locals)
            self.model.load_state_dict(w_global)
        return self.model


def newsgroup_corpus(n, rng, topics=4, words_per_topic=20, filler=120):
    texts, labels = [], []
    for _ in range(n):
        label = rng.randrange(topics)
        words = [f"f{rng.randrange(filler)}" for _ in range(rng.randint(6, 40))]
        for _ in range(rng.randint(1, 3)):
            words.insert(rng.randrange(len(words)), f"t{label}_{rng.randrange(words_per_topic)}")
        texts.append(" ".join(words))
        labels.append(label)
    return texts, labels


if __name__ == "__main__":
    rng = random.Random(0)
    torch.manual_seed(0)
    vocab = [f"f{i}" for i in range(120)] + [f"t{k}_{j}" for k in range(4) for j in range(20)]
    tokenizer = WordTokenizer(vocab)
    texts, labels = newsgroup_corpus(3000, rng)
    test_texts, test_labels = newsgroup_corpus(400, rng)
    parts = partition_class_samples_with_dirichlet_distribution(np.array(labels), 10, 1.0, np.random.RandomState(0))
    client_data = [([texts[i] for i in p], [labels[i] for i in p]) for p in parts]
    model = DistilBertForSequenceClassification(DistilBertConfig())
    api = FedAvgAPI(model, tokenizer, client_data, client_num_per_round=5)
    for stage in range(3):
        api.train(comm_round=5)
        acc = TextClassificationTrainer(model, tokenizer).test_model(test_texts, test_labels)
        print(f"after {5 * (stage + 1)} rounds: test accuracy {acc:.3f}")
    model.eval()
    with torch.no_grad():
        batch = tokenizer(test_texts[:16], padding=True, return_tensors="pt")
        i = int(batch["attention_mask"].sum(1).argmin())
        alone = model(**tokenizer(test_texts[i:i + 1], return_tensors="pt"))
        print(f"shortest text alone vs padded {(alone - model(**batch)[i:i + 1]).abs().max().item():.2e}")
