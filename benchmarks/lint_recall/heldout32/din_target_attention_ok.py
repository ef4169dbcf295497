"""Deep Interest Network (DIN) CTR model in the style of DeepCTR-Torch.

Feature columns are declared with ``SparseFeat`` / ``VarLenSparseFeat`` records;
the user's behaviour sequence (clicked goods and their categories) is right-padded
with id 0 and its true length travels as ``hist_len``. The candidate item attends
over the behaviours through a local activation unit, and the pooled interest is
concatenated with the other embeddings for a Dice MLP.

Source: seed self_attention_mask_guide.txt §3 (常见误区) and §7 Q3, conventions.md §1 (direction cheat-sheet)
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class SparseFeat:
    name: str
    vocabulary_size: int
    embedding_dim: int = 8
    embedding_name: str | None = None

    @property
    def table(self) -> str:
        return self.embedding_name or self.name


@dataclass(frozen=True)
class VarLenSparseFeat:
    sparsefeat: SparseFeat
    maxlen: int
    length_name: str

    @property
    def name(self) -> str:
        return self.sparsefeat.name


class Dice(nn.Module):
    def __init__(self, emb_size, dim=2, epsilon=1e-8):
        super().__init__()
        self.bn = nn.BatchNorm1d(emb_size, eps=epsilon)
        self.sigmoid = nn.Sigmoid()
        self.alpha = nn.Parameter(torch.zeros((emb_size,)))
        self.dim = dim

    def forward(self, x):
        if self.dim == 2:
            x_p = self.sigmoid(self.bn(x))
            return self.alpha * (1 - x_p) * x + x_p * x
        x = torch.transpose(x, 1, 2)
        x_p = self.sigmoid(self.bn(x))
        out = self.alpha.unsqueeze(-1) * (1 - x_p) * x + x_p * x
        return torch.transpose(out, 1, 2)


class LocalActivationUnit(nn.Module):
    def __init__(self, hidden_units=(64, 32), embedding_dim=4):
        super().__init__()
        dims = [4 * embedding_dim] + list(hidden_units)
        self.dnn = nn.ModuleList([nn.Linear(dims[i], dims[i + 1]) for i in range(len(hidden_units))])
        self.activations = nn.ModuleList([Dice(dims[i + 1], dim=3) for i in range(len(hidden_units))])
        self.dense = nn.Linear(hidden_units[-1], 1)

    def forward(self, query, user_behavior):
        user_behavior_len = user_behavior.size(1)
        queries = query.expand(-1, user_behavior_len, -1)
        attention_input = torch.cat([queries, user_behavior, queries - user_behavior, queries * user_behavior], dim=-1)
        x = attention_input
        for linear, act in zip(self.dnn, self.activations):
            x = act(linear(x))
        return self.dense(x)


class AttentionSequencePoolingLayer(nn.Module):
    def __init__(self, att_hidden_units=(64, 32), embedding_dim=4, weight_normalization=False):
        super().__init__()
        self.weight_normalization = weight_normalization
        self.local_att = LocalActivationUnit(hidden_units=att_hidden_units, embedding_dim=embedding_dim)

    def forward(self, query, keys, keys_length):
        batch_size, max_length, _ = keys.size()
        keys_masks = torch.arange(max_length, device=keys_length.device).repeat(batch_size, 1)
        keys_masks = keys_masks < keys_length.view(-1, 1)
        keys_masks = keys_masks.unsqueeze(1).float()

        attention_score = self.local_att(query, keys)
        outputs = torch.transpose(attention_score, 1, 2)
        if self.weight_normalization:
            outputs = F.softmax(outputs.masked_fill(keys_masks == 0, torch.finfo(outputs.dtype).min), dim=-1)
        else:
            outputs = outputs * keys_masks
        return torch.matmul(outputs, keys)


class DIN(nn.Module):
    def __init__(self, feature_columns, history_feature_list, dnn_hidden_units=(64, 32),
                 att_hidden_size=(32, 16), att_weight_normalization=True):
        super().__init__()
        self.sparse_feature_columns = [fc for fc in feature_columns if isinstance(fc, SparseFeat)]
        self.varlen_sparse_feature_columns = [fc for fc in feature_columns if isinstance(fc, VarLenSparseFeat)]
        self.history_feature_list = history_feature_list
        tables = {}
        for fc in self.sparse_feature_columns + [v.sparsefeat for v in self.varlen_sparse_feature_columns]:
            tables.setdefault(fc.table, nn.Embedding(fc.vocabulary_size, fc.embedding_dim, padding_idx=0))
        self.embedding_dict = nn.ModuleDict(tables)
        att_emb_dim = sum(fc.embedding_dim for fc in self.sparse_feature_columns if fc.name in history_feature_list)
        self.attention = AttentionSequencePoolingLayer(
            att_hidden_units=att_hidden_size, embedding_dim=att_emb_dim, weight_normalization=att_weight_normalization
        )
        dnn_input = sum(fc.embedding_dim for fc in self.sparse_feature_columns) + att_emb_dim
        dims = [dnn_input] + list(dnn_hidden_units)
        self.dnn = nn.ModuleList([nn.Linear(dims[i], dims[i + 1]) for i in range(len(dnn_hidden_units))])
        self.dnn_act = nn.ModuleList([Dice(d) for d in dnn_hidden_units])
        self.dnn_linear = nn.Linear(dnn_hidden_units[-1], 1, bias=False)

    def forward(self, features):
        query_emb = torch.cat(
            [self.embedding_dict[fc.table](features[fc.name]) for fc in self.sparse_feature_columns
             if fc.name in self.history_feature_list], dim=-1).unsqueeze(1)
        keys_emb = torch.cat(
            [self.embedding_dict[v.sparsefeat.table](features[v.name]) for v in self.varlen_sparse_feature_columns
             if v.name.replace("hist_", "") in self.history_feature_list], dim=-1)
        keys_length = features[self.varlen_sparse_feature_columns[0].length_name]
        dnn_emb = torch.cat([self.embedding_dict[fc.table](features[fc.name]) for fc in self.sparse_feature_columns], dim=-1)

        hist = self.attention(query_emb, keys_emb, keys_length).squeeze(1)
        x = torch.cat([dnn_emb, hist], dim=-1)
        for linear, act in zip(self.dnn, self.dnn_act):
            x = act(linear(x))
        return torch.sigmoid(self.dnn_linear(x)).squeeze(-1)


def build_features(n=128, maxlen=12, n_goods=200, n_cates=20, seed=0):
    g = torch.Generator().manual_seed(seed)
    hist_len = torch.randint(1, maxlen + 1, (n,), generator=g)
    hist_goods = torch.randint(1, n_goods, (n, maxlen), generator=g)
    keep = torch.arange(maxlen)[None, :] < hist_len[:, None]
    hist_goods = hist_goods * keep
    goods = torch.randint(1, n_goods, (n,), generator=g)
    features = {
        "user": torch.randint(1, 50, (n,), generator=g),
        "gender": torch.randint(1, 3, (n,), generator=g),
        "goods_id": goods,
        "cate_id": goods % n_cates + 1,
        "hist_goods_id": hist_goods,
        "hist_cate_id": (hist_goods % n_cates + 1) * keep,
        "hist_len": hist_len,
    }
    label = ((hist_goods % n_cates + 1) == (goods % n_cates + 1)[:, None]).any(-1).float()
    return features, label


if __name__ == "__main__":
    torch.manual_seed(0)
    maxlen = 12
    feature_columns = [
        SparseFeat("user", 50, 8), SparseFeat("gender", 3, 4),
        SparseFeat("goods_id", 200, 8), SparseFeat("cate_id", 21, 4),
        VarLenSparseFeat(SparseFeat("hist_goods_id", 200, 8, embedding_name="goods_id"), maxlen, "hist_len"),
        VarLenSparseFeat(SparseFeat("hist_cate_id", 21, 4, embedding_name="cate_id"), maxlen, "hist_len"),
    ]
    model = DIN(feature_columns, ["goods_id", "cate_id"])
    features, label = build_features(maxlen=maxlen)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for epoch in range(30):
        model.train()
        loss = F.binary_cross_entropy(model(features), label)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("logloss", round(loss.item(), 4))

    model.eval()
    with torch.no_grad():
        short = {k: v[:4] for k, v in features.items()}
        wider = dict(short)
        for name in ("hist_goods_id", "hist_cate_id"):
            wider[name] = torch.cat([short[name], torch.zeros(4, 8, dtype=torch.long)], dim=1)
        junk = dict(short)
        junk["hist_goods_id"] = short["hist_goods_id"].masked_fill(short["hist_goods_id"] == 0, 5)
        base = model(short)
        print("extra padding:", (base - model(wider)).abs().max().item(),
              "padding ids changed:", (base - model(junk)).abs().max().item())
