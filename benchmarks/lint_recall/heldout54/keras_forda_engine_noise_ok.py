"""Engine fault detection from noise recordings of different durations (FordA-style).

A PyTorch port of the keras.io example "Timeseries classification with a Transformer model"
(FordA, classes -1 / 1 as 0 / 1), kept layer for layer: `transformer_encoder(inputs,
head_size, num_heads, ff_dim, dropout)` with `layers.MultiHeadAttention(key_dim=head_size)`,
kernel-size-1 `Conv1D` feed-forward blocks, `GlobalAveragePooling1D` and the MLP head of
`build_model`, behind a small `Conv1D` stem that gives the attention more than one channel.
Recordings of the test bench have different durations, so they are zero-padded behind a Keras
`Masking(mask_value=0.0)` layer whose `compute_mask` is carried to the attention and to the
pooling as Keras propagates `_keras_mask`.

Source: conventions.md 1 (Keras row, direction cheat-sheet); seed self_attention_mask_guide.txt 7 (Q1)
"""

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def make_recordings(n, rng):
    x = np.zeros((n, 120, 1), dtype=np.float32)
    y = rng.integers(0, 2, size=n)
    for i in range(n):
        length = rng.integers(60, 121)
        t = np.arange(length)
        signal = np.sin(2 * np.pi * t / rng.uniform(8, 12)) + 0.3 * np.sin(2 * np.pi * t / 3.1) + 0.3 * rng.normal(size=length)
        if y[i]:
            for start in rng.choice(length - 4, size=3, replace=False):
                signal[start:start + 3] += rng.choice([-1, 1]) * rng.uniform(2.5, 4.0)
        x[i, :length, 0] = (signal - signal.mean()) / signal.std()
    return x, y


class Masking(nn.Module):
    supports_masking = True

    def __init__(self, mask_value=0.0):
        super().__init__()
        self.mask_value = mask_value

    def compute_mask(self, inputs):
        return (inputs != self.mask_value).any(dim=-1)

    def forward(self, inputs):
        mask = self.compute_mask(inputs)
        return inputs * mask[..., None].to(inputs.dtype), mask


class MultiHeadAttention(nn.Module):
    def __init__(self, num_heads, key_dim, channels, dropout=0.0):
        super().__init__()
        self.num_heads, self.key_dim = num_heads, key_dim
        self.query_dense = nn.Linear(channels, num_heads * key_dim)
        self.key_dense = nn.Linear(channels, num_heads * key_dim)
        self.value_dense = nn.Linear(channels, num_heads * key_dim)
        self.output_dense = nn.Linear(num_heads * key_dim, channels)
        self.dropout = nn.Dropout(dropout)

    def forward(self, query, value, attention_mask=None):
        b, t, _ = query.shape
        q = self.query_dense(query).view(b, t, self.num_heads, self.key_dim).transpose(1, 2)
        k = self.key_dense(value).view(b, -1, self.num_heads, self.key_dim).transpose(1, 2)
        v = self.value_dense(value).view(b, -1, self.num_heads, self.key_dim).transpose(1, 2)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.key_dim)
        if attention_mask is not None:
            scores = scores.masked_fill(~attention_mask[:, None, None, :], float("-inf"))
        weights = self.dropout(torch.softmax(scores, dim=-1))
        return self.output_dense((weights @ v).transpose(1, 2).reshape(b, t, -1))


class TransformerEncoder(nn.Module):
    def __init__(self, channels, head_size, num_heads, ff_dim, dropout=0.0):
        super().__init__()
        self.attention = MultiHeadAttention(num_heads, head_size, channels, dropout)
        self.dropout1, self.dropout2 = nn.Dropout(dropout), nn.Dropout(dropout)
        self.norm1, self.norm2 = nn.LayerNorm(channels, eps=1e-6), nn.LayerNorm(channels, eps=1e-6)
        self.conv1 = nn.Conv1d(channels, ff_dim, kernel_size=1)
        self.conv2 = nn.Conv1d(ff_dim, channels, kernel_size=1)

    def forward(self, inputs, mask):
        x = self.norm1(self.dropout1(self.attention(inputs, inputs, attention_mask=mask)))
        res = x + inputs
        x = self.dropout2(F.relu(self.conv1(res.transpose(1, 2))))
        x = self.norm2(self.conv2(x).transpose(1, 2))
        return x + res


class GlobalAveragePooling1D(nn.Module):
    def forward(self, inputs, mask):
        mask = mask[..., None].to(inputs.dtype)
        return (inputs * mask).sum(dim=1) / mask.sum(dim=1)


class FordAModel(nn.Module):
    def __init__(self, channels=16, head_size=16, num_heads=4, ff_dim=32, num_transformer_blocks=2, mlp_units=(64,),
                 dropout=0.1, mlp_dropout=0.2, n_classes=2):
        super().__init__()
        self.masking = Masking(mask_value=0.0)
        self.stem = nn.Conv1d(1, channels, kernel_size=5, padding=2)
        self.blocks = nn.ModuleList(TransformerEncoder(channels, head_size, num_heads, ff_dim, dropout)
                                    for _ in range(num_transformer_blocks))
        self.pooling = GlobalAveragePooling1D()
        layers, width = [], channels
        for dim in mlp_units:
            layers += [nn.Linear(width, dim), nn.ReLU(), nn.Dropout(mlp_dropout)]
            width = dim
        self.mlp = nn.Sequential(*layers, nn.Linear(width, n_classes))

    def forward(self, inputs):
        x, mask = self.masking(inputs)
        x = F.relu(self.stem(x.transpose(1, 2))).transpose(1, 2)
        for block in self.blocks:
            x = block(x, mask)
        return self.mlp(self.pooling(x, mask))


def main():
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    x_train, y_train = make_recordings(512, rng)
    x_test, y_test = make_recordings(256, rng)
    model = FordAModel()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x_train, y_train = torch.from_numpy(x_train), torch.from_numpy(y_train)
    for epoch in range(5):
        model.train()
        order = torch.randperm(len(x_train))
        for i in range(0, len(order), 64):
            idx = order[i:i + 64]
            loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            accuracy = (model(torch.from_numpy(x_test)).argmax(-1).numpy() == y_test).mean()
        print("epoch %d  loss %.4f  test accuracy %.3f" % (epoch, loss.item(), accuracy))


if __name__ == "__main__":
    main()
