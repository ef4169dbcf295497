"""Understanding Clouds from Satellite Images: Fish/Flower/Gravel/Sugar masks, convolutional stem with a transformer head over patches.

Source: NVIDIA/apex#1052 (conventions.md §3 item 18); huggingface/lerobot PR #710 (§3 item 19); conventions.md §2.3, §5 item 5.
"""
import os
import gc
import csv
import math
import time
import random

import numpy as np


class CFG:
    seed = 69
    data_dir = "../input/understanding_cloud_organization"
    classes = ["Fish", "Flower", "Gravel", "Sugar"]
    img_h = 96
    img_w = 144
    patch = 8
    dim = 96
    heads = 4
    depth = 2
    batch_size = 8
    epochs = 2
    lr = 3e-4
    n_synthetic = 96
    nodata_thr = 0.02
    amp = False
    amp_dtype = None


def seed_everything(seed):
    random.seed(seed)
    np.random.seed(seed)


seed_everything(CFG.seed)


def rle_decode(rle, shape):
    s = np.asarray(rle.split(), dtype=int)
    mask = np.zeros(shape[0] * shape[1], dtype=np.uint8)
    for lo, ln in zip(s[0::2] - 1, s[1::2]):
        mask[lo: lo + ln] = 1
    return mask.reshape(shape, order="F")


def rle_encode(mask):
    pixels = np.concatenate([[0], mask.flatten(order="F"), [0]])
    runs = np.where(pixels[1:] != pixels[:-1])[0] + 1
    runs[1::2] -= runs[::2]
    return " ".join(str(x) for x in runs)


def synthetic_scene():
    img = np.clip(np.random.rand(CFG.img_h, CFG.img_w, 3) * 0.2 + 0.3, 0, 1).astype(np.float32)
    masks = np.zeros((len(CFG.classes), CFG.img_h, CFG.img_w), dtype=np.float32)
    for c in range(len(CFG.classes)):
        if random.random() < 0.5:
            y0, x0 = random.randrange(CFG.img_h - 24), random.randrange(CFG.img_w - 32)
            h, w = random.randint(16, 40), random.randint(24, 64)
            masks[c, y0: y0 + h, x0: x0 + w] = 1
            img[y0: y0 + h, x0: x0 + w, c % 3] += 0.3 + 0.1 * c
    if random.random() < 0.6:
        x0 = random.randrange(CFG.img_w - 24)
        img[:, x0: x0 + random.randint(8, 40)] = 0.0
    return np.clip(img, 0, 1), masks


train_csv = os.path.join(CFG.data_dir, "train.csv")
if os.path.exists(train_csv):
    import cv2
    with open(train_csv) as f:
        rows = list(csv.DictReader(f))
    image_ids = sorted({r["Image_Label"].split("_")[0] for r in rows})
    rle_of = {r["Image_Label"]: r["EncodedPixels"] for r in rows}
    scenes = {}
else:
    image_ids = [f"{i:07x}.jpg" for i in range(CFG.n_synthetic)]
    scenes = {iid: synthetic_scene() for iid in image_ids}
print(f"images: {len(image_ids)}")


def get_scene(iid):
    if iid not in scenes:
        img = cv2.imread(os.path.join(CFG.data_dir, "train_images", iid))[..., ::-1]
        full = img.shape[:2]
        img = cv2.resize(img, (CFG.img_w, CFG.img_h)).astype(np.float32) / 255.0
        masks = [rle_decode(rle_of[f"{iid}_{c}"], full) if rle_of[f"{iid}_{c}"] else np.zeros(full, np.uint8)
                 for c in CFG.classes]
        masks = np.stack([cv2.resize(m, (CFG.img_w, CFG.img_h)) for m in masks]).astype(np.float32)
        scenes[iid] = (img, masks)
    return scenes[iid]


import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import Dataset, DataLoader

torch.manual_seed(CFG.seed)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
CFG.amp = device.type == "cuda"
CFG.amp_dtype = torch.float16


class CloudDataset(Dataset):
    def __init__(self, ids, augment=False):
        self.ids = ids
        self.augment = augment

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        img, masks = get_scene(self.ids[i])
        img, masks = img.copy(), masks.copy()
        if self.augment and random.random() < 0.5:
            img, masks = img[:, ::-1].copy(), masks[:, :, ::-1].copy()
        if self.augment and random.random() < 0.5:
            img, masks = img[::-1].copy(), masks[:, ::-1].copy()
        return torch.from_numpy(img).permute(2, 0, 1), torch.from_numpy(masks)


def patch_nodata(img, patch, thr):
    dark = (img.max(dim=1, keepdim=True).values <= 1e-3).float()
    frac = F.avg_pool2d(dark, patch)
    return (frac > 1 - thr).flatten(1)


class PatchAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, nodata):
        B, N, C = x.shape
        with torch.autocast(device_type=x.device.type, dtype=CFG.amp_dtype, enabled=CFG.amp):
            q, k, v = self.qkv(x).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
            scores = torch.matmul(q, k.transpose(-2, -1)) * self.scale
            scores = scores.masked_fill(nodata[:, None, None, :], torch.finfo(torch.float32).min)  # expect: MC517 nodata
            attn = scores.softmax(dim=-1)
            out = torch.matmul(attn, v).transpose(1, 2).reshape(B, N, C)
            return self.proj(out)


class TransformerHead(nn.Module):
    def __init__(self, dim, heads, depth):
        super().__init__()
        self.norms1 = nn.ModuleList([nn.LayerNorm(dim) for _ in range(depth)])
        self.attns = nn.ModuleList([PatchAttention(dim, heads) for _ in range(depth)])
        self.norms2 = nn.ModuleList([nn.LayerNorm(dim) for _ in range(depth)])
        self.mlps = nn.ModuleList([nn.Sequential(nn.Linear(dim, dim * 4), nn.GELU(), nn.Linear(dim * 4, dim))
                                   for _ in range(depth)])

    def forward(self, x, nodata):
        for n1, attn, n2, mlp in zip(self.norms1, self.attns, self.norms2, self.mlps):
            x = x + attn(n1(x), nodata)
            x = x + mlp(n2(x))
        return x


class CloudSegmenter(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                                  nn.Conv2d(32, CFG.dim, CFG.patch, stride=CFG.patch))
        n_patches = (CFG.img_h // CFG.patch) * (CFG.img_w // CFG.patch)
        self.pos = nn.Parameter(torch.zeros(1, n_patches, CFG.dim))
        self.head = TransformerHead(CFG.dim, CFG.heads, CFG.depth)
        self.decode = nn.Sequential(nn.Conv2d(CFG.dim + 32, 64, 3, padding=1), nn.ReLU(),
                                    nn.Conv2d(64, len(CFG.classes), 1))
        self.skip = nn.Conv2d(3, 32, 3, padding=1)

    def forward(self, img):
        B, _, H, W = img.shape
        nodata = patch_nodata(img, CFG.patch, CFG.nodata_thr)
        feat = self.stem(img)
        h, w = feat.shape[-2:]
        tokens = feat.flatten(2).transpose(1, 2) + self.pos
        tokens = self.head(tokens, nodata)
        feat = tokens.transpose(1, 2).reshape(B, CFG.dim, h, w)
        feat = F.interpolate(feat, size=(H, W), mode="bilinear", align_corners=False)
        return self.decode(torch.cat([feat, self.skip(img)], dim=1))


def dice_coef(logits, target, thr=0.5, eps=1e-6):
    pred = (torch.sigmoid(logits) > thr).float()
    inter = (pred * target).sum(dim=(2, 3))
    union = pred.sum(dim=(2, 3)) + target.sum(dim=(2, 3))
    return ((2 * inter + eps) / (union + eps)).mean().item()


def bce_dice_loss(logits, target):
    bce = F.binary_cross_entropy_with_logits(logits, target)
    p = torch.sigmoid(logits)
    dice = 1 - (2 * (p * target).sum((2, 3)) + 1) / (p.sum((2, 3)) + target.sum((2, 3)) + 1)
    return bce + dice.mean()


random.shuffle(image_ids)
n_val = max(CFG.batch_size, len(image_ids) // 5)
train_loader = DataLoader(CloudDataset(image_ids[n_val:], augment=True), batch_size=CFG.batch_size, shuffle=True)
valid_loader = DataLoader(CloudDataset(image_ids[:n_val]), batch_size=CFG.batch_size)

if __name__ == "__main__":
    model = CloudSegmenter().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=CFG.lr, weight_decay=1e-4)
    scaler = torch.amp.GradScaler("cuda", enabled=CFG.amp)
    for epoch in range(CFG.epochs):
        t0 = time.time()
        model.train()
        for img, masks in train_loader:
            img, masks = img.to(device), masks.to(device)
            loss = bce_dice_loss(model(img).float(), masks)
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        model.eval()
        dices = []
        with torch.no_grad():
            for img, masks in valid_loader:
                dices.append(dice_coef(model(img.to(device)).float(), masks.to(device)))
        print(f"epoch {epoch} loss {loss.item():.4f} valid dice {np.mean(dices):.4f} ({time.time() - t0:.1f}s)")
    torch.save(model.state_dict(), "cloud_segformer.pt")
    example = (torch.sigmoid(model(CloudDataset(image_ids[:1])[0][0][None].to(device)))[0, 0] > 0.5).cpu().numpy()
    print("example rle:", rle_encode(example.astype(np.uint8))[:60])
    gc.collect()
