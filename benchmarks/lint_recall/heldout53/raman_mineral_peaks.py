"""Mineral identification from Raman spectra reduced to peak lists.

Spectra (100-1400 cm-1, RRUFF-style reference minerals) are baseline-corrected with a
rolling minimum, smoothed, and reduced to their peaks (position, relative height, width); a
spectrum becomes a padded set of up to 16 peaks and a small attention encoder assigns the
mineral. The `--half` option evaluates the float16 copy that is shipped to the portable
spectrometer's controller.

Source: NVIDIA/apex#1052 and huggingface/lerobot PR #710 (conventions.md section 3, items 18
and 19), conventions.md section 2.3.
"""

import argparse
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MINERALS = {
    "quartz": [128, 206, 464],
    "calcite": [155, 282, 712, 1086],
    "aragonite": [153, 206, 704, 1085],
    "gypsum": [414, 493, 619, 670, 1008, 1136],
    "anatase": [144, 197, 399, 513, 639],
    "rutile": [143, 447, 612],
    "hematite": [226, 245, 293, 411, 498, 612],
    "olivine": [822, 854, 918, 964],
}
MAX_PEAKS = 16
AXIS = np.arange(100, 1400, 2.0)


def simulate_spectrum(peaks, rng):
    spec = 0.2 + 0.0003 * AXIS * rng.uniform(0.5, 2.0)
    for p in peaks:
        spec += rng.uniform(0.3, 1.0) * np.exp(-0.5 * ((AXIS - p - rng.normal(0, 2)) / rng.uniform(3, 8)) ** 2)
    return spec + rng.normal(0, 0.02, AXIS.shape)


def find_peaks(spec):
    base = np.array([spec[max(0, i - 60) : i + 60].min() for i in range(len(spec))])
    s = np.convolve(spec - base, np.ones(5) / 5, mode="same")
    idx = [i for i in range(2, len(s) - 2) if s[i] == s[i - 2 : i + 3].max() and s[i] > 0.15]
    idx = sorted(idx, key=lambda i: -s[i])[:MAX_PEAKS]
    out = []
    for i in sorted(idx):
        half = s[i] / 2
        left, right = i, i
        while left > 0 and s[left] > half:
            left -= 1
        while right < len(s) - 1 and s[right] > half:
            right += 1
        out.append((AXIS[i], s[i], AXIS[right] - AXIS[left]))
    return np.array(out, dtype=np.float32).reshape(-1, 3)


def pad_peak_lists(peak_lists):
    X = np.zeros((len(peak_lists), MAX_PEAKS, 3), dtype=np.float32)
    keep = np.zeros((len(peak_lists), MAX_PEAKS), dtype=bool)
    for i, p in enumerate(peak_lists):
        X[i, : len(p), 0] = p[:, 0] / 1000.0
        X[i, : len(p), 1] = p[:, 1] / p[:, 1].max()
        X[i, : len(p), 2] = p[:, 2] / 50.0
        keep[i, : len(p)] = True
    return torch.from_numpy(X), torch.from_numpy(keep)


class PeakAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.o = nn.Linear(d_model, d_model)

    def forward(self, h, keep):
        B, P, D = h.shape
        split = lambda t: t.view(B, P, self.n_heads, -1).transpose(1, 2)
        q, k, v = split(self.q(h)), split(self.k(h)), split(self.v(h))
        scores = q @ k.transpose(-1, -2) / math.sqrt(D // self.n_heads)
        scores = scores.masked_fill(~keep[:, None, None, :], torch.finfo(torch.float32).min)  # expect: MC517 method
        return self.o((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, P, D))


class PeakClassifier(nn.Module):
    def __init__(self, d_model=48, n_heads=4):
        super().__init__()
        self.embed = nn.Sequential(nn.Linear(3, d_model), nn.GELU(), nn.Linear(d_model, d_model))
        self.att1 = PeakAttention(d_model, n_heads)
        self.att2 = PeakAttention(d_model, n_heads)
        self.ln1 = nn.LayerNorm(d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.out = nn.Linear(d_model, len(MINERALS))

    def forward(self, X, keep):
        h = self.embed(X)
        h = self.ln1(h + self.att1(h, keep))
        h = self.ln2(h + self.att2(h, keep))
        h = h.masked_fill(~keep[..., None], 0.0)
        return self.out(h.sum(1) / keep.sum(1, keepdim=True).to(h.dtype))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--spectra-per-mineral", type=int, default=60)
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--half", action="store_true")
    parser.add_argument("--seed", type=int, default=6)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)

    names = list(MINERALS)
    peak_lists, labels = [], []
    for label, name in enumerate(names):
        for _ in range(args.spectra_per_mineral):
            peak_lists.append(find_peaks(simulate_spectrum(MINERALS[name], rng)))
            labels.append(label)
    X, keep = pad_peak_lists(peak_lists)
    y = torch.tensor(labels)
    perm = torch.randperm(len(y))
    tr, te = perm[: int(0.8 * len(y))], perm[int(0.8 * len(y)) :]

    model = PeakClassifier()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    for epoch in range(args.epochs):
        for start in range(0, len(tr), 32):
            idx = tr[start : start + 32]
            loss = F.cross_entropy(model(X[idx], keep[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()

    model.eval()
    Xte = X[te]
    if args.half:
        model, Xte = model.half(), Xte.half()
    with torch.no_grad():
        acc = (model(Xte, keep[te]).argmax(-1) == y[te]).float().mean().item()
    print(f"{'float16' if args.half else 'float32'} test accuracy {acc:.3f}")


if __name__ == "__main__":
    main()
