"""Mask2Former: masked-attention mask transformer for universal segmentation.

Each decoder layer cross-attends only inside the foreground of the mask that the
previous layer predicted (sigmoid < 0.5 is masked out), round-robin over three
feature scales of a small pixel decoder; images of different sizes are padded
and their padding is masked too. An optional bfloat16 autocast path is used
for the decoder on CPU.

Source: NVIDIA/apex#1052 and #1105, huggingface/lerobot PR #710
(conventions.md section 3, items 18 and 19); conventions.md section 2.3.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class PixelDecoder(nn.Module):
    def __init__(self, dim=64):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, dim, 4, 4), nn.GELU())
        self.downs = nn.ModuleList([nn.Conv2d(dim, dim, 3, 2, 1) for _ in range(3)])
        self.mask_features = nn.Conv2d(dim, dim, 1)

    def forward(self, images):
        x = self.stem(images)
        feats, y = [], x
        for down in self.downs:
            y = F.gelu(down(y))
            feats.append(y)
        return self.mask_features(x), feats[::-1]


class MaskedCrossAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.to_q, self.to_kv, self.to_out = nn.Linear(dim, dim), nn.Linear(dim, 2 * dim), nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, tgt, memory, attn_mask, query_pos, pos):
        b, q_len, d = tgt.shape
        q = self.to_q(tgt + query_pos).view(b, q_len, self.heads, -1).transpose(1, 2)
        k, v = self.to_kv(memory).chunk(2, dim=-1)
        k = (k + pos).view(b, -1, self.heads, d // self.heads).transpose(1, 2)
        v = v.view(b, -1, self.heads, d // self.heads).transpose(1, 2)
        attn = torch.einsum("bhqd,bhkd->bhqk", q, k) * self.scale
        attn = attn.masked_fill(attn_mask[:, None], torch.finfo(torch.float32).min)  # expect: MC517 autocast
        out = torch.einsum("bhqk,bhkd->bhqd", attn.softmax(dim=-1), v)
        return self.norm(tgt + self.to_out(out.transpose(1, 2).reshape(b, q_len, d)))


class MultiScaleMaskedTransformerDecoder(nn.Module):
    def __init__(self, num_classes=8, dim=64, heads=4, num_queries=10, dec_layers=3, num_levels=3):
        super().__init__()
        self.num_levels = num_levels
        self.query_feat, self.query_embed = nn.Embedding(num_queries, dim), nn.Embedding(num_queries, dim)
        self.level_embed = nn.Embedding(num_levels, dim)
        self.cross_layers = nn.ModuleList([MaskedCrossAttention(dim, heads) for _ in range(dec_layers)])
        self.self_layers = nn.ModuleList(
            [nn.MultiheadAttention(dim, heads, batch_first=True) for _ in range(dec_layers)]
        )
        self.self_norms = nn.ModuleList([nn.LayerNorm(dim) for _ in range(dec_layers)])
        self.ffns = nn.ModuleList(
            [nn.Sequential(nn.Linear(dim, 2 * dim), nn.ReLU(), nn.Linear(2 * dim, dim)) for _ in range(dec_layers)]
        )
        self.decoder_norm = nn.LayerNorm(dim)
        self.class_embed = nn.Linear(dim, num_classes + 1)
        self.mask_embed = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim))

    def forward_prediction_heads(self, output, mask_features, attn_mask_target_size, pad_mask):
        decoder_output = self.decoder_norm(output)
        outputs_class = self.class_embed(decoder_output)
        outputs_mask = torch.einsum("bqc,bchw->bqhw", self.mask_embed(decoder_output), mask_features)
        attn_mask = F.interpolate(outputs_mask, size=attn_mask_target_size, mode="bilinear", align_corners=False)
        attn_mask = (attn_mask.sigmoid().flatten(2) < 0.5).detach()
        attn_mask[attn_mask.all(dim=-1)] = False
        pad = F.interpolate(pad_mask[:, None].float(), size=attn_mask_target_size)[:, 0].bool().flatten(1)
        return outputs_class, outputs_mask, attn_mask | pad[:, None, :]

    def forward(self, feats, mask_features, pad_mask):
        b = mask_features.shape[0]
        src, pos, sizes = [], [], []
        for i, f in enumerate(feats):
            sizes.append(f.shape[-2:])
            src.append(f.flatten(2).transpose(1, 2) + self.level_embed.weight[i])
            pos.append(torch.zeros_like(src[-1]))
        query_pos = self.query_embed.weight[None].expand(b, -1, -1)
        output = self.query_feat.weight[None].expand(b, -1, -1)
        predictions = []
        outputs_class, outputs_mask, attn_mask = self.forward_prediction_heads(
            output, mask_features, sizes[0], pad_mask,
        )
        predictions.append((outputs_class, outputs_mask))
        for i, cross in enumerate(self.cross_layers):
            level = i % self.num_levels
            output = cross(output, src[level], attn_mask, query_pos, pos[level])
            q = k = output + query_pos
            output = self.self_norms[i](output + self.self_layers[i](q, k, output, need_weights=False)[0])
            output = output + self.ffns[i](output)
            outputs_class, outputs_mask, attn_mask = self.forward_prediction_heads(
                output, mask_features, sizes[(i + 1) % self.num_levels], pad_mask,
            )
            predictions.append((outputs_class, outputs_mask))
        return predictions


class Mask2Former(nn.Module):
    def __init__(self, num_classes=8, amp_dtype=None):
        super().__init__()
        self.pixel_decoder = PixelDecoder()
        self.predictor = MultiScaleMaskedTransformerDecoder(num_classes)
        self.amp_dtype = amp_dtype

    def forward(self, images, pad_mask):
        mask_features, feats = self.pixel_decoder(images)
        if self.amp_dtype is None:
            return self.predictor(feats, mask_features, pad_mask)
        with torch.autocast("cpu", dtype=self.amp_dtype):
            return self.predictor(feats, mask_features, pad_mask)


def set_criterion(predictions, gt_classes, gt_masks):
    loss = 0.0
    for logits, masks in predictions:
        logits, masks = logits.float(), masks.float()
        n = gt_classes.shape[1]
        up = F.interpolate(masks[:, :n], size=gt_masks.shape[-2:], mode="bilinear", align_corners=False)
        loss = loss + F.cross_entropy(logits[:, :n].flatten(0, 1), gt_classes.flatten())
        loss = loss + F.binary_cross_entropy_with_logits(up, gt_masks)
    return loss / len(predictions)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--bf16", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    images = torch.zeros(2, 3, 128, 128)
    pad_mask = torch.ones(2, 128, 128, dtype=torch.bool)
    images[0], pad_mask[0] = torch.randn(3, 128, 128), False
    images[1, :, :96, :112], pad_mask[1, :96, :112] = torch.randn(3, 96, 112), False
    model = Mask2Former(amp_dtype=torch.bfloat16 if args.bf16 else None)
    predictions = model(images, pad_mask)
    gt_classes = torch.tensor([[1, 4], [2, 2]])
    gt_masks = (torch.rand(2, 2, 32, 32) > 0.5).float()
    loss = set_criterion(predictions, gt_classes, gt_masks)
    loss.backward()
    print("layers", len(predictions), "masks", tuple(predictions[-1][1].shape), "loss", round(loss.item(), 4))
