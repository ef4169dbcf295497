"""Sign language translation from pose keypoints (PHOENIX-2014T style), Lightning.

Each video is reduced to MediaPipe-like keypoints per frame (body, both hands, face subset), which a
pose encoder turns into frame states; a text decoder produces the spoken-language sentence. The
``SignDataModule`` pads clips and sentences in ``collate_clips``; frame padding is carried as
``frame_keep`` (True on real frames).

Source: hyunwoongko/transformer PR #40, bentrevett/pytorch-seq2seq#96 (conventions.md section 3 item 21)
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader

try:
    from lightning import LightningDataModule, LightningModule
except ImportError:
    class LightningModule(nn.Module):
        def log(self, *args, **kwargs):
            pass

    class LightningDataModule:
        pass

N_KEYPOINTS, COORDS = 75, 3
VOCAB, PAD, BOS, EOS = 120, 0, 1, 2


def collate_clips(samples):
    n_frames = [s["pose"].size(0) for s in samples]
    n_words = [len(s["words"]) + 2 for s in samples]
    b, f, w = len(samples), max(n_frames), max(n_words)
    pose = torch.zeros(b, f, N_KEYPOINTS * COORDS)
    text = torch.full((b, w), PAD, dtype=torch.long)
    for i, s in enumerate(samples):
        pose[i, : n_frames[i]] = s["pose"].flatten(1)
        text[i, : n_words[i]] = torch.tensor([BOS, *s["words"], EOS])
    frame_keep = torch.arange(f)[None, :] < torch.tensor(n_frames)[:, None]
    return {"pose": pose, "frame_keep": frame_keep, "text": text}


def neg_inf_where(cond):
    return torch.zeros(cond.shape, device=cond.device).masked_fill(cond, float("-inf"))


class SignDataModule(LightningDataModule):
    def __init__(self, clips, batch_size=2):
        super().__init__()
        self.clips, self.batch_size = clips, batch_size

    def train_dataloader(self):
        return DataLoader(self.clips, batch_size=self.batch_size, shuffle=True, collate_fn=collate_clips)

    def val_dataloader(self):
        return DataLoader(self.clips, batch_size=self.batch_size, collate_fn=collate_clips)


class PoseSelfAttention(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h, self.dh = h, d // h
        self.qkv = nn.Linear(d, 3 * d)
        self.o = nn.Linear(d, d)

    def forward(self, x, mask):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.h, self.dh).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.dh)
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        return self.o((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))


class PoseEncoder(nn.Module):
    def __init__(self, d=64, h=4, layers=2):
        super().__init__()
        self.inp = nn.Sequential(nn.Linear(N_KEYPOINTS * COORDS, d), nn.ReLU(), nn.Linear(d, d))
        self.temporal = nn.Conv1d(d, d, kernel_size=3, padding=1)
        self.attn = nn.ModuleList(PoseSelfAttention(d, h) for _ in range(layers))
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))

    def forward(self, pose, frame_keep):
        x = self.inp(pose) * frame_keep[..., None]
        x = x + self.temporal(x.transpose(1, 2)).transpose(1, 2)
        enc_mask = frame_keep[:, None, None, :]
        for attn, norm in zip(self.attn, self.norms):
            x = norm(x + attn(x, enc_mask))
        return x


class SignTranslator(LightningModule):
    def __init__(self, d=64, h=4, lr=5e-4):
        super().__init__()
        self.lr = lr
        self.encoder = PoseEncoder(d, h)
        self.embed = nn.Embedding(VOCAB, d, padding_idx=PAD)
        self.decoder = nn.TransformerDecoderLayer(d, h, dim_feedforward=2 * d, batch_first=True)
        self.out = nn.Linear(d, VOCAB)

    def forward(self, pose, frame_keep, text_in):
        memory = self.encoder(pose, frame_keep)
        t = text_in.size(1)
        future = nn.Transformer.generate_square_subsequent_mask(t, device=text_in.device)
        pos = torch.arange(t, device=text_in.device)[:, None]
        div = torch.exp(torch.arange(0, self.embed.embedding_dim, 2) * (-math.log(1e4) / self.embed.embedding_dim))
        pe = torch.cat([torch.sin(pos * div), torch.cos(pos * div)], dim=-1)
        y = self.decoder(self.embed(text_in) + pe, memory, tgt_mask=future,
                         tgt_key_padding_mask=neg_inf_where(text_in == PAD),
                         memory_key_padding_mask=neg_inf_where(~frame_keep))
        return self.out(y)

    def training_step(self, batch, batch_idx):
        text = batch["text"]
        logits = self(batch["pose"], batch["frame_keep"], text[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), text[:, 1:].flatten(), ignore_index=PAD)
        self.log("train/ce", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        loss = self.training_step(batch, batch_idx)
        self.log("val/ce", loss, sync_dist=True)
        return loss

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.lr)
        warmup = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 100))
        return [opt], [{"scheduler": warmup, "interval": "step"}]


if __name__ == "__main__":
    torch.manual_seed(0)
    clips = [{"pose": torch.randn(n, N_KEYPOINTS, COORDS), "words": list(range(3, 3 + w))}
             for n, w in [(18, 4), (11, 2), (15, 5), (9, 3)]]
    dm = SignDataModule(clips)
    model = SignTranslator()
    opts, _ = model.configure_optimizers()
    model.train()
    for i, batch in enumerate(dm.train_dataloader()):
        loss = model.training_step(batch, i)
        opts[0].zero_grad()
        loss.backward()
        opts[0].step()
    model.eval()
    with torch.no_grad():
        val = [model.validation_step(b, i).item() for i, b in enumerate(dm.val_dataloader())]
    print("train ce", round(loss.item(), 4), "val ce", [round(v, 4) for v in val])
