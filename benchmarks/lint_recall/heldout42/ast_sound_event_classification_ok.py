"""Environmental sound classification with the Audio Spectrogram Transformer (Gong et al., 2021).

YuanGongND/ast's ASTModel on log-mel filterbanks of variable-length clips (ESC-50-like classes):
overlapping 8x8 patches from a Conv2d patch embedding, [CLS] and distillation tokens, a 2-D
learned positional embedding cut to the clip's time patches, timm-style Attention / Block, the
mean of the two tokens into the MLP head. Clips are zero-padded to the longest of the batch and
the patches past each clip's end are left out of attention.

Source: hyunwoongko/transformer PR #40 and bentrevett/pytorch-seq2seq#96 (conventions.md section 3 item 21), conventions.md section 1 (direction cheat-sheet)
"""

import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

SAMPLE_RATE, N_FFT, HOP, N_MELS = 8000, 256, 80, 32
CLASSES = ["dog_bark", "siren", "rain", "clock_tick", "chirping_birds"]


def mel_filterbank(n_mels=N_MELS, n_fft=N_FFT, sr=SAMPLE_RATE):
    mels = torch.linspace(0.0, 2595.0 * math.log10(1.0 + sr / 2 / 700.0), n_mels + 2)
    points = 700.0 * (10 ** (mels / 2595.0) - 1.0)
    bins = torch.linspace(0, sr / 2, n_fft // 2 + 1)
    lower, center, upper = points[:-2, None], points[1:-1, None], points[2:, None]
    return torch.clamp(torch.minimum((bins - lower) / (center - lower), (upper - bins) / (upper - center)), min=0.0)


def wav2fbank(waveform, fbank_matrix):
    spec = torch.stft(waveform, N_FFT, hop_length=HOP, window=torch.hann_window(N_FFT), return_complex=True)
    fbank = torch.log(fbank_matrix @ spec.abs().pow(2) + 1e-6).T
    return (fbank + 4.27) / (4.57 * 2)


class PatchEmbed(nn.Module):
    def __init__(self, patch=8, fstride=8, tstride=4, embed_dim=64):
        super().__init__()
        self.proj = nn.Conv2d(1, embed_dim, kernel_size=(patch, patch), stride=(fstride, tstride))

    def forward(self, x):
        return self.proj(x)


class Attention(nn.Module):
    def __init__(self, dim, num_heads=4, attn_drop=0.0):
        super().__init__()
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, attn_keep):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = attn.masked_fill(attn_keep == 0, torch.finfo(attn.dtype).min)
        attn = self.attn_drop(attn.softmax(dim=-1))
        return self.proj((attn @ v).transpose(1, 2).reshape(B, N, C))


class Block(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=2.0, drop=0.1):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, int(dim * mlp_ratio)), nn.GELU(), nn.Dropout(drop),
                                 nn.Linear(int(dim * mlp_ratio), dim), nn.Dropout(drop))

    def forward(self, x, attn_keep):
        x = x + self.attn(self.norm1(x), attn_keep)
        return x + self.mlp(self.norm2(x))


