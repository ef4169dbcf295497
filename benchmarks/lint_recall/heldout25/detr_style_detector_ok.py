"""A DETR-style set-prediction detector with denoising queries (DN-DETR training trick).

A strided convolutional backbone, a sine position embedding computed from the padding mask,
a post-norm Transformer encoder over the flattened feature map and a decoder whose object
queries cross-attend to it, all on sequence-first nn.MultiheadAttention as in the original
DETR code. Images of different sizes are batched by zero-padding to the largest one; the
image processor returns `pixel_mask` in the Hugging Face convention (1 = real pixel, 0 =
padding). nn.MultiheadAttention wants the opposite: `key_padding_mask` True = padding, and a
bool `attn_mask` True = not allowed to attend.

Source: conventions.md §1 (cheat-sheet: bool True = drop for nn.MultiheadAttention, True/1 =
keep for Hugging Face masks) and seed self_attention_mask_guide.txt §2 (key_padding_mask: True
marks padding); pytorch/pytorch PR #141694 (key_padding_mask documentation).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def images_to_batch(images):
    """List of (3, h, w) tensors -> pixel_values (B, 3, H, W) and pixel_mask (B, H, W), 1 = real."""
    max_h = max(img.shape[1] for img in images)
    max_w = max(img.shape[2] for img in images)
    pixel_values = torch.zeros(len(images), 3, max_h, max_w)
    pixel_mask = torch.zeros(len(images), max_h, max_w, dtype=torch.long)
    for i, img in enumerate(images):
        pixel_values[i, :, : img.shape[1], : img.shape[2]] = img
        pixel_mask[i, : img.shape[1], : img.shape[2]] = 1
    return pixel_values, pixel_mask


def feature_mask(pixel_mask, size):
    """Downsample the pixel mask to the feature map: (B, h, w) bool, True = real."""
    return F.interpolate(pixel_mask[:, None].float(), size=size).to(torch.bool)[:, 0]


class SinePositionEmbedding(nn.Module):
    def __init__(self, num_pos_feats=32, temperature=10000, scale=2 * math.pi):
        super().__init__()
        self.num_pos_feats = num_pos_feats
        self.temperature = temperature
        self.scale = scale

    def forward(self, keep):
        """keep: (B, h, w) bool, True = real. Positions count real cells only."""
        y_embed = keep.cumsum(1, dtype=torch.float32)
        x_embed = keep.cumsum(2, dtype=torch.float32)
        eps = 1e-6
        y_embed = y_embed / (y_embed[:, -1:, :] + eps) * self.scale
        x_embed = x_embed / (x_embed[:, :, -1:] + eps) * self.scale
        dim_t = torch.arange(self.num_pos_feats, dtype=torch.float32)
        dim_t = self.temperature ** (2 * torch.div(dim_t, 2, rounding_mode="floor") / self.num_pos_feats)
        pos_x = x_embed[:, :, :, None] / dim_t
        pos_y = y_embed[:, :, :, None] / dim_t
        pos_x = torch.stack((pos_x[:, :, :, 0::2].sin(), pos_x[:, :, :, 1::2].cos()), dim=4).flatten(3)
        pos_y = torch.stack((pos_y[:, :, :, 0::2].sin(), pos_y[:, :, :, 1::2].cos()), dim=4).flatten(3)
        return torch.cat((pos_y, pos_x), dim=3).permute(0, 3, 1, 2)


class EncoderLayer(nn.Module):
    def __init__(self, d_model, nhead, dim_feedforward):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, nhead)
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)

    def forward(self, src, key_padding_mask, pos):
        q = k = src + pos
        src = self.norm1(src + self.self_attn(q, k, value=src, key_padding_mask=key_padding_mask)[0])
        return self.norm2(src + self.linear2(F.relu(self.linear1(src))))


class DecoderLayer(nn.Module):
    def __init__(self, d_model, nhead, dim_feedforward):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, nhead)
        self.cross_attn = nn.MultiheadAttention(d_model, nhead)
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)

    def forward(self, tgt, memory, key_padding_mask, pos, query_pos, self_attn_mask=None):
        q = k = tgt + query_pos
        tgt = self.norm1(tgt + self.self_attn(q, k, value=tgt, attn_mask=self_attn_mask)[0])
        attended = self.cross_attn(query=tgt + query_pos, key=memory + pos, value=memory, key_padding_mask=key_padding_mask)[0]
        tgt = self.norm2(tgt + attended)
        return self.norm3(tgt + self.linear2(F.relu(self.linear1(tgt))))


class Encoder(nn.Module):
    def __init__(self, num_layers, d_model, nhead, dim_feedforward):
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(d_model, nhead, dim_feedforward) for _ in range(num_layers))

    def forward(self, src, key_padding_mask, pos):
        for layer in self.layers:
            src = layer(src, key_padding_mask, pos)
        return src


class Decoder(nn.Module):
    def __init__(self, num_layers, d_model, nhead, dim_feedforward):
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(d_model, nhead, dim_feedforward) for _ in range(num_layers))
        self.norm = nn.LayerNorm(d_model)

    def forward(self, tgt, memory, key_padding_mask, pos, query_pos, self_attn_mask=None):
        intermediate = []
        for layer in self.layers:
            tgt = layer(tgt, memory, key_padding_mask, pos, query_pos, self_attn_mask)
            intermediate.append(self.norm(tgt))
        return torch.stack(intermediate)


def build_dn_attn_mask(num_groups, group_size, num_queries):
    """Decoder self-attention mask for denoising training, nn.MultiheadAttention convention.

    True = blocked. Matching queries must not see the denoising queries (they hold the ground
    truth); a denoising group must not see the other groups. Denoising queries may see the
    matching queries.
    """
    num_dn = num_groups * group_size
    total = num_dn + num_queries
    blocked = torch.zeros(total, total, dtype=torch.bool)
    blocked[num_dn:, :num_dn] = True
    for g in range(num_groups):
        start, end = g * group_size, (g + 1) * group_size
        blocked[start:end, :start] = True
        blocked[start:end, end:num_dn] = True
    return blocked


class TinyDetr(nn.Module):
    def __init__(self, num_classes=5, d_model=64, nhead=4, num_queries=6, num_layers=2):
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.ReLU(), nn.Conv2d(32, 48, 3, stride=2, padding=1), nn.ReLU()
        )
        self.input_projection = nn.Conv2d(48, d_model, kernel_size=1)
        self.position_embedding = SinePositionEmbedding(d_model // 2)
        self.encoder = Encoder(num_layers, d_model, nhead, 2 * d_model)
        self.decoder = Decoder(num_layers, d_model, nhead, 2 * d_model)
        self.query_position_embeddings = nn.Embedding(num_queries, d_model)
        self.class_embed = nn.Linear(d_model, num_classes + 1)
        self.bbox_embed = nn.Sequential(nn.Linear(d_model, d_model), nn.ReLU(), nn.Linear(d_model, 4))
        self.image_tag_head = nn.Linear(d_model, num_classes)
        self.num_queries = num_queries

    def forward(self, pixel_values, pixel_mask, dn_queries=None, dn_groups=1):
        bsz = pixel_values.shape[0]
        features = self.backbone(pixel_values)
        attention_mask = feature_mask(pixel_mask, features.shape[-2:])
        features = features * attention_mask[:, None].to(features.dtype)
        pos = self.position_embedding(attention_mask).flatten(2).permute(2, 0, 1)
        src = self.input_projection(features).flatten(2).permute(2, 0, 1)
        attention_mask = attention_mask.flatten(1)
        key_padding_mask = ~attention_mask
        memory = self.encoder(src, key_padding_mask=key_padding_mask, pos=pos)

        query_pos = self.query_position_embeddings.weight[:, None, :].repeat(1, bsz, 1)
        tgt = torch.zeros_like(query_pos)
        self_attn_mask = None
        if dn_queries is not None:
            num_dn = dn_queries.shape[0]
            tgt = torch.cat([dn_queries[:, None, :].repeat(1, bsz, 1), tgt])
            query_pos = torch.cat([torch.zeros_like(tgt[:num_dn]), query_pos])
            self_attn_mask = build_dn_attn_mask(dn_groups, num_dn // dn_groups, self.num_queries)
        hs = self.decoder(tgt, memory, key_padding_mask=key_padding_mask, pos=pos, query_pos=query_pos, self_attn_mask=self_attn_mask)
        hs = hs[:, -self.num_queries :].transpose(1, 2)
        pooled = self.masked_mean(memory, attention_mask)
        return {
            "logits": self.class_embed(hs[-1]),
            "pred_boxes": self.bbox_embed(hs[-1]).sigmoid(),
            "aux_logits": self.class_embed(hs[:-1]),
            "image_tags": self.image_tag_head(pooled),
        }

    @staticmethod
    def masked_mean(memory, attention_mask):
        """memory (hw, B, C), attention_mask (B, hw) True = real cell."""
        weights = attention_mask.transpose(0, 1)[..., None].to(memory.dtype)
        return (memory * weights).sum(0) / weights.sum(0).clamp(min=1.0)


def valid_ratios(pixel_mask):
    """Deformable-DETR style: the fraction of each axis that holds real pixels."""
    keep = pixel_mask.bool()
    valid_h = keep[:, :, 0].sum(1).float()
    valid_w = keep[:, 0, :].sum(1).float()
    return torch.stack([valid_w / keep.shape[2], valid_h / keep.shape[1]], dim=-1)


def post_process(outputs, pixel_mask, threshold=0.0):
    """Boxes in pixels of each image's own (unpadded) size; drops the no-object class."""
    real_h = pixel_mask.bool().any(2).sum(1)
    real_w = pixel_mask.bool().any(1).sum(1)
    probs = outputs["logits"].softmax(-1)[..., :-1]
    scores, labels = probs.max(-1)
    cx, cy, w, h = outputs["pred_boxes"].unbind(-1)
    boxes = torch.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], dim=-1)
    boxes = boxes * torch.stack([real_w, real_h, real_w, real_h], dim=-1)[:, None, :]
    return [{"scores": s[s > threshold], "labels": lab[s > threshold], "boxes": b[s > threshold]} for s, lab, b in zip(scores, labels, boxes)]


if __name__ == "__main__":
    torch.manual_seed(0)
    model = TinyDetr().eval()
    small, large = torch.rand(3, 16, 24), torch.rand(3, 24, 32)
    pixel_values, pixel_mask = images_to_batch([small, large])
    print("valid ratios", valid_ratios(pixel_mask).tolist())
    with torch.no_grad():
        batched = model(pixel_values, pixel_mask)
        alone = model(*images_to_batch([small]))
        print("small image alone, logits finite:", bool(alone["logits"].isfinite().all()))
        diff = (batched["logits"][0] - alone["logits"][0]).abs().max().item()
        print("small image: batched vs alone logits max |diff| =", diff)
        dn = torch.randn(4, 64)
        with_dn = model(pixel_values, pixel_mask, dn_queries=dn, dn_groups=2)
        print("matching queries unchanged by denoising queries:", (with_dn["logits"] - batched["logits"]).abs().max().item())
        detections = post_process(alone, images_to_batch([small])[1])
        print("detections on the small image:", len(detections[0]["scores"]), "boxes finite:", bool(detections[0]["boxes"].isfinite().all()))
