"""Automatic sleep staging from single-channel EEG with SleepTransformer (Phan et al., 2022).

Each 30-s epoch is a log-power time-frequency image; the epoch-level transformer runs over the
frames of all epochs of a sequence at once (block-local attention per epoch), an additive
attention pooling gives one vector per epoch, and the sequence-level transformer labels every
epoch of the sequence (W, N1, N2, N3, REM). Accuracy and Cohen's kappa on held-out nights.

Source: seed self_attention_mask_guide.txt section 6 (create_block_mask), conventions.md section 2.3 and section 1 (direction cheat-sheet)
"""

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

STAGES = ["W", "N1", "N2", "N3", "REM"]


@dataclass
class SleepTransformerConfig:
    seq_len: int = 10
    frames: int = 16
    freq_bins: int = 32
    d_model: int = 64
    n_heads: int = 4
    d_ff: int = 128
    frame_blocks: int = 2
    epoch_blocks: int = 2
    dropout: float = 0.1
    n_classes: int = len(STAGES)


def sinusoid_table(n, d):
    pos = torch.arange(n, dtype=torch.float).unsqueeze(1)
    div = torch.exp(torch.arange(0, d, 2, dtype=torch.float) * (-math.log(10000.0) / d))
    table = torch.zeros(n, d)
    table[:, 0::2], table[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
    return table


def epoch_block_bias(n_epochs, frames_per_epoch):
    n = n_epochs * frames_per_epoch
    epoch_of = torch.arange(n) // frames_per_epoch
    bias = torch.zeros(n, n)
    for start in range(0, n, frames_per_epoch):
        bias[start:start + frames_per_epoch, start:start + frames_per_epoch] = 0.0
    bias[epoch_of[:, None] != epoch_of[None, :]] = float("-inf")
    return bias, epoch_of


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.dropout = cfg.dropout

    def forward(self, x, attn_bias=None):
        B, N, C = x.shape
        q, k, v = self.qkv(x).view(B, N, 3, self.n_heads, C // self.n_heads).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_bias,
                                             dropout_p=self.dropout if self.training else 0.0)
        return self.proj(out.transpose(1, 2).reshape(B, N, C))


class TransformerBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attn = MultiHeadSelfAttention(cfg)
        self.norm1 = nn.LayerNorm(cfg.d_model)
        self.ff = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_ff), nn.ReLU(), nn.Dropout(cfg.dropout),
                                nn.Linear(cfg.d_ff, cfg.d_model))
        self.norm2 = nn.LayerNorm(cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, attn_bias=None):
        x = self.norm1(x + self.drop(self.attn(x, attn_bias)))
        return self.norm2(x + self.drop(self.ff(x)))


class AttentionPooling(nn.Module):
    def __init__(self, d_model, d_att=32):
        super().__init__()
        self.proj = nn.Linear(d_model, d_att)
        self.context = nn.Linear(d_att, 1, bias=False)

    def forward(self, x):
        alpha = torch.softmax(self.context(torch.tanh(self.proj(x))), dim=-2)
        return (alpha * x).sum(dim=-2)


