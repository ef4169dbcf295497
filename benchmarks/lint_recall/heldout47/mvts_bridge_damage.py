"""Structural health monitoring: damage-state classification of bridge vibration records.

Imitates gzerveas/mvts_transformer (Zerveas et al., KDD 2021) as used for supervised
classification: `TSTransformerEncoderClassiregressor` with `project_inp`, a learnable
positional encoding, `TransformerBatchNormEncoderLayer` inside `nn.TransformerEncoder`
(sequence-first, `src_key_padding_mask=~padding_masks`), the flattened `output_layer` over
`max_len` steps, `collate_superv` / `padding_mask` from lengths, and the `ClassificationDataset`
returning `(X, y, ID)`. A gradient-saliency helper ranks the accelerometers per record, for
locating the damage along the deck.
Synthetic data: Z24-like ambient records from 8 accelerometers, 60-120 steps, three states
(healthy, pier settlement, deck spalling) that lower modal frequencies and change mode shapes;
a few records have a dead channel.

Source: seed masked_fill_inplace.txt (注意: 梯度计算风险, 适用场景), seed
self_attention_mask_guide.txt §2 (key_padding_mask).
"""

import argparse
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

STATES = ["healthy", "pier_settlement", "deck_spalling"]
N_SENSORS = 8


def _get_activation_fn(activation):
    if activation == "relu":
        return F.relu
    elif activation == "gelu":
        return F.gelu
    raise ValueError(f"activation should be relu/gelu, not {activation}")


class LearnablePositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout=0.1, max_len=1024):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        self.pe = nn.Parameter(torch.empty(max_len, 1, d_model))
        nn.init.uniform_(self.pe, -0.02, 0.02)

    def forward(self, x):
        x = x + self.pe[: x.size(0), :]
        return self.dropout(x)


class TransformerBatchNormEncoderLayer(nn.Module):
    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu"):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout)
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.norm1 = nn.BatchNorm1d(d_model, eps=1e-5)
        self.norm2 = nn.BatchNorm1d(d_model, eps=1e-5)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.activation = _get_activation_fn(activation)

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        src2 = self.self_attn(src, src, src, attn_mask=src_mask,
                              key_padding_mask=src_key_padding_mask)[0]
        src = src + self.dropout1(src2)
        src = src.permute(1, 2, 0)
        src = self.norm1(src)
        src = src.permute(2, 0, 1)
        src2 = self.linear2(self.dropout(self.activation(self.linear1(src))))
        src = src + self.dropout2(src2)
        src = src.permute(1, 2, 0)
        src = self.norm2(src)
        return src.permute(2, 0, 1)


class TSTransformerEncoderClassiregressor(nn.Module):
    def __init__(self, feat_dim, max_len, d_model, n_heads, num_layers, dim_feedforward,
                 num_classes, dropout=0.1, activation="gelu"):
        super().__init__()
        self.max_len = max_len
        self.d_model = d_model
        self.n_heads = n_heads
        self.project_inp = nn.Linear(feat_dim, d_model)
        self.pos_enc = LearnablePositionalEncoding(d_model, dropout=dropout, max_len=max_len)
        encoder_layer = TransformerBatchNormEncoderLayer(d_model, self.n_heads, dim_feedforward,
                                                         dropout, activation=activation)
        self.transformer_encoder = nn.TransformerEncoder(encoder_layer, num_layers,
                                                         enable_nested_tensor=False)
        self.act = _get_activation_fn(activation)
        self.dropout1 = nn.Dropout(dropout)
        self.feat_dim = feat_dim
        self.num_classes = num_classes
        self.output_layer = nn.Linear(d_model * max_len, num_classes)

    def forward(self, X, padding_masks):
        inp = X.permute(1, 0, 2)
        inp = self.project_inp(inp) * math.sqrt(self.d_model)
        inp = self.pos_enc(inp)
        output = self.transformer_encoder(inp, src_key_padding_mask=~padding_masks)
        output = self.act(output)
        output = output.permute(1, 0, 2)
        output = self.dropout1(output)
        output = output * padding_masks.unsqueeze(-1)
        output = output.reshape(output.shape[0], -1)
        return self.output_layer(output)


