"""Whole-slide image classification for computational pathology with TransMIL.

Imitates szc19990412/TransMIL (Shao et al., NeurIPS 2021): a bag of patch features per slide,
`_fc1`, a class token, two `TransLayer`s built on lucidrains' nystrom-attention
(`NystromAttention` with landmarks, `moore_penrose_iter_pinv` and the depth-wise residual
convolution of the values), the `PPEG` positional encoder that folds the patch tokens into a
square grid, and a Lightning-style `ModelInterface` driven by a yaml-like config whose
`General.precision` can be 16. Unlike the original (one slide per step) several slides are
batched and their bags padded, with a patch mask handed to every attention.
Synthetic data: Camelyon16-like bags of 18-60 patch features, tumour slides containing a few
patches drawn from a shifted distribution.

Source: NVIDIA/apex#1052, NVIDIA/apex#1105, facebookresearch/fairseq#3575 (conventions.md §3
item 18), conventions.md §2.3 and §5 item 5.
"""

import argparse
from math import ceil
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def load_config(precision=32):
    return SimpleNamespace(
        General=SimpleNamespace(seed=2021, precision=precision, epochs=8, patience=10),
        Data=SimpleNamespace(n_train=96, n_val=32, feat_dim=64, min_patches=18, max_patches=60,
                             batch_size=8),
        Model=SimpleNamespace(name="TransMIL", n_classes=2, dim=32),
        Optimizer=SimpleNamespace(opt="lookahead_radam", lr=1e-3, weight_decay=1e-5),
    )


def moore_penrose_iter_pinv(x, iters=6):
    abs_x = torch.abs(x)
    col = abs_x.sum(dim=-1)
    row = abs_x.sum(dim=-2)
    z = x.transpose(-1, -2) / (torch.max(col) * torch.max(row))
    I = torch.eye(x.shape[-1], device=x.device, dtype=x.dtype)[None]
    for _ in range(iters):
        xz = x @ z
        z = 0.25 * z @ (13 * I - (xz @ (15 * I - (xz @ (7 * I - xz)))))
    return z


