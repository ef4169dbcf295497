"""End-to-end neural speaker diarization (EEND) of two-speaker conversations.

Imitates hitachi-speech/EEND's PyTorch backend (`eend/pytorch_backend/transformer.py` and
`models.py`, Fujita et al., ASRU 2019): `MultiHeadSelfAttention` over flattened (B*T, F)
frames with `linearQ` / `linearK` / `linearV` / `linearO` and the `att` kept for plotting,
`PositionwiseFeedForward`, a `TransformerEncoder` whose layers are created with `setattr`
as `lnorm1_{i}` / `self_att_{i}` / `lnorm2_{i}` / `ff_{i}`, `TransformerDiarization` with a
sigmoid speaker-activity `decoder`, `pad_sequence` batching with `ilens`, the permutation-
invariant `batch_pit_loss`, and diarization error counted per frame. Padded frames are kept out
of attention with a key mask from the lengths; `infer` can run the model as a float16 copy
(`--fp16`), as the recipe does on a GPU.
Synthetic data: 23-dimensional log-mel-like features of two-speaker recordings of 60-120
frames, each speaker with its own spectral envelope, turns with overlap and silence.

Source: NVIDIA/apex#1052 and huggingface/lerobot PR #710 (conventions.md §3 items 18 and
19), conventions.md §2.3.
"""

import argparse
import copy
from itertools import permutations

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

N_MELS = 23


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, n_units, h=8, dropout_rate=0.1):
        super().__init__()
        self.linearQ = nn.Linear(n_units, n_units)
        self.linearK = nn.Linear(n_units, n_units)
        self.linearV = nn.Linear(n_units, n_units)
        self.linearO = nn.Linear(n_units, n_units)
        self.d_k = n_units // h
        self.h = h
        self.dropout = nn.Dropout(p=dropout_rate)
        self.att = None

    def forward(self, x, batch_size, frame_keep):
        q = self.linearQ(x).reshape(batch_size, -1, self.h, self.d_k)
        k = self.linearK(x).reshape(batch_size, -1, self.h, self.d_k)
        v = self.linearV(x).reshape(batch_size, -1, self.h, self.d_k)
        scores = torch.matmul(q.transpose(1, 2), k.permute(0, 2, 3, 1)) / np.sqrt(self.d_k)
        scores = scores.masked_fill(~frame_keep[:, None, None, :], torch.finfo(scores.dtype).min)
        self.att = F.softmax(scores, dim=3)
        p_att = self.dropout(self.att)
        x = torch.matmul(p_att, v.transpose(1, 2))
        x = x.transpose(1, 2).reshape(-1, self.h * self.d_k)
        return self.linearO(x)


class PositionwiseFeedForward(nn.Module):
    def __init__(self, n_units, d_units, dropout_rate):
        super().__init__()
        self.linear1 = nn.Linear(n_units, d_units)
        self.linear2 = nn.Linear(d_units, n_units)
        self.dropout = nn.Dropout(p=dropout_rate)

    def forward(self, x):
        return self.linear2(self.dropout(F.relu(self.linear1(x))))


class TransformerEncoder(nn.Module):
    def __init__(self, idim, n_layers, n_units, e_units=2048, h=8, dropout_rate=0.1):
        super().__init__()
        self.linear_in = nn.Linear(idim, n_units)
        self.lnorm_in = nn.LayerNorm(n_units)
        self.n_layers = n_layers
        self.dropout = nn.Dropout(p=dropout_rate)
        for i in range(n_layers):
            setattr(self, "{}{:d}".format("lnorm1_", i), nn.LayerNorm(n_units))
            setattr(self, "{}{:d}".format("self_att_", i), MultiHeadSelfAttention(n_units, h, dropout_rate))
            setattr(self, "{}{:d}".format("lnorm2_", i), nn.LayerNorm(n_units))
            setattr(self, "{}{:d}".format("ff_", i), PositionwiseFeedForward(n_units, e_units, dropout_rate))
        self.lnorm_out = nn.LayerNorm(n_units)

    def forward(self, x, frame_keep):
        BT_size = x.shape[0] * x.shape[1]
        e = self.linear_in(x.reshape(BT_size, -1))
        for i in range(self.n_layers):
            e = getattr(self, "{}{:d}".format("lnorm1_", i))(e)
            s = getattr(self, "{}{:d}".format("self_att_", i))(e, x.shape[0], frame_keep)
            e = e + self.dropout(s)
            e = getattr(self, "{}{:d}".format("lnorm2_", i))(e)
            s = getattr(self, "{}{:d}".format("ff_", i))(e)
            e = e + self.dropout(s)
        return self.lnorm_out(e)


