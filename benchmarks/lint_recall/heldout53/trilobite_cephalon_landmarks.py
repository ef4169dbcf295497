"""Order-level identification of trilobite cephala from digitised outline landmarks.

Specimens are photographed in dorsal view and landmarks are digitised along the cephalic
outline and the glabella (tpsDig export, one row per landmark). Broken or partly
exfoliated specimens have fewer landmarks, so each specimen is a padded set of points after
Procrustes superimposition; an attention encoder with a distance bias classifies the set.

Source: pytorch/pytorch#103749 and Biohub/esm#299 (conventions.md section 3, items 5 and 22).
"""

import argparse
import math

import numpy as np
import torch
import torch.nn.functional as F

ORDERS = ["Redlichiida", "Corynexochida", "Asaphida", "Phacopida", "Proetida"]
MAX_LANDMARKS = 24
N_HEADS = 2
D_MODEL = 32


def simulate_tps(n_specimens, rng):
    t = np.linspace(0, 2 * np.pi, MAX_LANDMARKS, endpoint=False)
    records = []
    for s in range(n_specimens):
        order = rng.integers(len(ORDERS))
        a = 1.0 + 0.25 * order
        b = 0.6 + 0.1 * ((order * 3) % 5)
        xy = np.stack([a * np.cos(t), b * np.sin(t) + 0.15 * order * np.sin(2 * t)], 1)
        xy += rng.normal(0, 0.05, xy.shape)
        n_kept = rng.integers(10, MAX_LANDMARKS + 1)
        keep_idx = np.sort(rng.choice(MAX_LANDMARKS, n_kept, replace=False))
        records.append((xy[keep_idx], order))
    return records


def procrustes_align(xy):
    xy = xy - xy.mean(0)
    return xy / np.sqrt((xy ** 2).sum())


def pad_specimens(records):
    n = len(records)
    X = np.zeros((n, MAX_LANDMARKS, 2), dtype=np.float32)
    valid = np.zeros((n, MAX_LANDMARKS), dtype=bool)
    y = np.zeros(n, dtype=np.int64)
    for i, (xy, order) in enumerate(records):
        X[i, : len(xy)] = procrustes_align(xy)
        valid[i, : len(xy)] = True
        y[i] = order
    pair = valid[:, :, None] & valid[:, None, :]
    return torch.from_numpy(X), torch.from_numpy(valid), torch.from_numpy(pair), torch.from_numpy(y)


def init_params(gen):
    def w(*shape):
        return (torch.randn(*shape, generator=gen) / math.sqrt(shape[0])).requires_grad_()

    params = {"embed": w(2, D_MODEL), "alpha": torch.ones(N_HEADS, requires_grad=True)}
    for layer in range(2):
        for name in ["q", "k", "v", "o"]:
            params[f"{name}{layer}"] = w(D_MODEL, D_MODEL)
        params[f"ff{layer}"] = w(D_MODEL, D_MODEL)
    params["head"] = w(D_MODEL, len(ORDERS))
    return params


def landmark_attention(h, params, layer, dist, valid, pair):
    B, L, _ = h.shape
    dh = D_MODEL // N_HEADS
    q = (h @ params[f"q{layer}"]).view(B, L, N_HEADS, dh).transpose(1, 2)
    k = (h @ params[f"k{layer}"]).view(B, L, N_HEADS, dh).transpose(1, 2)
    v = (h @ params[f"v{layer}"]).view(B, L, N_HEADS, dh).transpose(1, 2)
    scores = q @ k.transpose(-1, -2) / math.sqrt(dh)
    scores = scores - params["alpha"][None, :, None, None] * dist[:, None]
    scores = scores.masked_fill(~pair[:, None], float("-inf"))  # expect: MC507 function
    attn = torch.softmax(scores, dim=-1)
    out = (attn @ v).transpose(1, 2).reshape(B, L, D_MODEL)
    return out @ params[f"o{layer}"]


def forward(params, X, valid, pair):
    dist = torch.cdist(X, X).masked_fill(~pair, 0.0)
    h = X @ params["embed"]
    for layer in range(2):
        h = F.layer_norm(h + landmark_attention(h, params, layer, dist, valid, pair), (D_MODEL,))
        h = F.layer_norm(h + torch.relu(h @ params[f"ff{layer}"]), (D_MODEL,))
    w = valid.float()[..., None]
    pooled = (h * w).sum(1) / w.sum(1)
    return pooled @ params["head"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--specimens", type=int, default=400)
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    records = simulate_tps(args.specimens, rng)
    n_train = int(0.75 * len(records))
    Xtr, Vtr, Ptr, ytr = pad_specimens(records[:n_train])
    Xte, Vte, Pte, yte = pad_specimens(records[n_train:])

    params = init_params(gen)
    opt = torch.optim.Adam(params.values(), lr=args.lr)
    for epoch in range(args.epochs):
        perm = torch.randperm(n_train, generator=gen)
        for start in range(0, n_train, 32):
            idx = perm[start : start + 32]
            loss = F.cross_entropy(forward(params, Xtr[idx], Vtr[idx], Ptr[idx]), ytr[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        if epoch % 10 == 9:
            print(f"epoch {epoch + 1} loss {loss.item():.4f}")

    with torch.no_grad():
        pred = forward(params, Xte, Vte, Pte).argmax(-1)
    print(f"test accuracy {(pred == yte).float().mean().item():.3f}")


if __name__ == "__main__":
    main()
