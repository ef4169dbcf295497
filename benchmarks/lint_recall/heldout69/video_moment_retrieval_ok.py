"""Moment-DETR-style moment retrieval and highlight detection.

Clip features of untrimmed videos (QVHighlights-like) and the query's word
features are projected, concatenated and encoded jointly; moment queries then
decode normalised (center, width) spans and a head scores clip saliency.

Source: pytorch/pytorch#103749 and Biohub/esm#299 (conventions.md section 3,
items 5 and 22); conventions.md section 2.3.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def collate(samples):
    vid_len = max(s["video"].shape[0] for s in samples)
    txt_len = max(s["query"].shape[0] for s in samples)
    b = len(samples)
    batch = {
        "src_vid": torch.zeros(b, vid_len, samples[0]["video"].shape[1]),
        "src_vid_mask": torch.zeros(b, vid_len),
        "src_txt": torch.zeros(b, txt_len, samples[0]["query"].shape[1]),
        "src_txt_mask": torch.zeros(b, txt_len),
    }
    for i, s in enumerate(samples):
        batch["src_vid"][i, : s["video"].shape[0]] = s["video"]
        batch["src_vid_mask"][i, : s["video"].shape[0]] = 1.0
        batch["src_txt"][i, : s["query"].shape[0]] = s["query"]
        batch["src_txt_mask"][i, : s["query"].shape[0]] = 1.0
    return batch


class JointEncoderLayer(nn.Module):
    def __init__(self, dim, heads, dropout=0.1):
        super().__init__()
        self.heads = heads
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)
        self.drop = nn.Dropout(dropout)
        self.ffn = nn.Sequential(nn.Linear(dim, dim * 2), nn.GELU(), nn.Linear(dim * 2, dim))
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)

    def forward(self, x, pos, keep):
        b, n, d = x.shape
        q = k = x + pos
        q, k, v = self.q_proj(q), self.k_proj(k), self.v_proj(x)
        q, k, v = (t.view(b, n, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        pair = keep[:, :, None] & keep[:, None, :]
        scores = scores.masked_fill(~pair[:, None], torch.finfo(scores.dtype).min)
        attn = self.drop(scores.softmax(dim=-1))
        y = (attn @ v).transpose(1, 2).reshape(b, n, d)
        x = self.norm1(x + self.out(y))
        return self.norm2(x + self.ffn(x))


class MomentDETR(nn.Module):
    def __init__(self, vid_dim=32, txt_dim=48, dim=64, heads=4, num_queries=6, enc_layers=2, dec_layers=2):
        super().__init__()
        self.input_vid_proj = nn.Sequential(nn.LayerNorm(vid_dim), nn.Linear(vid_dim, dim))
        self.input_txt_proj = nn.Sequential(nn.LayerNorm(txt_dim), nn.Linear(txt_dim, dim))
        self.token_type = nn.Embedding(2, dim)
        self.pos = nn.Parameter(torch.randn(1, 128, dim) * 0.02)
        self.encoder = nn.ModuleList([JointEncoderLayer(dim, heads) for _ in range(enc_layers)])
        dec_layer = nn.TransformerDecoderLayer(dim, heads, dim * 2, dropout=0.0, batch_first=True)
        self.decoder = nn.TransformerDecoder(dec_layer, dec_layers)
        self.query_embed = nn.Embedding(num_queries, dim)
        self.span_embed = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, 2))
        self.class_embed = nn.Linear(dim, 2)
        self.saliency_proj = nn.Linear(dim, 1)

    def forward(self, src_vid, src_vid_mask, src_txt, src_txt_mask):
        vid = self.input_vid_proj(src_vid) + self.token_type.weight[0]
        txt = self.input_txt_proj(src_txt) + self.token_type.weight[1]
        x = torch.cat([vid, txt], dim=1)
        keep = torch.cat([src_vid_mask, src_txt_mask], dim=1).bool()
        pos = torch.cat([self.pos[:, : vid.shape[1]], torch.zeros_like(txt[:1])], dim=1)
        for layer in self.encoder:
            x = layer(x, pos, keep)
        memory = x
        queries = self.query_embed.weight[None].expand(x.shape[0], -1, -1)
        hs = self.decoder(queries, memory + pos, memory_key_padding_mask=~keep)
        spans = self.span_embed(hs).sigmoid()
        vid_mem = memory[:, : vid.shape[1]]
        saliency = self.saliency_proj(vid_mem).squeeze(-1)
        saliency = saliency.masked_fill(src_vid_mask == 0, -1e3)
        return {"pred_spans": spans, "pred_logits": self.class_embed(hs), "saliency_scores": saliency}


def span_cxw_to_xx(spans):
    c, w = spans.unbind(-1)
    return torch.stack([c - 0.5 * w, c + 0.5 * w], dim=-1)


def saliency_loss(scores, vid_mask, pos_idx, neg_idx, margin=0.2):
    rows = torch.arange(scores.shape[0])
    pos = scores[rows, pos_idx]
    neg = scores[rows, neg_idx]
    valid = vid_mask[rows, pos_idx] * vid_mask[rows, neg_idx]
    return (F.relu(margin + neg - pos) * valid).sum() / valid.sum().clamp(min=1)


def criterion(out, gt_span, vid_mask, pos_idx, neg_idx):
    best = (span_cxw_to_xx(out["pred_spans"]) - span_cxw_to_xx(gt_span[:, None])).abs().sum(-1).argmin(-1)
    rows = torch.arange(gt_span.shape[0])
    l1 = F.l1_loss(out["pred_spans"][rows, best], gt_span)
    labels = torch.ones(out["pred_logits"].shape[:2], dtype=torch.long)
    labels[rows, best] = 0
    ce = F.cross_entropy(out["pred_logits"].flatten(0, 1), labels.flatten())
    return l1 + ce + saliency_loss(out["saliency_scores"], vid_mask, pos_idx, neg_idx)


if __name__ == "__main__":
    torch.manual_seed(0)
    samples = [
        {"video": torch.randn(12, 32), "query": torch.randn(7, 48)},
        {"video": torch.randn(9, 32), "query": torch.randn(4, 48)},
    ]
    batch = collate(samples)
    model = MomentDETR()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gt_span = torch.tensor([[0.4, 0.2], [0.3, 0.3]])
    pos_idx, neg_idx = torch.tensor([5, 3]), torch.tensor([0, 8])
    for step in range(3):
        out = model(**batch)
        loss = criterion(out, gt_span, batch["src_vid_mask"], pos_idx, neg_idx)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("spans", tuple(out["pred_spans"].shape), "loss", round(loss.item(), 4))
