"""Human activity recognition from wrist IMU streams (PAMAP2 / WISDM style), Lightning.

Sessions of 6-axis accelerometer and gyroscope data are cut into 0.5 s patches; the model labels
every patch (walking, running, cycling, sitting, stairs, ...). Sessions have different lengths,
so ``ImuDataModule`` pads them in ``collate_sessions``. Attention is local: a patch only looks at
patches within ``window`` of it, the way activity changes are local in time.

Source: seed masked_fill_inplace.txt (区别; 作用: masked_fill 返回新张量, 原张量保持不变)
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

try:
    from lightning import LightningDataModule, LightningModule
except ImportError:
    class LightningModule(nn.Module):
        def log(self, *args, **kwargs):
            pass

    class LightningDataModule:
        def __init__(self):
            pass

ACTIVITIES = ["walking", "running", "cycling", "sitting", "standing", "stairs_up", "stairs_down"]
PATCH, CHANNELS = 25, 6


class SessionDataset(Dataset):
    def __init__(self, n_sessions=8, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.items = []
        for _ in range(n_sessions):
            n_patch = int(torch.randint(6, 14, (1,), generator=g))
            labels = torch.randint(0, len(ACTIVITIES), (1,), generator=g).repeat(n_patch)
            signal = torch.randn(n_patch * PATCH, CHANNELS, generator=g) + labels.repeat_interleave(PATCH)[:, None] * 0.3
            self.items.append((signal, labels))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def collate_sessions(batch):
    n = max(sig.size(0) // PATCH for sig, _ in batch)
    patches = torch.zeros(len(batch), n, PATCH * CHANNELS)
    labels = torch.full((len(batch), n), -100, dtype=torch.long)
    keep = torch.zeros(len(batch), n, dtype=torch.bool)
    for i, (sig, lab) in enumerate(batch):
        m = sig.size(0) // PATCH
        patches[i, :m] = sig[: m * PATCH].reshape(m, PATCH * CHANNELS)
        labels[i, :m] = lab[:m]
        keep[i, :m] = True
    return {"patches": patches, "labels": labels, "keep": keep}


class ImuDataModule(LightningDataModule):
    def __init__(self, batch_size=4):
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage=None):
        self.train_set, self.val_set = SessionDataset(8, seed=0), SessionDataset(4, seed=1)

    def train_dataloader(self):
        return DataLoader(self.train_set, self.batch_size, shuffle=True, collate_fn=collate_sessions)

    def val_dataloader(self):
        return DataLoader(self.val_set, self.batch_size, collate_fn=collate_sessions)


class LocalAttention(nn.Module):
    def __init__(self, d, heads, window):
        super().__init__()
        self.heads, self.window = heads, window
        self.scale = (d // heads) ** -0.5
        self.to_qkv = nn.Linear(d, 3 * d, bias=False)
        self.to_out = nn.Linear(d, d)

    def forward(self, x, keep):
        b, n, d = x.shape
        q, k, v = self.to_qkv(x).reshape(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        scores = torch.einsum("bhid,bhjd->bhij", q, k) * self.scale
        idx = torch.arange(n, device=x.device)
        outside = (idx[:, None] - idx[None, :]).abs() > self.window
        scores = scores.masked_fill(outside, float("-inf"))
        scores = scores.masked_fill(~keep[:, None, None, :], torch.finfo(scores.dtype).min)
        attn = scores.softmax(dim=-1)
        out = torch.einsum("bhij,bhjd->bhid", attn, v)
        return self.to_out(out.transpose(1, 2).reshape(b, n, d))


class ActivityTagger(LightningModule):
    def __init__(self, d=64, heads=4, depth=2, window=2, lr=1e-3):
        super().__init__()
        self.lr = lr
        self.embed = nn.Sequential(nn.LayerNorm(PATCH * CHANNELS), nn.Linear(PATCH * CHANNELS, d))
        self.blocks = nn.ModuleList(LocalAttention(d, heads, window) for _ in range(depth))
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(depth))
        self.head = nn.Linear(d, len(ACTIVITIES))

    def forward(self, patches, keep):
        x = self.embed(patches)
        for blk, norm in zip(self.blocks, self.norms):
            x = x + blk(norm(x), keep)
        return self.head(x)

    def training_step(self, batch, batch_idx):
        logits = self(batch["patches"], batch["keep"])
        loss = F.cross_entropy(logits.transpose(1, 2), batch["labels"], ignore_index=-100)
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        logits = self(batch["patches"], batch["keep"])
        valid = batch["labels"] != -100
        acc = (logits.argmax(-1) == batch["labels"])[valid].float().mean()
        self.log("val/acc", acc, prog_bar=True)
        return acc

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr)


if __name__ == "__main__":
    torch.manual_seed(0)
    dm = ImuDataModule()
    dm.setup("fit")
    model = ActivityTagger()
    opt = model.configure_optimizers()
    for epoch in range(2):
        model.train()
        for i, batch in enumerate(dm.train_dataloader()):
            loss = model.training_step(batch, i)
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            accs = [model.validation_step(b, i).item() for i, b in enumerate(dm.val_dataloader())]
        print(f"epoch {epoch} loss {loss.item():.4f} val acc {sum(accs) / len(accs):.3f}")