class SleepTransformer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.input_proj = nn.Linear(cfg.freq_bins, cfg.d_model)
        frame_bias, epoch_of = epoch_block_bias(cfg.seq_len, cfg.frames)
        self.register_buffer("frame_bias", frame_bias, persistent=False)
        self.register_buffer("frame_of", torch.arange(cfg.seq_len * cfg.frames) - epoch_of * cfg.frames, persistent=False)
        self.register_buffer("frame_pe", sinusoid_table(cfg.frames, cfg.d_model), persistent=False)
        self.register_buffer("epoch_pe", sinusoid_table(cfg.seq_len, cfg.d_model), persistent=False)
        self.frame_transformer = nn.ModuleList(TransformerBlock(cfg) for _ in range(cfg.frame_blocks))
        self.frame_pool = AttentionPooling(cfg.d_model)
        self.epoch_transformer = nn.ModuleList(TransformerBlock(cfg) for _ in range(cfg.epoch_blocks))
        self.classifier = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_ff), nn.ReLU(), nn.Dropout(cfg.dropout),
                                        nn.Linear(cfg.d_ff, cfg.n_classes))

    def forward(self, spectrograms):
        B, L, T, Fq = spectrograms.shape
        x = self.input_proj(spectrograms.reshape(B, L * T, Fq)) + self.frame_pe[self.frame_of]
        for block in self.frame_transformer:
            x = block(x, attn_bias=self.frame_bias)
        epochs = self.frame_pool(x.view(B, L, T, -1)) + self.epoch_pe
        for block in self.epoch_transformer:
            epochs = block(epochs)
        return self.classifier(epochs)


def simulate_nights(n_sequences, cfg, seed):
    g = torch.Generator().manual_seed(seed)
    transition = torch.tensor([[0.8, 0.15, 0.05, 0.0, 0.0], [0.1, 0.5, 0.3, 0.0, 0.1], [0.02, 0.08, 0.7, 0.15, 0.05],
                               [0.0, 0.02, 0.28, 0.7, 0.0], [0.05, 0.1, 0.05, 0.0, 0.8]])
    bands = {0: (18, 22), 1: (6, 9), 2: (6, 9), 3: (0, 3), 4: (6, 9)}
    stages = torch.zeros(n_sequences, cfg.seq_len, dtype=torch.long)
    stages[:, 0] = torch.randint(0, 5, (n_sequences,), generator=g)
    for t in range(1, cfg.seq_len):
        stages[:, t] = torch.multinomial(transition[stages[:, t - 1]], 1, generator=g).squeeze(1)
    spec = torch.randn(n_sequences, cfg.seq_len, cfg.frames, cfg.freq_bins, generator=g)
    for (i, t), s in zip(torch.cartesian_prod(torch.arange(n_sequences), torch.arange(cfg.seq_len)).tolist(), stages.flatten().tolist()):
        lo, hi = bands[s]
        spec[i, t, :, lo:hi] += 1.5
        if s == 2:
            start = int(torch.randint(0, cfg.frames - 3, (1,), generator=g))
            spec[i, t, start:start + 3, 24:28] += 3.0
        if s == 4:
            spec[i, t, :, 28:] += 0.8
    return spec, stages


def cohen_kappa(pred, target, n_classes):
    cm = torch.zeros(n_classes, n_classes)
    cm.index_put_((target, pred), torch.ones_like(pred, dtype=torch.float), accumulate=True)
    po = cm.trace() / cm.sum()
    pe = (cm.sum(0) * cm.sum(1)).sum() / cm.sum() ** 2
    return ((po - pe) / (1 - pe)).item()


def main():
    torch.manual_seed(0)
    cfg = SleepTransformerConfig()
    x_train, y_train = simulate_nights(512, cfg, seed=0)
    x_test, y_test = simulate_nights(128, cfg, seed=1)
    model = SleepTransformer(cfg)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999))
    for epoch in range(4):
        model.train()
        perm = torch.randperm(len(x_train))
        for i in range(0, len(perm), 32):
            idx = perm[i : i + 32]
            logits = model(x_train[idx])
            loss = F.cross_entropy(logits.reshape(-1, cfg.n_classes), y_train[idx].reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            pred = model(x_test).argmax(-1).reshape(-1)
        acc = (pred == y_test.reshape(-1)).float().mean().item()
        print(f"epoch {epoch} loss {loss.item():.3f} acc {acc:.3f} kappa {cohen_kappa(pred, y_test.reshape(-1), cfg.n_classes):.3f}")
    print("finite cells in the frame bias:", int(torch.isfinite(model.frame_bias).sum()), "of", model.frame_bias.numel())


if __name__ == "__main__":
    main()
