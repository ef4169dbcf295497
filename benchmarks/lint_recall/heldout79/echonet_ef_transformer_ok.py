"""Left-ventricular ejection fraction from apical-4-chamber echo clips (EchoNet-Dynamic).

Frames are encoded by a small CNN; a temporal transformer with a local
cardiac-cycle window reads the clip, and two heads regress the ejection
fraction (from the pooled clip) and tag end-diastolic / end-systolic frames.
Clips are sampled at different lengths (the recording may end early) and
right-padded to the batch's longest clip.

Source: conventions.md §1 (direction cheat-sheet, additive masks), §2.3; seed self_attention_mask_guide.txt §3 (generate_causal_mask), §7 Q3.
"""
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

CFG = SimpleNamespace(d_model=64, heads=4, layers=2, window=12, frame_size=32, max_frames=64,
                      ef_mean=55.7, ef_std=12.4, lr=1e-3)
FRAME_CLASSES = ("other", "ED", "ES")


def cardiac_window_bias(t: int, window: int, device=None) -> torch.Tensor:
    i = torch.arange(t, device=device)
    far = (i[:, None] - i[None, :]).abs() > window
    return torch.zeros(t, t, device=device).masked_fill(far, float("-inf"))


class FrameEncoder(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.cnn = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.Conv2d(32, d, 3, stride=2, padding=1), nn.AdaptiveAvgPool2d(1),
        )

    def forward(self, clips):
        b, t = clips.shape[:2]
        return self.cnn(clips.flatten(0, 1)).view(b, t, -1)


class TemporalLayer(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, bias):
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.n2(x))


class EchoTransformer(nn.Module):
    def __init__(self, cfg=CFG):
        super().__init__()
        self.cfg = cfg
        self.frames = FrameEncoder(cfg.d_model)
        self.pos = nn.Parameter(torch.randn(1, cfg.max_frames, cfg.d_model) * 0.02)
        self.layers = nn.ModuleList([TemporalLayer(cfg.d_model, cfg.heads) for _ in range(cfg.layers)])
        self.norm = nn.LayerNorm(cfg.d_model)
        self.ef_head = nn.Linear(cfg.d_model, 1)
        self.frame_head = nn.Linear(cfg.d_model, len(FRAME_CLASSES))

    def forward(self, clips, n_frames):
        b, t = clips.shape[:2]
        x = self.frames(clips) + self.pos[:, :t]
        frame_keep = torch.arange(t, device=clips.device)[None, :] < n_frames[:, None]
        frame_bias = torch.zeros(frame_keep.shape, device=clips.device).masked_fill(~frame_keep, float("-inf"))
        bias = cardiac_window_bias(t, self.cfg.window, clips.device)[None, None] + frame_bias[:, None, None, :]
        for layer in self.layers:
            x = layer(x, bias)
        x = self.norm(x)
        w = frame_keep.unsqueeze(-1).to(x.dtype)
        clip = (x * w).sum(1) / w.sum(1)
        ef = self.ef_head(clip).squeeze(-1) * self.cfg.ef_std + self.cfg.ef_mean
        return ef, self.frame_head(x), frame_keep


def echo_loss(ef, frame_logits, frame_keep, ef_true, frame_tags):
    reg = F.mse_loss((ef - ef_true) / CFG.ef_std, torch.zeros_like(ef))
    tags = frame_tags.masked_fill(~frame_keep, -100)
    weight = torch.tensor([0.2, 1.0, 1.0])
    cls = F.cross_entropy(frame_logits.transpose(1, 2), tags, weight=weight, ignore_index=-100)
    return reg + cls


def synthetic_clips(lengths, generator):
    t = max(lengths)
    clips = torch.zeros(len(lengths), t, 3, CFG.frame_size, CFG.frame_size)
    tags = torch.zeros(len(lengths), t, dtype=torch.long)
    ef = torch.empty(len(lengths)).uniform_(25, 75, generator=generator)
    for i, n in enumerate(lengths):
        phase = torch.linspace(0, 4 * torch.pi, n)
        area = 1.0 - (ef[i] / 100) * 0.5 * (1 - torch.cos(phase))
        clips[i, :n] = torch.randn(n, 3, CFG.frame_size, CFG.frame_size, generator=generator) * 0.1
        clips[i, :n, :, 8:24, 8:24] += area[:, None, None, None]
        tags[i, :n][torch.cos(phase) > 0.99] = 1
        tags[i, :n][torch.cos(phase) < -0.99] = 2
    return clips, torch.tensor(lengths), ef, tags


if __name__ == "__main__":
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    clips, n_frames, ef_true, tags = synthetic_clips([32, 24, 28], g)
    model = EchoTransformer()
    opt = torch.optim.Adam(model.parameters(), lr=CFG.lr)
    for step in range(4):
        ef, frame_logits, frame_keep = model(clips, n_frames)
        loss = echo_loss(ef, frame_logits, frame_keep, ef_true, tags)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        ef, frame_logits, frame_keep = model(clips, n_frames)
    mae = (ef - ef_true).abs().mean().item()
    print("loss", round(loss.item(), 4), "EF MAE", round(mae, 2))
