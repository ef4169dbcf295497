"""Context-aware product search re-ranking with self-attention over the result slate.

Layout of allegro/allRank (Pobrotyn et al., Context-Aware Learning to Rank with Self-Attention):
FCModel input layer, an annotated-transformer Encoder with LearnedPositionalEncoding over the
first-stage ranks, OutputLayer, LTRModel, the listNet loss and ndcg@k, with slates padded by
PADDED_Y_VALUE, on synthetic query-product features of an e-commerce search log.

Source: seed masked_fill_inplace.txt (区别, 非原地操作)
"""

import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

PADDED_Y_VALUE = -1
DEFAULT_EPS = 1e-10


def clones(module, N):
    return nn.ModuleList([copy.deepcopy(module) for _ in range(N)])


class FCModel(nn.Module):
    def __init__(self, sizes, input_norm, activation, dropout, n_features):
        super().__init__()
        sizes.insert(0, n_features)
        layers = [nn.Linear(size_in, size_out) for size_in, size_out in zip(sizes[:-1], sizes[1:])]
        self.input_norm = nn.LayerNorm(n_features) if input_norm else nn.Identity()
        self.activation = nn.Identity() if activation is None else getattr(nn, activation)()
        self.dropout = nn.Dropout(dropout or 0.0)
        self.layers = nn.ModuleList(layers)

    def forward(self, x):
        x = self.input_norm(x)
        for layer in self.layers:
            x = self.dropout(self.activation(layer(x)))
        return x


class LayerNorm(nn.Module):
    def __init__(self, features, eps=1e-6):
        super().__init__()
        self.a_2 = nn.Parameter(torch.ones(features))
        self.b_2 = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)
        return self.a_2 * (x - mean) / (std + self.eps) + self.b_2


class SublayerConnection(nn.Module):
    def __init__(self, size, dropout):
        super().__init__()
        self.norm = LayerNorm(size)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, sublayer):
        return x + self.dropout(sublayer(self.norm(x)))


def attention(query, key, value, mask=None, dropout=None):
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores.masked_fill(mask == 1, float("-inf"))  # expect: MC525 allrank
    p_attn = F.softmax(scores, dim=-1)
    if dropout is not None:
        p_attn = dropout(p_attn)
    return torch.matmul(p_attn, value), p_attn


class MultiHeadedAttention(nn.Module):
    def __init__(self, h, d_model, dropout=0.1):
        super().__init__()
        assert d_model % h == 0
        self.d_k = d_model // h
        self.h = h
        self.linears = clones(nn.Linear(d_model, d_model), 4)
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, query, key, value, mask=None):
        if mask is not None:
            mask = mask.unsqueeze(1)
        nbatches = query.size(0)
        query, key, value = [
            lin(x).view(nbatches, -1, self.h, self.d_k).transpose(1, 2)
            for lin, x in zip(self.linears, (query, key, value))
        ]
        x, self.attn = attention(query, key, value, mask=mask, dropout=self.dropout)
        x = x.transpose(1, 2).contiguous().view(nbatches, -1, self.h * self.d_k)
        return self.linears[-1](x)


class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.w_2(self.dropout(F.relu(self.w_1(x))))


class EncoderLayer(nn.Module):
    def __init__(self, size, self_attn, feed_forward, dropout):
        super().__init__()
        self.self_attn = self_attn
        self.feed_forward = feed_forward
        self.sublayer = clones(SublayerConnection(size, dropout), 2)
        self.size = size

    def forward(self, x, mask):
        x = self.sublayer[0](x, lambda x: self.self_attn(x, x, x, mask))
        return self.sublayer[1](x, self.feed_forward)


class LearnedPositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=64):
        super().__init__()
        self.pe = nn.Embedding(max_len + 1, d_model, padding_idx=-1)

    def forward(self, x, mask, indices):
        padded_indices = indices.masked_fill(mask, self.pe.padding_idx)
        padded_indices[padded_indices > self.pe.padding_idx] = self.pe.padding_idx
        return math.sqrt(self.pe.embedding_dim) * x + self.pe(padded_indices)


class Encoder(nn.Module):
    def __init__(self, layer, N, position):
        super().__init__()
        self.layers = clones(layer, N)
        self.norm = LayerNorm(layer.size)
        self.position = position

    def forward(self, x, mask, indices):
        if self.position:
            x = self.position(x, mask, indices)
        mask = mask.unsqueeze(-2)
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)


class OutputLayer(nn.Module):
    def __init__(self, d_model, d_output=1):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_output)

    def forward(self, x):
        return self.w_1(x).squeeze(dim=2)


