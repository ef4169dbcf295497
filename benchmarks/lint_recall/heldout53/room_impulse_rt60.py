"""Octave-band reverberation time (T30) of rooms from measured impulse responses.

Impulse responses measured with a sine sweep (ISO 3382-style) are filtered into octave
bands, squared and framed in 10 ms frames; the log energy envelope of every band is a frame
token. A local-attention encoder over frames (each frame sees its neighbours within 15
frames, the decay being a local property) regresses T30 per band, compared with Schroeder
backward integration and a line fit from -5 to -35 dB.

Source: seed self_attention_mask_guide.txt, section 3 (generate_causal_mask) and section 6
(create_local_mask); section 7 Q3.
"""

import argparse
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

FS = 8000
BANDS_HZ = [125, 250, 500, 1000, 2000]
FRAME = 80
N_FRAMES = 150
LOCAL_FRAMES = 15


def synth_rir(t30, rng):
    n = FRAME * N_FRAMES
    t = np.arange(n) / FS
    rir = np.zeros(n)
    for f, T in zip(BANDS_HZ, t30):
        env = 10 ** (-3 * t / T)
        rir += env * np.sin(2 * np.pi * f * t + rng.uniform(0, 6.3)) * rng.normal(1, 0.3, n)
    return rir + rng.normal(0, 1e-4, n)


def octave_energy_frames(rir):
    spec = np.fft.rfft(rir, 2 * len(rir))
    freqs = np.fft.rfftfreq(2 * len(rir), 1 / FS)
    env = []
    for f in BANDS_HZ:
        band = np.fft.irfft(spec * ((freqs >= f / np.sqrt(2)) & (freqs < f * np.sqrt(2))), 2 * len(rir))[: len(rir)]
        e = (band ** 2).reshape(N_FRAMES, FRAME).sum(1)
        env.append(10 * np.log10(e / e.max() + 1e-12))
    return np.stack(env, 1).astype(np.float32)


def schroeder_t30(rir):
    out = []
    spec = np.fft.rfft(rir, 2 * len(rir))
    freqs = np.fft.rfftfreq(2 * len(rir), 1 / FS)
    for f in BANDS_HZ:
        band = np.fft.irfft(spec * ((freqs >= f / np.sqrt(2)) & (freqs < f * np.sqrt(2))), 2 * len(rir))[: len(rir)]
        edc = np.cumsum((band ** 2)[::-1])[::-1]
        edc_db = 10 * np.log10(edc / edc[0] + 1e-12)
        idx = np.flatnonzero((edc_db <= -5) & (edc_db >= -35))
        slope = np.polyfit(idx / FS, edc_db[idx], 1)[0] if len(idx) > 10 else -60.0
        out.append(-60.0 / slope)
    return np.array(out)


class LocalFrameEncoder(nn.Module):
    def __init__(self, d_model=48, n_heads=4):
        super().__init__()
        self.n_heads = n_heads
        self.inp = nn.Linear(len(BANDS_HZ), d_model)
        self.pos = nn.Parameter(0.02 * torch.randn(N_FRAMES, d_model))
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.o = nn.Linear(d_model, d_model)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, len(BANDS_HZ))
        i = np.arange(N_FRAMES)
        far = (np.abs(i[:, None] - i[None, :]) > LOCAL_FRAMES).astype(np.float32)
        self.register_buffer("band_bias", torch.from_numpy(far) * float("-inf"))  # expect: MC522 buffer

    def forward(self, frames):
        B, T, _ = frames.shape
        h = self.inp(frames / 60.0) + self.pos
        q, k, v = (x.view(B, T, self.n_heads, -1).transpose(1, 2) for x in self.qkv(h).chunk(3, -1))
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + self.band_bias
        h = self.norm(h + self.o((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, -1)))
        return F.softplus(self.head(h.mean(1)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rooms", type=int, default=400)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--seed", type=int, default=17)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)

    t30 = rng.uniform(0.2, 1.2, (args.rooms, 1)) * np.linspace(1.3, 0.7, len(BANDS_HZ))[None]
    rirs = [synth_rir(t, rng) for t in t30]
    X = torch.from_numpy(np.stack([octave_energy_frames(r) for r in rirs]))
    Y = torch.from_numpy(t30.astype(np.float32))
    n_train = int(0.8 * args.rooms)

    model = LocalFrameEncoder()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    for epoch in range(args.epochs):
        perm = torch.randperm(n_train)
        for start in range(0, n_train, 32):
            idx = perm[start : start + 32]
            loss = F.l1_loss(model(X[idx]), Y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()

    with torch.no_grad():
        err = (model(X[n_train:]) - Y[n_train:]).abs().mean(0)
    schroeder = np.stack([schroeder_t30(r) for r in rirs[n_train:]])
    err_s = np.abs(schroeder - t30[n_train:]).mean(0)
    print("T30 MAE (s) per band", [round(v, 3) for v in err.tolist()])
    print("Schroeder MAE (s)   ", [round(v, 3) for v in err_s.tolist()])


if __name__ == "__main__":
    main()
