"""Speech emotion recognition (IEMOCAP 4-class style) over log-mel features, as a LightningModule.

Training uses fixed random crops of ``crop_frames`` frames, so no padding is needed there; validation
and inference run on whole utterances, padded in the batch and described by ``lengths``. A 4x
convolutional subsampler feeds a small SDPA encoder, and attentive statistics pooling gives the
utterance embedding. Unweighted accuracy (UA) is logged per validation batch.

Source: conventions.md section 2.6, section 5 item 6; seed self_attention_mask_guide.txt section 5 (检查mask形状) and section 2 table
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    import pytorch_lightning as pl
except ImportError:
    class _PL:
        class LightningModule(nn.Module):
            def log(self, *args, **kwargs):
                pass

    pl = _PL()

EMOTIONS = ("neutral", "happy", "sad", "angry")
HP = dict(n_mels=40, d_model=64, n_heads=4, n_layers=2, crop_frames=96, lr=1e-3, dropout=0.1)


class Subsampler(nn.Module):
    def __init__(self, n_mels, d):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(1, 16, 3, stride=2, padding=1), nn.GELU(),
            nn.Conv2d(16, 16, 3, stride=2, padding=1), nn.GELU(),
        )
        self.proj = nn.Linear(16 * ((n_mels + 3) // 4), d)

    def forward(self, mel):
        x = self.conv(mel.unsqueeze(1))
        b, c, t, f = x.shape
        return self.proj(x.permute(0, 2, 1, 3).reshape(b, t, c * f))


class EncoderBlock(nn.Module):
    def __init__(self, d, h, p):
        super().__init__()
        self.h, self.p = h, p
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Dropout(p), nn.Linear(4 * d, d))

    def forward(self, x, keep: Optional[torch.Tensor] = None):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)  # expect: MC515 shape
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.ff(self.norm2(x))


class AttentiveStatsPool(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.att = nn.Sequential(nn.Linear(d, d // 2), nn.Tanh(), nn.Linear(d // 2, 1))

    def forward(self, x, keep: Optional[torch.Tensor] = None):
        logits = self.att(x).squeeze(-1)
        if keep is not None:
            logits = logits.masked_fill(~keep, float("-inf"))
        w = logits.softmax(dim=-1).unsqueeze(-1)
        mu = (w * x).sum(1)
        sigma = ((w * (x - mu[:, None]) ** 2).sum(1)).clamp(min=1e-6).sqrt()
        return torch.cat([mu, sigma], dim=-1)


class EmotionRecognizer(pl.LightningModule):
    def __init__(self, hp=HP):
        super().__init__()
        self.hp = hp
        self.sub = Subsampler(hp["n_mels"], hp["d_model"])
        self.blocks = nn.ModuleList(EncoderBlock(hp["d_model"], hp["n_heads"], hp["dropout"]) for _ in range(hp["n_layers"]))
        self.pool = AttentiveStatsPool(hp["d_model"])
        self.cls = nn.Linear(2 * hp["d_model"], len(EMOTIONS))

    def forward(self, mel, lengths=None):
        x = self.sub(mel)
        keep = None
        if lengths is not None:
            sub_len = (lengths + 3) // 4
            keep = torch.arange(x.size(1), device=x.device)[None, :] < sub_len[:, None]
        for blk in self.blocks:
            x = blk(x, keep)
        return self.cls(self.pool(x, keep))

    def training_step(self, batch, batch_idx):
        mel, label = batch
        start = torch.randint(0, mel.size(1) - self.hp["crop_frames"] + 1, (1,)).item()
        logits = self(mel[:, start : start + self.hp["crop_frames"]])
        loss = F.cross_entropy(logits, label)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        mel, lengths, label = batch
        pred = self(mel, lengths).argmax(-1)
        recalls = [(pred[label == c] == c).float().mean() for c in label.unique()]
        ua = torch.stack(recalls).mean()
        self.log("val_ua", ua, prog_bar=True)
        return ua

    @torch.no_grad()
    def predict_utterance(self, mel: torch.Tensor) -> str:
        logits = self(mel[None], torch.tensor([mel.size(0)]))
        return EMOTIONS[logits.argmax(-1).item()]

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=self.hp["lr"])
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)}


def pad_utterances(mels):
    lengths = torch.tensor([m.size(0) for m in mels])
    out = torch.zeros(len(mels), int(lengths.max()), mels[0].size(1))
    for i, m in enumerate(mels):
        out[i, : m.size(0)] = m
    return out, lengths


if __name__ == "__main__":
    torch.manual_seed(0)
    model = EmotionRecognizer()
    opt = model.configure_optimizers()["optimizer"]
    for step in range(3):
        mel = torch.randn(4, 160, HP["n_mels"])
        label = torch.randint(0, len(EMOTIONS), (4,))
        loss = model.training_step((mel, label), step)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    utterance = torch.randn(137, HP["n_mels"])
    print("loss", round(loss.item(), 4), "->", model.predict_utterance(utterance))