class TransformerDiarization(nn.Module):
    def __init__(self, n_speakers, in_size, n_units, n_heads, n_layers, dropout):
        super().__init__()
        self.enc = TransformerEncoder(in_size, n_layers, n_units, e_units=2 * n_units, h=n_heads,
                                      dropout_rate=dropout)
        self.linear = nn.Linear(n_units, n_speakers)

    def forward(self, xs, activation=None):
        ilens = [x.shape[0] for x in xs]
        xs = nn.utils.rnn.pad_sequence(xs, padding_value=-1, batch_first=True)
        frame_keep = torch.arange(xs.shape[1])[None, :] < torch.tensor(ilens)[:, None]
        pad_shape = xs.shape
        emb = self.enc(xs, frame_keep)
        ys = self.linear(emb).reshape(pad_shape[0], pad_shape[1], -1)
        if activation:
            ys = activation(ys)
        return [y[:ilen] for y, ilen in zip(ys, ilens)]


def pit_loss(pred, label):
    perms = [list(p) for p in permutations(range(label.shape[1]))]
    losses = torch.stack([F.binary_cross_entropy_with_logits(pred, label[:, p].float()) for p in perms])
    min_loss, idx = losses.min(dim=0)
    return min_loss, label[:, perms[int(idx)]]


def batch_pit_loss(ys, ts):
    loss_w_labels = [pit_loss(y, t) for y, t in zip(ys, ts)]
    losses, labels = zip(*loss_w_labels)
    return torch.stack(losses).mean(), labels


def make_recording(rng, envelopes):
    T = int(rng.integers(60, 121))
    activity = np.zeros((T, 2), dtype=np.int64)
    t, spk = 0, int(rng.integers(2))
    while t < T:
        dur = int(rng.integers(8, 25))
        activity[t:t + dur, spk] = 1
        if rng.random() < 0.3:
            activity[t + dur - 4:t + dur + 2, 1 - spk] = 1
        t += dur + int(rng.integers(0, 6))
        spk = 1 - spk
    feats = rng.normal(-1.0, 0.4, size=(T, N_MELS))
    for s in range(2):
        feats += activity[:, s:s + 1] * (envelopes[s] + 0.2 * rng.normal(size=(T, N_MELS)))
    return torch.tensor(feats, dtype=torch.float32), torch.from_numpy(activity)


@torch.no_grad()
def infer(model, xs, ts, fp16=False):
    for module in model.modules():
        if isinstance(module, MultiHeadSelfAttention):
            module.att = None
    model = copy.deepcopy(model).eval()
    if fp16:
        model = model.half()
        xs = [x.half() for x in xs]
    ys = model(xs, activation=torch.sigmoid)
    errors, frames = 0, 0
    for y, t in zip(ys, ts):
        decisions = (y.float() > 0.5).long()
        err = min((decisions != t[:, list(p)]).any(dim=1).sum().item() for p in permutations(range(2)))
        errors += err
        frames += len(t)
    return errors / frames


def main(args):
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    envelopes = []
    for _ in range(2):
        envelopes.append(np.convolve(rng.normal(0, 1.5, N_MELS), np.ones(3) / 3, mode="same"))
    train = [make_recording(rng, envelopes) for _ in range(192)]
    dev = [make_recording(rng, envelopes) for _ in range(48)]
    model = TransformerDiarization(n_speakers=2, in_size=N_MELS, n_units=32, n_heads=4,
                                   n_layers=2, dropout=0.1)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(args.epochs):
        model.train()
        order = rng.permutation(len(train))
        total = 0.0
        for start in range(0, len(order), 16):
            batch = [train[i] for i in order[start:start + 16]]
            ys = model([x for x, _ in batch])
            loss, _ = batch_pit_loss(ys, [t for _, t in batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
        der = infer(model, [x for x, _ in dev], [t for _, t in dev])
        print(f"epoch {epoch} loss {total / (len(order) / 16):.4f} frame error {der:.3f}")
    if args.fp16:
        print(f"fp16 frame error {infer(model, [x for x, _ in dev], [t for _, t in dev], fp16=True):.3f}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--fp16", action="store_true")
    main(parser.parse_args())
