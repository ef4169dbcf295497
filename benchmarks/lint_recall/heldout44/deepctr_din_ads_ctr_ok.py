"""Display-ads click-through-rate prediction with the Deep Interest Network (Zhou et al., KDD 2018)
in the layout of shenweichen/DeepCTR-Torch.

``SparseFeat`` / ``VarLenSparseFeat`` / ``DenseFeat`` feature columns, ``build_input_features``
giving each column its slice of the flat input ``X``, an ``embedding_dict``,
``LocalActivationUnit`` and ``AttentionSequencePoolingLayer`` over the user's clicked items
(``keys_length`` from the history length column), ``SequencePoolingLayer`` for the other
behaviour sequence, ``DNN`` and ``PredictionLayer``. Synthetic impressions whose click depends
on the candidate ad's category and the user's recent clicks.

Source: seed self_attention_mask_guide.txt (section 3, common mistakes; section 7, Q3);
pytorch/pytorch#103963 (conventions.md section 3 item 6); conventions.md section 1 (direction
cheat-sheet).
"""

import random
from collections import OrderedDict, namedtuple

import torch
import torch.nn as nn
import torch.nn.functional as F

SparseFeat = namedtuple("SparseFeat", ["name", "vocabulary_size", "embedding_dim"])
VarLenSparseFeat = namedtuple("VarLenSparseFeat", ["sparsefeat", "maxlen", "length_name"])
DenseFeat = namedtuple("DenseFeat", ["name", "dimension"])
N_ITEMS, N_CATES, MAXLEN = 200, 20, 20


def build_input_features(feature_columns):
    features, start = OrderedDict(), 0
    for feat in feature_columns:
        if isinstance(feat, SparseFeat):
            features[feat.name] = (start, start + 1)
            start += 1
        elif isinstance(feat, DenseFeat):
            features[feat.name] = (start, start + feat.dimension)
            start += feat.dimension
        else:
            features[feat.sparsefeat.name] = (start, start + feat.maxlen)
            start += feat.maxlen
            features[feat.length_name] = (start, start + 1)
            start += 1
    return features


def simulate_impressions(n, rng, item_cate):
    rows, labels = [], []
    for _ in range(n):
        hist_len = rng.randint(1, MAXLEN)
        fav = rng.sample(range(N_CATES), 2)
        hist = [rng.choice([i for i in range(1, N_ITEMS) if item_cate[i] in fav]) if rng.random() < 0.7
                else rng.randrange(1, N_ITEMS) for _ in range(hist_len)]
        item = rng.randrange(1, N_ITEMS)
        p = 0.7 if item_cate[item] in fav else 0.03
        hist_pad = hist + [0] * (MAXLEN - hist_len)
        cate_pad = [item_cate[h] if h else 0 for h in hist_pad]
        rows.append([item, item_cate[item], rng.random()] + hist_pad + [hist_len] + cate_pad + [hist_len])
        labels.append(float(rng.random() < p))
    return torch.tensor(rows), torch.tensor(labels)


class LocalActivationUnit(nn.Module):
    def __init__(self, hidden_units=(36, 16), embedding_dim=8):
        super().__init__()
        dims = [4 * embedding_dim] + list(hidden_units)
        self.dnn = nn.Sequential(*[m for a, b in zip(dims[:-1], dims[1:]) for m in (nn.Linear(a, b), nn.Sigmoid())])
        self.dense = nn.Linear(dims[-1], 1)

    def forward(self, query, user_behavior):
        queries = query.expand(-1, user_behavior.size(1), -1)
        attention_input = torch.cat([queries, user_behavior, queries - user_behavior, queries * user_behavior], dim=-1)
        return self.dense(self.dnn(attention_input))


class AttentionSequencePoolingLayer(nn.Module):
    def __init__(self, att_hidden_units=(36, 16), embedding_dim=8, weight_normalization=True):
        super().__init__()
        self.weight_normalization = weight_normalization
        self.local_att = LocalActivationUnit(att_hidden_units, embedding_dim)

    def forward(self, query, keys, keys_length):
        batch_size, max_length, _ = keys.size()
        keys_masks = torch.arange(max_length, dtype=keys_length.dtype).repeat(batch_size, 1)
        keys_masks = (keys_masks < keys_length.view(-1, 1)).unsqueeze(1)
        outputs = torch.transpose(self.local_att(query, keys), 1, 2)
        if self.weight_normalization:
            outputs = torch.where(keys_masks, outputs, torch.full_like(outputs, torch.finfo(outputs.dtype).min))
            outputs = F.softmax(outputs, dim=-1)
        else:
            outputs = torch.where(keys_masks, outputs, torch.zeros_like(outputs))
        return torch.matmul(outputs, keys)


