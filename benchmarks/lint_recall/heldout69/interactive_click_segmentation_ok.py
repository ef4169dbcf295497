"""Click-based interactive segmentation with a SAM-style prompt encoder and
two-way mask decoder.

Positive and negative clicks are encoded with random Fourier features and a
label embedding; images in a batch carry different numbers of clicks, padded
with label -1. The clicks first attend to each other, then a two-way
transformer exchanges information between prompt tokens and the image
embedding, and hypernetwork heads predict several candidate masks.

Source: conventions.md section 2.6 and section 5 item 6.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class PositionEmbeddingRandom(nn.Module):
    def __init__(self, num_pos_feats=32, scale=1.0):
        super().__init__()
        self.register_buffer("gaussian", scale * torch.randn(2, num_pos_feats))

    def encode(self, coords):
        coords = (2 * coords - 1) @ self.gaussian * 2 * math.pi
        return torch.cat([coords.sin(), coords.cos()], dim=-1)

    def grid(self, h, w):
        ys = (torch.arange(h, dtype=torch.float32) + 0.5) / h
        xs = (torch.arange(w, dtype=torch.float32) + 0.5) / w
        yy, xx = torch.meshgrid(ys, xs, indexing="ij")
        return self.encode(torch.stack([xx, yy], dim=-1)).permute(2, 0, 1)


class Attention(nn.Module):
    def __init__(self, dim, heads, downsample=1):
        super().__init__()
        inner = dim // downsample
        self.heads = heads
        self.q_proj, self.k_proj, self.v_proj = nn.Linear(dim, inner), nn.Linear(dim, inner), nn.Linear(dim, inner)
        self.out_proj = nn.Linear(inner, dim)

    def _separate_heads(self, x):
        b, n, c = x.shape
        return x.reshape(b, n, self.heads, c // self.heads).transpose(1, 2)

    def forward(self, q, k, v, attn_mask=None):
        q = self._separate_heads(self.q_proj(q))
        k = self._separate_heads(self.k_proj(k))
        v = self._separate_heads(self.v_proj(v))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        b, h, n, c = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(b, n, h * c))


class TwoWayBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.self_attn = Attention(dim, heads)
        self.cross_token_to_image = Attention(dim, heads, downsample=2)
        self.cross_image_to_token = Attention(dim, heads, downsample=2)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.ReLU(), nn.Linear(2 * dim, dim))
        self.norms = nn.ModuleList([nn.LayerNorm(dim) for _ in range(4)])

    def forward(self, tokens, token_pe, image, image_pe, token_keep):
        keys_mask = token_keep[:, None, None, :]
        q = tokens + token_pe
        tokens = self.norms[0](tokens + self.self_attn(q, q, tokens, attn_mask=keys_mask))
        q = tokens + token_pe
        tokens = self.norms[1](tokens + self.cross_token_to_image(q, image + image_pe, image))
        tokens = self.norms[2](tokens + self.mlp(tokens))
        k = tokens + token_pe
        image = self.norms[3](image + self.cross_image_to_token(image + image_pe, k, tokens, attn_mask=keys_mask))
        return tokens, image


class ClickSAM(nn.Module):
    def __init__(self, dim=64, heads=4, num_multimask=3, patch=8):
        super().__init__()
        self.image_encoder = nn.Sequential(
            nn.Conv2d(3, dim, patch, patch), nn.GELU(), nn.Conv2d(dim, dim, 3, padding=1),
        )
        self.pe_layer = PositionEmbeddingRandom(dim // 2)
        self.point_embeddings = nn.Embedding(2, dim)
        self.not_a_point_embed = nn.Embedding(1, dim)
        self.click_attn = Attention(dim, heads)
        self.click_norm = nn.LayerNorm(dim)
        self.num_mask_tokens = num_multimask + 1
        self.iou_token = nn.Embedding(1, dim)
        self.mask_tokens = nn.Embedding(self.num_mask_tokens, dim)
        self.blocks = nn.ModuleList([TwoWayBlock(dim, heads) for _ in range(2)])
        self.upscale = nn.Sequential(
            nn.ConvTranspose2d(dim, dim // 4, 2, 2), nn.GELU(), nn.ConvTranspose2d(dim // 4, dim // 8, 2, 2),
        )
        self.hyper_mlps = nn.ModuleList([
            nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim // 8))
            for _ in range(self.num_mask_tokens)
        ])
        self.iou_head = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, self.num_mask_tokens))

    def embed_clicks(self, coords, labels):
        pe = self.pe_layer.encode(coords)
        emb = pe + self.point_embeddings(labels.clamp(min=0))
        return torch.where((labels == -1)[..., None], self.not_a_point_embed.weight, emb)

    def forward(self, images, coords, labels, num_clicks):
        b, n = labels.shape
        image = self.image_encoder(images)
        _, c, h, w = image.shape
        image_pe = self.pe_layer.grid(h, w).flatten(1).T[None].expand(b, -1, -1)
        image = image.flatten(2).transpose(1, 2)
        clicks = self.embed_clicks(coords, labels)
        click_keep = torch.arange(n, device=labels.device)[None, :] < num_clicks[:, None]
        attended = self.click_attn(clicks, clicks, clicks, attn_mask=click_keep[:, None, None, :])
        clicks = self.click_norm(clicks + attended)
        output_tokens = torch.cat([self.iou_token.weight, self.mask_tokens.weight])[None].expand(b, -1, -1)
        tokens = torch.cat([output_tokens, clicks], dim=1)
        token_keep = torch.cat([torch.ones(b, output_tokens.shape[1], dtype=torch.bool), click_keep], dim=1)
        token_pe = tokens
        for blk in self.blocks:
            tokens, image = blk(tokens, token_pe, image, image_pe, token_keep)
        upscaled = self.upscale(image.transpose(1, 2).reshape(b, c, h, w))
        mask_tokens = tokens[:, 1: 1 + self.num_mask_tokens]
        hyper = torch.stack([mlp(mask_tokens[:, i]) for i, mlp in enumerate(self.hyper_mlps)], dim=1)
        masks = torch.einsum("bmc,bchw->bmhw", hyper, upscaled)
        return masks[:, 1:], self.iou_head(tokens[:, 0])[:, 1:]


def collate_clicks(click_lists):
    n = max(len(c) for c in click_lists)
    coords = torch.zeros(len(click_lists), n, 2)
    labels = torch.full((len(click_lists), n), -1, dtype=torch.long)
    for i, clicks in enumerate(click_lists):
        for j, (x, y, positive) in enumerate(clicks):
            coords[i, j] = torch.tensor([x, y])
            labels[i, j] = int(positive)
    return coords, labels, torch.tensor([len(c) for c in click_lists])


def mask_loss(masks, iou_pred, gt):
    gt = F.interpolate(gt[:, None], size=masks.shape[-2:], mode="nearest").expand_as(masks)
    focal = F.binary_cross_entropy_with_logits(masks, gt, reduction="none").flatten(2).mean(-1)
    probs = masks.sigmoid()
    inter = (probs * gt).flatten(2).sum(-1)
    iou = inter / ((probs + gt).flatten(2).sum(-1) - inter + 1e-6)
    best = focal.argmin(-1)
    rows = torch.arange(masks.shape[0])
    return focal[rows, best].mean() + F.mse_loss(iou_pred, iou.detach())


if __name__ == "__main__":
    torch.manual_seed(0)
    images = torch.randn(2, 3, 64, 64)
    coords, labels, num_clicks = collate_clicks([[(0.3, 0.4, True), (0.8, 0.1, False)], [(0.5, 0.5, True)]])
    gt = torch.zeros(2, 64, 64)
    gt[0, 16:40, 10:30], gt[1, 20:44, 20:44] = 1.0, 1.0
    model = ClickSAM()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(3):
        masks, iou_pred = model(images, coords, labels, num_clicks)
        loss = mask_loss(masks, iou_pred, gt)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("masks", tuple(masks.shape), "loss", round(loss.item(), 4))
