"""VisTR-style end-to-end video instance segmentation.

Clips of different lengths and frame sizes are batched as a padded tensor with a
pixel mask and a frame mask; instance queries are laid out frame by frame, so that
query q of frame t is the t-th element of instance sequence q, and the query
self-attention of the decoder works inside each frame.

Source: seed self_attention_mask_guide.txt section 6 (create_block_mask);
conventions.md section 2.3.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def collate_clips(clips, size_divisibility=8):
    t_max = max(c.shape[0] for c in clips)
    h = max(c.shape[-2] for c in clips)
    w = max(c.shape[-1] for c in clips)
    h = int(math.ceil(h / size_divisibility) * size_divisibility)
    w = int(math.ceil(w / size_divisibility) * size_divisibility)
    video = torch.zeros(len(clips), t_max, 3, h, w)
    pixel_mask = torch.ones(len(clips), t_max, h, w, dtype=torch.bool)
    frame_valid = torch.zeros(len(clips), t_max, dtype=torch.bool)
    for i, clip in enumerate(clips):
        t, _, ch, cw = clip.shape
        video[i, :t, :, :ch, :cw] = clip
        pixel_mask[i, :t, :ch, :cw] = False
        frame_valid[i, :t] = True
    return {"video": video, "pixel_mask": pixel_mask, "frame_valid": frame_valid}


def sine_position(mask, dim):
    not_mask = ~mask
    y = not_mask.cumsum(-2, dtype=torch.float32)
    x = not_mask.cumsum(-1, dtype=torch.float32)
    freqs = 10000 ** (torch.arange(dim // 4) / (dim // 4))
    pos_y = y[..., None] / freqs
    pos_x = x[..., None] / freqs
    return torch.cat([pos_y.sin(), pos_y.cos(), pos_x.sin(), pos_x.cos()], dim=-1)


def frame_block_mask(num_frames, queries_per_frame):
    n = num_frames * queries_per_frame
    mask = torch.zeros(n, n)
    for s in range(0, n, queries_per_frame):
        mask[s:s + queries_per_frame, s:s + queries_per_frame] = 1
    mask[mask == 0] = float("-inf")
    mask[mask == 1] = 0.0
    return mask


class DecoderLayer(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.cross_attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ffn = nn.Sequential(nn.Linear(dim, dim * 4), nn.ReLU(), nn.Linear(dim * 4, dim))
        self.norms = nn.ModuleList([nn.LayerNorm(dim) for _ in range(3)])

    def forward(self, tgt, query_pos, memory, memory_pos, self_mask, memory_key_padding_mask):
        q = k = tgt + query_pos
        tgt = self.norms[0](tgt + self.self_attn(q, k, tgt, attn_mask=self_mask)[0])
        attended, _ = self.cross_attn(
            tgt + query_pos, memory + memory_pos, memory,
            key_padding_mask=memory_key_padding_mask,
        )
        tgt = self.norms[1](tgt + attended)
        return self.norms[2](tgt + self.ffn(tgt))


class VisTR(nn.Module):
    def __init__(self, num_frames=3, num_queries=4, num_classes=5, dim=64, heads=4, depth=2):
        super().__init__()
        self.num_frames, self.num_queries = num_frames, num_queries
        self.backbone = nn.Sequential(
            nn.Conv2d(3, 32, 4, 4), nn.GELU(), nn.Conv2d(32, dim, 2, 2), nn.GELU(),
        )
        enc_layer = nn.TransformerEncoderLayer(dim, heads, dim * 4, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(enc_layer, 2, enable_nested_tensor=False)
        self.query_embed = nn.Embedding(num_frames * num_queries, dim)
        self.layers = nn.ModuleList([DecoderLayer(dim, heads) for _ in range(depth)])
        self.class_head = nn.Linear(dim, num_classes + 1)
        self.mask_embed = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim))
        self.register_buffer("query_self_mask", frame_block_mask(num_frames, num_queries), persistent=False)

    def forward(self, video, pixel_mask, frame_valid):
        b, t = video.shape[:2]
        feats = self.backbone(video.flatten(0, 1))
        _, c, h, w = feats.shape
        mask = F.interpolate(pixel_mask.flatten(0, 1)[:, None].float(), size=(h, w))[:, 0].bool()
        mask = mask.view(b, t, h, w) | ~frame_valid[:, :, None, None]
        pos = sine_position(mask, c).flatten(1, 3)
        src = feats.view(b, t, c, h * w).permute(0, 1, 3, 2).flatten(1, 2)
        key_padding = mask.flatten(1)
        memory = self.encoder(src + pos, src_key_padding_mask=key_padding)
        query_pos = self.query_embed.weight[None].expand(b, -1, -1)
        tgt = torch.zeros_like(query_pos)
        for layer in self.layers:
            tgt = layer(tgt, query_pos, memory, pos, self.query_self_mask, key_padding)
        tgt = tgt.view(b, t, self.num_queries, c)
        logits = self.class_head(tgt)
        frame_feats = memory.view(b, t, h, w, c)
        masks = torch.einsum("btqc,bthwc->btqhw", self.mask_embed(tgt), frame_feats)
        return {"pred_logits": logits, "pred_masks": masks, "mask": mask}


def clip_loss(out, labels, gt_masks, frame_valid):
    logits = out["pred_logits"][frame_valid]
    cls = F.cross_entropy(logits.flatten(0, 1), labels[frame_valid].flatten())
    pred = out["pred_masks"][frame_valid].sigmoid()
    gt = gt_masks[frame_valid]
    valid = ~out["mask"][frame_valid][:, None]
    inter = (pred * gt * valid).flatten(2).sum(-1)
    denom = ((pred + gt) * valid).flatten(2).sum(-1)
    dice = 1 - (2 * inter + 1) / (denom + 1)
    return cls + dice.mean()


if __name__ == "__main__":
    torch.manual_seed(0)
    clips = [torch.randn(3, 3, 64, 64), torch.randn(2, 3, 48, 64)]
    batch = collate_clips(clips)
    model = VisTR()
    out = model(**batch)
    _, t, q, h, w = out["pred_masks"].shape
    labels = torch.randint(0, 6, (2, t, q))
    gt_masks = (torch.rand(2, t, q, h, w) > 0.7).float()
    loss = clip_loss(out, labels, gt_masks, batch["frame_valid"])
    loss.backward()
    print("pred_masks", tuple(out["pred_masks"].shape), "loss", round(loss.item(), 4))