class SequencePoolingLayer(nn.Module):
    def forward(self, seq_value, seq_len):
        mask = torch.arange(seq_value.size(1))[None, :] < seq_len.view(-1, 1)
        mask = mask.unsqueeze(2).to(seq_value.dtype)
        return (seq_value * mask).sum(1, keepdim=True) / seq_len.view(-1, 1, 1).clamp(min=1).to(seq_value.dtype)


class DIN(nn.Module):
    def __init__(self, dnn_feature_columns, history_feature_list, dnn_hidden_units=(64, 32), att_weight_normalization=True):
        super().__init__()
        self.feature_index = build_input_features(dnn_feature_columns)
        self.sparse_feature_columns = [f for f in dnn_feature_columns if isinstance(f, SparseFeat)]
        self.varlen_sparse_feature_columns = [f for f in dnn_feature_columns if isinstance(f, VarLenSparseFeat)]
        self.history_feature_list = history_feature_list
        self.embedding_dict = nn.ModuleDict({f.name: nn.Embedding(f.vocabulary_size, f.embedding_dim) for f in self.sparse_feature_columns})
        self.attention = AttentionSequencePoolingLayer(embedding_dim=8 * len(history_feature_list), weight_normalization=att_weight_normalization)
        self.seq_pooling = SequencePoolingLayer()
        dnn_input = 8 * len(history_feature_list) * 3 + 1
        self.dnn = nn.Sequential(nn.Linear(dnn_input, dnn_hidden_units[0]), nn.ReLU(), nn.Linear(dnn_hidden_units[0], dnn_hidden_units[1]), nn.ReLU())
        self.dnn_linear = nn.Linear(dnn_hidden_units[1], 1, bias=False)
        self.bias = nn.Parameter(torch.zeros(1))

    def _slice(self, X, name):
        start, end = self.feature_index[name]
        return X[:, start:end]

    def forward(self, X):
        query = torch.cat([self.embedding_dict[f](self._slice(X, f).long()) for f in self.history_feature_list], -1)
        keys = torch.cat([self.embedding_dict[f](self._slice(X, "hist_" + f).long()) for f in self.history_feature_list], -1)
        keys_length = self._slice(X, "seq_length").long().squeeze(1)
        hist = self.attention(query, keys, keys_length)
        seq_pooled = self.seq_pooling(keys, keys_length)
        dense = self._slice(X, "price")
        dnn_input = torch.cat([query.squeeze(1), hist.squeeze(1), seq_pooled.squeeze(1), dense], -1)
        return torch.sigmoid(self.dnn_linear(self.dnn(dnn_input)) + self.bias).squeeze(-1)


def auc(scores, labels):
    pos, neg = scores[labels == 1], scores[labels == 0]
    return (pos[:, None] > neg[None, :]).float().mean().item()


def main():
    torch.manual_seed(0)
    rng = random.Random(0)
    item_cate = [0] + [rng.randrange(1, N_CATES) for _ in range(N_ITEMS - 1)]
    feature_columns = [
        SparseFeat("item_id", N_ITEMS, 8), SparseFeat("cate_id", N_CATES, 8), DenseFeat("price", 1),
        VarLenSparseFeat(SparseFeat("hist_item_id", N_ITEMS, 8), MAXLEN, "seq_length"),
        VarLenSparseFeat(SparseFeat("hist_cate_id", N_CATES, 8), MAXLEN, "hist_cate_length"),
    ]
    model = DIN(feature_columns, ["item_id", "cate_id"])
    x_train, y_train = simulate_impressions(20000, rng, item_cate)
    x_test, y_test = simulate_impressions(2000, rng, item_cate)
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    for epoch in range(6):
        model.train()
        perm = torch.randperm(len(y_train))
        total = 0.0
        for s in range(0, len(perm), 256):
            idx = perm[s : s + 256]
            loss = F.binary_cross_entropy(model(x_train[idx]), y_train[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(idx)
        model.eval()
        with torch.no_grad():
            pred = model(x_test)
        logloss = F.binary_cross_entropy(pred, y_test).item()
        print(f"epoch {epoch} train logloss {total / len(perm):.4f} test logloss {logloss:.4f} test AUC {auc(pred, y_test):.4f}")


if __name__ == "__main__":
    main()
