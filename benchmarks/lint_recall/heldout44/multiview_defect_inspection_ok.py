"""Multi-camera surface-defect inspection of machined parts, with timm-style vision transformer
modules (huggingface/pytorch-image-models: ``PatchEmbed``, ``Attention`` with a fused ``qkv`` and
``scale``, ``Mlp``, ``Block``, a class token) shared across camera views.

Each inspection station photographs a part with two to four cameras; a view transformer encodes
each image, leaving background patches (no part in them) out of attention, and ``ViewFusion``
pools the views of a part into one accept / reject decision. Synthetic grey-scale parts with
scratches and pits visible from some views only.

Source: TransformerLensOrg/TransformerLens PR #366 (conventions.md section 3 item 20);
conventions.md section 1 (values used in the wild); seed masked_fill_inplace.txt (examples).
"""

import random

import torch
import torch.nn as nn
import torch.nn.functional as F


def render_view(rng, defect_visible, size=32):
    yy, xx = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
    cx, cy, r = rng.uniform(13, 19), rng.uniform(13, 19), rng.uniform(8, 12)
    part = (((xx - cx) ** 2 + (yy - cy) ** 2) < r * r).float()
    img = part * (0.6 + 0.1 * torch.rand(size, size))
    if defect_visible:
        if rng.random() < 0.5:
            x0, slope = rng.uniform(cx - 5, cx + 5), rng.uniform(-1, 1)
            line = ((xx - x0 - slope * (yy - cy)).abs() < 1.5) & (part > 0) & ((yy - cy).abs() < r * 0.6)
            img = img.masked_fill(line, 0.15)
        else:
            px, py = cx + rng.uniform(-4, 4), cy + rng.uniform(-4, 4)
            img = img.masked_fill(((xx - px) ** 2 + (yy - py) ** 2) < 9.0, 1.0)
    return img


def make_inspection(rng, max_views=4):
    n_views = rng.randint(2, max_views)
    defective = rng.random() < 0.4
    visible = [False] * n_views
    if defective:
        for i in rng.sample(range(n_views), rng.randint(1, n_views - 1)):
            visible[i] = True
    views = torch.zeros(max_views, 1, 32, 32)
    for i in range(n_views):
        views[i, 0] = render_view(rng, visible[i])
    view_keep = torch.arange(max_views) < n_views
    return views, view_keep, int(defective)


class PatchEmbed(nn.Module):
    def __init__(self, img_size=32, patch_size=8, in_chans=1, embed_dim=64):
        super().__init__()
        self.num_patches = (img_size // patch_size) ** 2
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


class Attention(nn.Module):
    def __init__(self, dim, num_heads=4, qkv_bias=True, attn_drop=0.0, proj_drop=0.0):
        super().__init__()
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x, key_keep=None):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        if key_keep is not None:
            attn = attn.masked_fill(~key_keep[:, None, None, :], float("-inf"))
        attn = self.attn_drop(attn.softmax(dim=-1))
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj_drop(self.proj(x))


class Mlp(nn.Module):
    def __init__(self, in_features, hidden_features):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(in_features, hidden_features), nn.GELU(), nn.Linear(hidden_features, in_features)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=2.0):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, num_heads)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))

    def forward(self, x, key_keep=None):
        x = x + self.attn(self.norm1(x), key_keep=key_keep)
        return x + self.mlp(self.norm2(x))


class ViewTransformer(nn.Module):
    def __init__(self, embed_dim=64, depth=2, num_heads=4, background_level=0.05, img_mean=0.3, img_std=0.3):
        super().__init__()
        self.patch_embed = PatchEmbed(embed_dim=embed_dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.randn(1, self.patch_embed.num_patches + 1, embed_dim) * 0.02)
        self.blocks = nn.ModuleList([Block(embed_dim, num_heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(embed_dim)
        self.background_level = background_level
        self.img_mean, self.img_std = img_mean, img_std

    def roi_keep(self, images):
        foreground = F.avg_pool2d(images, 8).flatten(1) > self.background_level
        return torch.cat([torch.ones_like(foreground[:, :1]), foreground], 1)

    def forward(self, images):
        x = self.patch_embed((images - self.img_mean) / self.img_std)
        x = torch.cat([self.cls_token.expand(x.size(0), -1, -1), x], 1) + self.pos_embed
        keep = self.roi_keep(images)
        for blk in self.blocks:
            x = blk(x, key_keep=keep)
        return self.norm(x[:, 0])


class ViewFusion(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.score = nn.Sequential(nn.Linear(dim, dim), nn.Tanh(), nn.Linear(dim, 1))

    def forward(self, view_tokens, view_keep):
        logits = self.score(view_tokens).squeeze(-1)
        logits = logits.masked_fill(~view_keep, float("-inf"))
        alpha = logits.softmax(dim=-1)
        return (alpha.unsqueeze(-1) * view_tokens).sum(1), alpha


class InspectionModel(nn.Module):
    def __init__(self, dim=64):
        super().__init__()
        self.view_encoder = ViewTransformer(embed_dim=dim)
        self.view_fusion = ViewFusion(dim)
        self.head = nn.Linear(dim, 1)

    def forward(self, views, view_keep):
        b, v = views.shape[:2]
        tokens = self.view_encoder(views.flatten(0, 1)).view(b, v, -1)
        fused, alpha = self.view_fusion(tokens, view_keep)
        return self.head(fused).squeeze(-1), alpha


def main():
    torch.manual_seed(0)
    rng = random.Random(0)
    data = [make_inspection(rng) for _ in range(1100)]
    views = torch.stack([d[0] for d in data])
    keep = torch.stack([d[1] for d in data])
    labels = torch.tensor([d[2] for d in data], dtype=torch.float)
    model = InspectionModel()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.05)
    for epoch in range(12):
        model.train()
        perm = torch.randperm(880)
        for s in range(0, 880, 32):
            idx = perm[s : s + 32]
            logits, _ = model(views[idx], keep[idx])
            loss = F.binary_cross_entropy_with_logits(logits, labels[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            logits, alpha = model(views[880:], keep[880:])
        pred = (logits > 0).float()
        tp = ((pred == 1) & (labels[880:] == 1)).sum().item()
        recall = tp / max(1, labels[880:].sum().item())
        precision = tp / max(1, pred.sum().item())
        acc = (pred == labels[880:]).float().mean().item()
        print(f"epoch {epoch} loss {loss.item():.3f} acc {acc:.3f} defect recall {recall:.3f} precision {precision:.3f}")


if __name__ == "__main__":
    main()
