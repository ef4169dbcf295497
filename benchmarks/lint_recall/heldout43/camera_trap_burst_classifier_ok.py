"""Species classification of camera-trap bursts with a temporal transformer over per-image features.

The iWildCam-style sequence setup: a camera trigger records a burst of 1-6 images, a small CNN
embeds each image, a transformer relates the images of a burst (learned frame positions, written
attention), and two heads predict the burst's species and, per image, whether it is empty (the
MegaDetector-style "blank" filter). The collator pads bursts to the longest one in the batch and
returns `pixel_values` / `attention_mask` the way an image processor does.

Source: conventions.md §1 (HF 2-D attention_mask row, direction cheat-sheet), seed self_attention_mask_guide.txt §7 Q1, seed masked_fill_inplace.txt (作用)
"""
import math
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

SPECIES = ["red_deer", "wild_boar", "red_fox", "badger", "hare"]
COLORS = torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.2, 0.2], [0.9, 0.4, 0.0], [0.8, 0.8, 0.8], [0.5, 0.45, 0.3]])
IMG = 32


@dataclass
class BurstConfig:
    hidden_size: int = 64
    num_heads: int = 4
    num_layers: int = 2
    max_frames: int = 8
    dropout: float = 0.1


def synth_burst(rng, g):
    species = rng.randrange(len(SPECIES))
    n = rng.randint(1, 6)
    background = 0.3 + 0.1 * torch.randn(3, 1, 1, generator=g) + 0.05 * torch.randn(3, IMG, IMG, generator=g)
    x0, dx = rng.randint(-8, 20), rng.choice([-4, 4])
    frames, empty = [], []
    for i in range(n):
        img = background.clone() + 0.03 * torch.randn(3, IMG, IMG, generator=g)
        x = x0 + dx * i
        present = 0 <= x <= IMG - 10 and rng.random() > 0.15
        if present:
            h = 6 + 2 * (species % 3)
            img[:, 14:14 + h, x:x + 10] = COLORS[species][:, None, None] + 0.05 * torch.randn(3, h, 10, generator=g)
        frames.append(img)
        empty.append(not present)
    if all(empty):
        return synth_burst(rng, g)
    return torch.stack(frames), species, torch.tensor(empty)


def collate_bursts(bursts):
    t_max = max(b[0].size(0) for b in bursts)
    pixel_values = torch.zeros(len(bursts), t_max, 3, IMG, IMG)
    attention_mask = torch.zeros(len(bursts), t_max, dtype=torch.long)
    empty = torch.zeros(len(bursts), t_max)
    for i, (frames, _, is_empty) in enumerate(bursts):
        pixel_values[i, : frames.size(0)] = frames
        attention_mask[i, : frames.size(0)] = 1
        empty[i, : frames.size(0)] = is_empty.float()
    labels = torch.tensor([b[1] for b in bursts])
    return {"pixel_values": pixel_values, "attention_mask": attention_mask, "labels": labels, "empty": empty}


class FrameEncoder(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(64, hidden_size, 3, padding=1), nn.BatchNorm2d(hidden_size), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1))

    def forward(self, pixel_values):
        B, T = pixel_values.shape[:2]
        return self.net(pixel_values.flatten(0, 1)).view(B, T, -1)


class BurstSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads, self.head_dim = config.num_heads, config.hidden_size // config.num_heads
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.proj = nn.Linear(config.hidden_size, config.hidden_size)
        self.attn_drop = nn.Dropout(config.dropout)

    def forward(self, hidden_states, attention_mask):
        B, T, C = hidden_states.shape
        q, k, v = self.qkv(hidden_states).view(B, T, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(attention_mask[:, None, None, :] == 0, torch.finfo(scores.dtype).min)
        probs = self.attn_drop(scores.softmax(dim=-1))
        return self.proj((probs @ v).transpose(1, 2).reshape(B, T, C))


class BurstLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(config.hidden_size), nn.LayerNorm(config.hidden_size)
        self.attn = BurstSelfAttention(config)
        self.mlp = nn.Sequential(nn.Linear(config.hidden_size, 2 * config.hidden_size), nn.GELU(),
                                 nn.Linear(2 * config.hidden_size, config.hidden_size), nn.Dropout(config.dropout))

    def forward(self, x, attention_mask):
        x = x + self.attn(self.norm1(x), attention_mask)
        return x + self.mlp(self.norm2(x))


class BurstClassifier(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.frame_encoder = FrameEncoder(config.hidden_size)
        self.frame_pos = nn.Embedding(config.max_frames, config.hidden_size)
        self.layers = nn.ModuleList([BurstLayer(config) for _ in range(config.num_layers)])
        self.norm = nn.LayerNorm(config.hidden_size)
        self.species_head = nn.Linear(config.hidden_size, len(SPECIES))
        self.empty_head = nn.Linear(config.hidden_size, 1)

    def forward(self, pixel_values, attention_mask):
        x = self.frame_encoder(pixel_values)
        x = x + self.frame_pos(torch.arange(x.size(1), device=x.device))
        for layer in self.layers:
            x = layer(x, attention_mask)
        x = self.norm(x)
        weights = attention_mask.unsqueeze(-1).to(x.dtype)
        pooled = (x * weights).sum(1) / weights.sum(1)
        return self.species_head(pooled), self.empty_head(x).squeeze(-1)


def compute_loss(model, batch):
    species_logits, empty_logits = model(batch["pixel_values"], batch["attention_mask"])
    keep = batch["attention_mask"].bool()
    loss = F.cross_entropy(species_logits, batch["labels"])
    return loss + 0.5 * F.binary_cross_entropy_with_logits(empty_logits[keep], batch["empty"][keep]), species_logits


def main():
    rng, g = random.Random(0), torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    train = [synth_burst(rng, g) for _ in range(1200)]
    test = [synth_burst(rng, g) for _ in range(300)]
    model = BurstClassifier(BurstConfig())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    for epoch in range(4):
        model.train()
        rng.shuffle(train)
        for start in range(0, len(train), 32):
            loss, _ = compute_loss(model, collate_bursts(train[start:start + 32]))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            batch = collate_bursts(test)
            _, logits = compute_loss(model, batch)
        acc = (logits.argmax(-1) == batch["labels"]).float().mean().item()
        print(f"epoch {epoch} loss {loss.item():.3f} burst accuracy {acc:.3f}")
    with torch.no_grad():
        short = min(test, key=lambda b: b[0].size(0))
        alone, padded = collate_bursts([short]), collate_bursts([short] + test[:7])
        alone = model(alone["pixel_values"], alone["attention_mask"])[0]
        padded = model(padded["pixel_values"], padded["attention_mask"])[0][:1]
    print("shortest burst alone vs padded:", (alone - padded).abs().max().item())


if __name__ == "__main__":
    main()