class ClassificationDataset(torch.utils.data.Dataset):
    def __init__(self, n_records, seed):
        rng = np.random.default_rng(seed)
        base_freqs = np.array([0.11, 0.27, 0.41])
        shapes = np.stack([np.sin((m + 1) * np.pi * (np.arange(N_SENSORS) + 0.5) / N_SENSORS)
                           for m in range(3)])
        self.records = []
        for ID in range(n_records):
            state = int(rng.integers(len(STATES)))
            length = int(rng.integers(60, 121))
            freqs = base_freqs * (1.0 + 0.02 * rng.normal())
            mode_shapes = shapes.copy()
            if state == 1:
                freqs = freqs * np.array([0.86, 0.97, 0.99])
                mode_shapes[0, : N_SENSORS // 2] *= 0.6
            elif state == 2:
                freqs = freqs * np.array([0.99, 0.9, 0.93])
                mode_shapes[1, N_SENSORS // 2:] *= 1.5
            t = np.arange(length)[:, None]
            phases = rng.uniform(0, 2 * np.pi, size=3)
            modal = np.stack([np.sin(2 * np.pi * f * t[:, 0] + p) for f, p in zip(freqs, phases)], 1)
            X = modal @ mode_shapes + 0.3 * rng.normal(size=(length, N_SENSORS))
            sensor_ok = np.ones(N_SENSORS, dtype=bool)
            if rng.random() < 0.15:
                sensor_ok[int(rng.integers(N_SENSORS))] = False
            X[:, ~sensor_ok] = 0.0
            self.records.append((torch.tensor(X, dtype=torch.float32), torch.tensor(state),
                                 torch.from_numpy(sensor_ok), ID))

    def __len__(self):
        return len(self.records)

    def __getitem__(self, ind):
        return self.records[ind]


def padding_mask(lengths, max_len=None):
    batch_size = lengths.numel()
    max_len = max_len or int(lengths.max())
    return (torch.arange(0, max_len, device=lengths.device).type_as(lengths)
            .repeat(batch_size, 1).lt(lengths.unsqueeze(1)))


def collate_superv(data, max_len=None):
    batch_size = len(data)
    features, labels, sensor_ok, IDs = zip(*data)
    lengths = [X.shape[0] for X in features]
    if max_len is None:
        max_len = max(lengths)
    X = torch.zeros(batch_size, max_len, features[0].shape[-1])
    for i in range(batch_size):
        end = min(lengths[i], max_len)
        X[i, :end, :] = features[i][:end, :]
    targets = torch.stack(labels, dim=0)
    padding_masks = padding_mask(torch.tensor(lengths, dtype=torch.int16), max_len=max_len)
    return X, targets, padding_masks, torch.stack(sensor_ok), IDs


def sensor_saliency(model, X, padding_masks, sensor_ok):
    model.eval()
    X = X.clone().requires_grad_(True)
    X.masked_fill_(~sensor_ok[:, None, :], 0.0)  # expect: MC505 helper
    logits = model(X, padding_masks)
    score = logits.gather(1, logits.argmax(dim=1, keepdim=True)).sum()
    grads, = torch.autograd.grad(score, X)
    saliency = (grads.abs() * padding_masks[..., None]).sum(dim=1)
    return saliency / padding_masks.sum(dim=1, keepdim=True)


def train(args):
    torch.manual_seed(1)
    max_len = 120
    train_set = ClassificationDataset(240, seed=11)
    test_set = ClassificationDataset(90, seed=12)
    collate = lambda batch: collate_superv(batch, max_len=max_len)
    train_loader = torch.utils.data.DataLoader(train_set, batch_size=16, shuffle=True,
                                               collate_fn=collate)
    test_loader = torch.utils.data.DataLoader(test_set, batch_size=30, collate_fn=collate)
    model = TSTransformerEncoderClassiregressor(feat_dim=N_SENSORS, max_len=max_len, d_model=32,
                                                n_heads=4, num_layers=2, dim_feedforward=64,
                                                num_classes=len(STATES), dropout=0.1)
    optimizer = torch.optim.RAdam(model.parameters(), lr=1e-3)
    for epoch in range(args.epochs):
        model.train()
        epoch_loss = 0.0
        for X, targets, padding_masks, sensor_ok, IDs in train_loader:
            predictions = model(X, padding_masks)
            loss = F.cross_entropy(predictions, targets)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=4.0)
            optimizer.step()
            epoch_loss += loss.item() * len(IDs)
        print(f"epoch {epoch} loss {epoch_loss / len(train_set):.4f}")
    model.eval()
    correct = 0
    with torch.no_grad():
        for X, targets, padding_masks, sensor_ok, IDs in test_loader:
            correct += (model(X, padding_masks).argmax(dim=1) == targets).sum().item()
    print(f"test accuracy {correct / len(test_set):.3f}")
    if args.saliency:
        X, targets, padding_masks, sensor_ok, IDs = next(iter(test_loader))
        saliency = sensor_saliency(model, X, padding_masks, sensor_ok)
        for ID, row in zip(IDs[:5], saliency[:5]):
            print(ID, " ".join(f"{v:.3f}" for v in row.tolist()))


if __name__ == "__main__":
    torch.set_num_threads(1)
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--saliency", action="store_true")
    train(parser.parse_args())