class ASTModel(nn.Module):
    def __init__(self, label_dim=len(CLASSES), max_frames=208, embed_dim=64, depth=3, num_heads=4, patch=8, tstride=4):
        super().__init__()
        self.patch, self.tstride = patch, tstride
        self.patch_embed = PatchEmbed(patch, patch, tstride, embed_dim)
        self.f_dim = (N_MELS - patch) // patch + 1
        self.t_dim = (max_frames - patch) // tstride + 1
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.dist_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.randn(1, embed_dim, self.f_dim, self.t_dim) * 0.02)
        self.token_pos = nn.Parameter(torch.randn(1, 2, embed_dim) * 0.02)
        self.blocks = nn.ModuleList(Block(embed_dim, num_heads) for _ in range(depth))
        self.norm = nn.LayerNorm(embed_dim, eps=1e-6)
        self.mlp_head = nn.Sequential(nn.LayerNorm(embed_dim), nn.Linear(embed_dim, label_dim))

    def patch_keep(self, n_frames, t_patches):
        time_keep = torch.arange(t_patches, device=n_frames.device)[None, :] * self.tstride + self.patch <= n_frames[:, None]
        keep = time_keep[:, None, :].expand(-1, self.f_dim, -1).reshape(n_frames.size(0), -1)
        return torch.cat([keep.new_ones(n_frames.size(0), 2), keep], dim=1)

    def forward(self, x, n_frames):
        B = x.shape[0]
        x = self.patch_embed(x.unsqueeze(1).transpose(2, 3))
        t_patches = x.size(-1)
        x = (x + self.pos_embed[..., :t_patches]).flatten(2).transpose(1, 2)
        tokens = torch.cat([self.cls_token, self.dist_token], dim=1).expand(B, -1, -1) + self.token_pos
        x = torch.cat([tokens, x], dim=1)
        keep = self.patch_keep(n_frames, t_patches)
        attn_keep = keep.unsqueeze(1).unsqueeze(2)
        for blk in self.blocks:
            x = blk(x, attn_keep)
        x = self.norm(x)
        return self.mlp_head((x[:, 0] + x[:, 1]) / 2)


def synth_clip(label, rng):
    n = int(SAMPLE_RATE * rng.uniform(0.5, 2.0))
    t = torch.arange(n) / SAMPLE_RATE
    noise = torch.randn(n) * 0.05
    if label == 0:
        env = ((t * 3 + rng.random()) % 1.0 < 0.25).float()
        wave = env * sum(torch.sin(2 * math.pi * 400 * k * t) / k for k in range(1, 4))
    elif label == 1:
        wave = torch.sin(2 * math.pi * (700 * t + 150 * torch.sin(2 * math.pi * 1.5 * t) / (2 * math.pi * 1.5)))
    elif label == 2:
        wave = torch.randn(n) * 0.5
    elif label == 3:
        wave = torch.zeros(n)
        wave[(torch.arange(n) % (SAMPLE_RATE // 4)) < 40] = 1.0
        wave = wave * torch.sin(2 * math.pi * 2000 * t)
    else:
        wave = ((t * 6) % 1.0 < 0.1).float() * torch.sin(2 * math.pi * 3200 * t)
    return wave + noise


def collate(clips, fbank_matrix):
    fbanks = [wav2fbank(w, fbank_matrix) for w in clips]
    n_frames = torch.tensor([f.size(0) for f in fbanks])
    batch = torch.zeros(len(fbanks), int(n_frames.max()), N_MELS)
    for i, f in enumerate(fbanks):
        batch[i, : f.size(0)] = f
    return batch, n_frames


def main():
    torch.manual_seed(0)
    rng = random.Random(0)
    fbank_matrix = mel_filterbank()
    model = ASTModel()
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-4, weight_decay=5e-7, betas=(0.95, 0.999))
    for step in range(100):
        model.train()
        labels = [rng.randrange(len(CLASSES)) for _ in range(16)]
        x, n_frames = collate([synth_clip(c, rng) for c in labels], fbank_matrix)
        loss = F.cross_entropy(model(x, n_frames), torch.tensor(labels))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.3f}")
    model.eval()
    test_rng = random.Random(1)
    labels = [test_rng.randrange(len(CLASSES)) for _ in range(100)]
    clips = [synth_clip(c, test_rng) for c in labels]
    with torch.no_grad():
        x, n_frames = collate(clips, fbank_matrix)
        acc = (model(x, n_frames).argmax(-1) == torch.tensor(labels)).float().mean().item()
        short = int(n_frames.argmin())
        alone = model(*collate([clips[short]], fbank_matrix))
        padded = model(*collate([clips[short], clips[int(n_frames.argmax())]], fbank_matrix))[:1]
    print(f"accuracy {acc:.3f}; shortest clip alone vs padded: {(alone - padded).abs().max():.2e}")


if __name__ == "__main__":
    main()