class LTRModel(nn.Module):
    def __init__(self, input_layer, encoder, output_layer):
        super().__init__()
        self.input_layer = input_layer
        self.encoder = encoder
        self.output_layer = output_layer

    def prepare_for_output(self, x, mask, indices):
        return self.encoder(self.input_layer(x), mask, indices)

    def forward(self, x, mask, indices):
        return self.output_layer(self.prepare_for_output(x, mask, indices))


def make_model(n_features, d_model=64, N=2, h=4, d_ff=128, dropout=0.1):
    fc = FCModel([d_model], input_norm=True, activation="ReLU", dropout=dropout, n_features=n_features)
    layer = EncoderLayer(d_model, MultiHeadedAttention(h, d_model, dropout),
                         PositionwiseFeedForward(d_model, d_ff, dropout), dropout)
    encoder = Encoder(layer, N, LearnedPositionalEncoding(d_model))
    return LTRModel(fc, encoder, OutputLayer(d_model))


def listNet(y_pred, y_true, eps=DEFAULT_EPS, padded_value_indicator=PADDED_Y_VALUE):
    y_pred, y_true = y_pred.clone(), y_true.clone()
    mask = y_true == padded_value_indicator
    y_pred[mask] = float("-inf")
    y_true[mask] = float("-inf")
    preds_log = torch.log(F.softmax(y_pred, dim=1) + eps)
    return torch.mean(-torch.sum(F.softmax(y_true, dim=1) * preds_log, dim=1))


def dcg(y_pred, y_true, at, padding_indicator=PADDED_Y_VALUE):
    y_true, y_pred = y_true.clone(), y_pred.clone()
    mask = y_true == padding_indicator
    y_pred[mask] = float("-inf")
    y_true[mask] = 0.0
    _, indices = y_pred.sort(descending=True, dim=-1)
    true_sorted_by_preds = torch.gather(y_true, dim=1, index=indices)
    discounts = 1.0 / torch.log2(torch.arange(true_sorted_by_preds.shape[1], dtype=torch.float) + 2.0)
    gains = torch.pow(2, true_sorted_by_preds) - 1
    return torch.cumsum((gains * discounts)[:, :at], dim=1)[:, -1]


def ndcg(y_pred, y_true, at=10):
    idcg = dcg(y_true, y_true, at)
    ndcg_ = dcg(y_pred, y_true, at) / idcg
    ndcg_[idcg == 0] = 0.0
    return ndcg_


def sample_slates(n, n_features=24, slate_length=30, gen=None):
    lengths = torch.randint(6, slate_length + 1, (n,), generator=gen)
    X = torch.randn(n, slate_length, n_features, generator=gen)
    price = X[..., 0]
    valid = torch.arange(slate_length)[None, :] < lengths[:, None]
    mean_price = (price * valid).sum(1, keepdim=True) / lengths[:, None]
    utility = 1.5 * X[..., 1] + X[..., 2] - 2.0 * (price - mean_price) + 0.3 * torch.randn(price.shape, generator=gen)
    y = torch.bucketize(utility, torch.tensor([-1.0, 0.5, 1.5, 2.5])).float()
    first_stage = X[..., 1] + 0.8 * torch.randn(price.shape, generator=gen)
    first_stage = first_stage.masked_fill(~valid, float("-inf"))
    indices = first_stage.argsort(dim=1, descending=True).argsort(dim=1)
    X = X.masked_fill(~valid[..., None], 0.0)
    y = y.masked_fill(~valid, PADDED_Y_VALUE)
    return X, y, indices


if __name__ == "__main__":
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = make_model(n_features=24)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    X_train, y_train, idx_train = sample_slates(2048, gen=gen)
    X_test, y_test, idx_test = sample_slates(256, gen=gen)
    for epoch in range(6):
        model.train()
        perm = torch.randperm(2048)
        for b in range(0, 2048, 64):
            sel = perm[b:b + 64]
            mask = y_train[sel] == PADDED_Y_VALUE
            loss = listNet(model(X_train[sel], mask, idx_train[sel]), y_train[sel])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            scores = model(X_test, y_test == PADDED_Y_VALUE, idx_test)
        print(f"epoch {epoch} listNet {loss.item():.4f} ndcg@10 {ndcg(scores, y_test).mean().item():.4f}")
    with torch.no_grad():
        n = int((y_test[0] != PADDED_Y_VALUE).sum())
        alone = model(X_test[:1, :n], y_test[:1, :n] == PADDED_Y_VALUE, idx_test[:1, :n])
        print(f"first slate alone vs padded {(alone - scores[:1, :n]).abs().max().item():.2e}")
    print(f"first-stage ndcg@10 {ndcg(-idx_test.float(), y_test).mean().item():.4f}")
