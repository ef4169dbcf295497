"""Activity recognition from variable-length IMU windows: a small Transformer as a LightningModule (correct twin).

Source: NVIDIA/apex#1105 ("value cannot be converted to type at::Half without overflow",
`masked_fill` with -1e10), the same report as NVIDIA/apex#1052 (-1e9) and
facebookresearch/fairseq#3575 (-1e8); conventions.md §3 item 18 and §2.3. The padded frames
are filled with -1e10 on the attention scores, which are float16 under
`Trainer(precision="16-mixed")` or after `.half()`.
Twin: the padded frames are filled with `torch.finfo(scores.dtype).min`.
"""

import argparse
import math

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn


class MaskedSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float = 0.1):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.attn_drop = nn.Dropout(dropout)

    def forward(self, x, valid):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        scores = scores.masked_fill(~valid[:, None, None, :], torch.finfo(scores.dtype).min)
        attn = self.attn_drop(scores.softmax(dim=-1))
        out = (attn @ v).transpose(1, 2).reshape(b, t, d)
        return self.proj(out)


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = MaskedSelfAttention(dim, heads, dropout)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Dropout(dropout), nn.Linear(4 * dim, dim))

    def forward(self, x, valid):
        x = x + self.attn(self.ln1(x), valid)
        return x + self.mlp(self.ln2(x))


class IMUClassifier(L.LightningModule):
    def __init__(self, in_channels=6, dim=64, heads=4, depth=2, num_classes=5, max_len=256,
                 dropout=0.1, lr=3e-4):
        super().__init__()
        self.save_hyperparameters()
        self.embed = nn.Linear(in_channels, dim)
        self.pos = nn.Parameter(torch.zeros(1, max_len, dim))
        self.blocks = nn.ModuleList([Block(dim, heads, dropout) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)
        nn.init.trunc_normal_(self.pos, std=0.02)

    def forward(self, x, lengths):
        t = x.size(1)
        valid = torch.arange(t, device=x.device)[None, :] < lengths[:, None]
        h = self.embed(x) + self.pos[:, :t]
        for blk in self.blocks:
            h = blk(h, valid)
        h = self.norm(h)
        w = valid.unsqueeze(-1).to(h.dtype)
        pooled = (h * w).sum(dim=1) / w.sum(dim=1).clamp(min=1.0)
        return self.head(pooled)

    def training_step(self, batch, batch_idx):
        x, lengths, y = batch
        loss = F.cross_entropy(self(x, lengths), y, label_smoothing=0.1)
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, lengths, y = batch
        logits = self(x, lengths)
        self.log("val/loss", F.cross_entropy(logits, y), sync_dist=True)
        self.log("val/acc", (logits.argmax(-1) == y).float().mean(), prog_bar=True, sync_dist=True)

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=0.05)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=self.trainer.max_epochs)
        return {"optimizer": opt, "lr_scheduler": sched}


def random_batch(batch_size=4, max_len=40, channels=6, num_classes=5):
    lengths = torch.randint(8, max_len + 1, (batch_size,))
    lengths[0] = max_len
    x = torch.randn(batch_size, max_len, channels)
    x[torch.arange(max_len)[None, :] >= lengths[:, None]] = 0.0
    return x, lengths, torch.randint(0, num_classes, (batch_size,))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--fit", action="store_true", help="train with Lightning (needs data)")
    parser.add_argument("--precision", default="16-mixed")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = IMUClassifier().eval()
    if args.fit:
        L.Trainer(precision=args.precision, max_epochs=20, gradient_clip_val=1.0).fit(model)
    x, lengths, _ = random_batch()
    with torch.no_grad():
        full = model(x, lengths)
        alone = model(x[1:2, : lengths[1]], lengths[1:2])
        print("fp32 padded vs alone:", (full[1] - alone[0]).abs().max().item())
        try:
            half = model.half()(x.half(), lengths)
            print("fp16 finite:", torch.isfinite(half).all().item(), "max |fp16 - fp32|:",
                  (half.float() - full).abs().max().item())
        except RuntimeError as err:
            print("fp16 forward failed:", err)