class NystromAttention(nn.Module):
    def __init__(self, dim, dim_head=64, heads=8, num_landmarks=256, pinv_iterations=6,
                 residual=True, residual_conv_kernel=33, eps=1e-8, dropout=0.0):
        super().__init__()
        self.eps = eps
        inner_dim = heads * dim_head
        self.num_landmarks = num_landmarks
        self.pinv_iterations = pinv_iterations
        self.heads = heads
        self.scale = dim_head ** -0.5
        self.to_qkv = nn.Linear(dim, inner_dim * 3, bias=False)
        self.to_out = nn.Sequential(nn.Linear(inner_dim, dim), nn.Dropout(dropout))
        self.residual = residual
        if residual:
            padding = residual_conv_kernel // 2
            self.res_conv = nn.Conv2d(heads, heads, (residual_conv_kernel, 1),
                                      padding=(padding, 0), groups=heads, bias=False)

    def forward(self, x, mask=None):
        b, n, _ = x.shape
        h, m, iters = self.heads, self.num_landmarks, self.pinv_iterations
        remainder = n % m
        if remainder > 0:
            padding = m - remainder
            x = F.pad(x, (0, 0, padding, 0), value=0)
            if mask is not None:
                mask = F.pad(mask, (padding, 0), value=False)
        q, k, v = self.to_qkv(x).chunk(3, dim=-1)
        q, k, v = (t.reshape(b, -1, h, t.shape[-1] // h).transpose(1, 2) for t in (q, k, v))
        if mask is not None:
            mask = mask[:, None, :]
            q, k, v = (t * mask[..., None] for t in (q, k, v))
        q = q * self.scale
        l = ceil(x.shape[1] / m)
        q_landmarks = q.reshape(b, h, m, l, -1).sum(dim=3)
        k_landmarks = k.reshape(b, h, m, l, -1).sum(dim=3)
        divisor = l
        if mask is not None:
            mask_landmarks_sum = mask.reshape(b, 1, m, l).sum(dim=-1)
            divisor = mask_landmarks_sum[..., None].to(q.dtype).clamp(min=1.0)
            mask_landmarks = mask_landmarks_sum > 0
        q_landmarks = q_landmarks / divisor
        k_landmarks = k_landmarks / divisor
        sim1 = q @ k_landmarks.transpose(-1, -2)
        sim2 = q_landmarks @ k_landmarks.transpose(-1, -2)
        sim3 = q_landmarks @ k.transpose(-1, -2)
        if mask is not None:
            mask_value = -1e9  # expect: MC501 constant
            sim1 = sim1.masked_fill(~(mask[..., None] & mask_landmarks[..., None, :]), mask_value)  # also: MC501
            sim2 = sim2.masked_fill(~(mask_landmarks[..., None] & mask_landmarks[..., None, :]), mask_value)
            sim3 = sim3.masked_fill(~(mask_landmarks[..., None] & mask[..., None, :]), mask_value)
        attn1, attn2, attn3 = (t.softmax(dim=-1) for t in (sim1, sim2, sim3))
        attn2_inv = moore_penrose_iter_pinv(attn2, iters)
        out = (attn1 @ attn2_inv) @ (attn3 @ v)
        if self.residual:
            out = out + self.res_conv(v)
        out = out.transpose(1, 2).reshape(b, -1, h * out.shape[-1])
        out = self.to_out(out)
        return out[:, -n:]


class TransLayer(nn.Module):
    def __init__(self, norm_layer=nn.LayerNorm, dim=512):
        super().__init__()
        self.norm = norm_layer(dim)
        self.attn = NystromAttention(dim=dim, dim_head=dim // 4, heads=4, num_landmarks=8,
                                     pinv_iterations=6, residual=True, residual_conv_kernel=9,
                                     dropout=0.1)

    def forward(self, x, mask=None):
        return x + self.attn(self.norm(x), mask=mask)


class PPEG(nn.Module):
    def __init__(self, dim=512):
        super().__init__()
        self.proj = nn.Conv2d(dim, dim, 7, 1, 7 // 2, groups=dim)
        self.proj1 = nn.Conv2d(dim, dim, 5, 1, 5 // 2, groups=dim)
        self.proj2 = nn.Conv2d(dim, dim, 3, 1, 3 // 2, groups=dim)

    def forward(self, x, H, W):
        B, _, C = x.shape
        cls_token, feat_token = x[:, 0], x[:, 1:]
        cnn_feat = feat_token.transpose(1, 2).reshape(B, C, H, W)
        x = self.proj(cnn_feat) + cnn_feat + self.proj1(cnn_feat) + self.proj2(cnn_feat)
        x = x.flatten(2).transpose(1, 2)
        return torch.cat((cls_token.unsqueeze(1), x), dim=1)


class TransMIL(nn.Module):
    def __init__(self, n_classes, feat_dim=1024, dim=512):
        super().__init__()
        self.pos_layer = PPEG(dim=dim)
        self._fc1 = nn.Sequential(nn.Linear(feat_dim, dim), nn.ReLU())
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim))
        self.n_classes = n_classes
        self.layer1 = TransLayer(dim=dim)
        self.layer2 = TransLayer(dim=dim)
        self.norm = nn.LayerNorm(dim)
        self._fc2 = nn.Linear(dim, self.n_classes)

    def forward(self, **kwargs):
        h = kwargs["data"]
        patch_mask = kwargs["mask"]
        h = self._fc1(h)
        H = h.shape[1]
        _H, _W = int(np.ceil(np.sqrt(H))), int(np.ceil(np.sqrt(H)))
        add_length = _H * _W - H
        h = F.pad(h, (0, 0, 0, add_length))
        patch_mask = F.pad(patch_mask, (0, add_length), value=False)
        B = h.shape[0]
        cls_tokens = self.cls_token.expand(B, -1, -1).to(h.dtype)
        h = torch.cat((cls_tokens, h), dim=1)
        mask = torch.cat((patch_mask.new_ones(B, 1), patch_mask), dim=1)
        h = self.layer1(h, mask=mask)
        h = self.pos_layer(h, _H, _W)
        h = self.layer2(h, mask=mask)
        h = self.norm(h)[:, 0]
        logits = self._fc2(h)
        Y_hat = torch.argmax(logits, dim=1)
        Y_prob = F.softmax(logits, dim=1)
        return {"logits": logits, "Y_prob": Y_prob, "Y_hat": Y_hat}


def make_slides(n, cfg, rng):
    slides = []
    for _ in range(n):
        n_patches = int(rng.integers(cfg.Data.min_patches, cfg.Data.max_patches + 1))
        feats = rng.normal(0.0, 1.0, size=(n_patches, cfg.Data.feat_dim)).astype(np.float32)
        label = int(rng.random() < 0.5)
        if label:
            n_tumour = max(2, n_patches // 8)
            idx = rng.choice(n_patches, size=n_tumour, replace=False)
            feats[idx, :8] += 2.5
        slides.append((feats, label))
    return slides


def collate_bags(batch):
    lengths = [len(feats) for feats, _ in batch]
    n = max(lengths)
    data = torch.zeros(len(batch), n, batch[0][0].shape[1])
    mask = torch.zeros(len(batch), n, dtype=torch.bool)
    for i, (feats, _) in enumerate(batch):
        data[i, : len(feats)] = torch.from_numpy(feats)
        mask[i, : len(feats)] = True
    label = torch.tensor([label for _, label in batch])
    return {"data": data, "mask": mask, "label": label}


class ModelInterface:
    def __init__(self, cfg):
        self.cfg = cfg
        self.model = TransMIL(n_classes=cfg.Model.n_classes, feat_dim=cfg.Data.feat_dim,
                              dim=cfg.Model.dim)
        self.loss = nn.CrossEntropyLoss()

    def configure_optimizers(self):
        return torch.optim.AdamW(self.model.parameters(), lr=self.cfg.Optimizer.lr,
                                 weight_decay=self.cfg.Optimizer.weight_decay)

    def training_step(self, batch):
        results_dict = self.model(data=batch["data"], mask=batch["mask"])
        return self.loss(results_dict["logits"], batch["label"])

    @torch.no_grad()
    def validation_step(self, batch):
        dtype = next(self.model.parameters()).dtype
        results_dict = self.model(data=batch["data"].to(dtype), mask=batch["mask"])
        return results_dict["Y_hat"], batch["label"]


def fit(cfg):
    torch.manual_seed(cfg.General.seed)
    rng = np.random.default_rng(cfg.General.seed)
    train_set = make_slides(cfg.Data.n_train, cfg, rng)
    val_set = make_slides(cfg.Data.n_val, cfg, rng)
    interface = ModelInterface(cfg)
    optimizer = interface.configure_optimizers()
    bs = cfg.Data.batch_size
    for epoch in range(cfg.General.epochs):
        interface.model.train()
        order = rng.permutation(len(train_set))
        total = 0.0
        for start in range(0, len(order), bs):
            batch = collate_bags([train_set[i] for i in order[start:start + bs]])
            loss = interface.training_step(batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
        print(f"epoch {epoch} train_loss {total / ceil(len(order) / bs):.4f}")
    if cfg.General.precision == 16:
        interface.model = interface.model.half()
    interface.model.eval()
    correct = 0
    for start in range(0, len(val_set), bs):
        y_hat, y = interface.validation_step(collate_bags(val_set[start:start + bs]))
        correct += (y_hat == y).sum().item()
    print(f"val_acc {correct / len(val_set):.3f}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    parser = argparse.ArgumentParser()
    parser.add_argument("--precision", type=int, default=32, choices=[16, 32])
    args = parser.parse_args()
    fit(load_config(precision=args.precision))
