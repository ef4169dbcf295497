"""Retail shelf product detection (planogram compliance) with DETR in the layout of
facebookresearch/detr, fed by a Hugging Face-style image processor.

``ShelfImageProcessor`` pads a batch of shelf crops of different sizes and returns
``pixel_values`` / ``pixel_mask`` like transformers' ``DetrImageProcessor``; the model follows
detr's ``NestedTensor``, ``Backbone`` / ``Joiner``, ``PositionEmbeddingSine``, post-norm
``TransformerEncoderLayer`` / ``TransformerDecoderLayer``, ``DETR`` with ``query_embed``,
``class_embed`` / ``bbox_embed`` and ``SetCriterion`` with ``empty_weight``; greedy matching
stands in for scipy's ``linear_sum_assignment``. Three synthetic SKUs on plain shelves.

Source: conventions.md section 1 (HF transformers 2-D attention_mask row, direction cheat-sheet)
and section 5 item 7.
"""

import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

SKU_COLOURS = [(0.9, 0.2, 0.2), (0.2, 0.8, 0.3), (0.2, 0.3, 0.9)]


def render_shelf(rng):
    h, w = rng.choice([32, 40, 48]), rng.choice([48, 56, 64])
    img = torch.full((3, h, w), 0.45) + 0.05 * torch.rand(3, h, w)
    boxes, labels = [], []
    x = rng.randint(1, 6)
    while len(boxes) < 4 and x < w - 10:
        bw, bh = rng.randint(8, 14), rng.randint(12, h - 6)
        if x + bw >= w:
            break
        y0 = h - 2 - bh
        sku = rng.randrange(3)
        img[:, y0 : y0 + bh, x : x + bw] = torch.tensor(SKU_COLOURS[sku])[:, None, None]
        boxes.append([(x + bw / 2) / w, (y0 + bh / 2) / h, bw / w, bh / h])
        labels.append(sku)
        x += bw + rng.randint(2, 8)
    return img, {"boxes": torch.tensor(boxes), "labels": torch.tensor(labels)}


class ShelfImageProcessor:
    def pad(self, images):
        h = max(i.shape[1] for i in images)
        w = max(i.shape[2] for i in images)
        pixel_values = torch.zeros(len(images), 3, h, w)
        pixel_mask = torch.zeros(len(images), h, w, dtype=torch.long)
        for n, img in enumerate(images):
            pixel_values[n, :, : img.shape[1], : img.shape[2]] = (img - 0.5) / 0.25
            pixel_mask[n, : img.shape[1], : img.shape[2]] = 1
        return {"pixel_values": pixel_values, "pixel_mask": pixel_mask}


class NestedTensor:
    def __init__(self, tensors, mask):
        self.tensors, self.mask = tensors, mask

    def decompose(self):
        return self.tensors, self.mask


class Backbone(nn.Module):
    def __init__(self, num_channels=64):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 32, 3, 2, 1), nn.ReLU(), nn.Conv2d(32, 64, 3, 2, 1), nn.ReLU(),
            nn.Conv2d(64, num_channels, 3, 2, 1), nn.ReLU(),
        )
        self.num_channels = num_channels

    def forward(self, tensor_list):
        x = self.body(tensor_list.tensors)
        mask = F.interpolate(tensor_list.mask[None].float(), size=x.shape[-2:]).to(torch.bool)[0]
        return NestedTensor(x, mask)


class PositionEmbeddingSine(nn.Module):
    def __init__(self, num_pos_feats=32, temperature=10000):
        super().__init__()
        self.num_pos_feats, self.temperature = num_pos_feats, temperature

    def forward(self, tensor_list):
        not_mask = ~tensor_list.mask
        y_embed = not_mask.cumsum(1, dtype=torch.float32)
        x_embed = not_mask.cumsum(2, dtype=torch.float32)
        y_embed = y_embed / (y_embed[:, -1:, :] + 1e-6) * 2 * math.pi
        x_embed = x_embed / (x_embed[:, :, -1:] + 1e-6) * 2 * math.pi
        dim_t = self.temperature ** (2 * (torch.arange(self.num_pos_feats) // 2) / self.num_pos_feats)
        pos_x, pos_y = x_embed[:, :, :, None] / dim_t, y_embed[:, :, :, None] / dim_t
        pos_x = torch.stack((pos_x[..., 0::2].sin(), pos_x[..., 1::2].cos()), dim=4).flatten(3)
        pos_y = torch.stack((pos_y[..., 0::2].sin(), pos_y[..., 1::2].cos()), dim=4).flatten(3)
        return torch.cat((pos_y, pos_x), dim=3).permute(0, 3, 1, 2)


class Joiner(nn.Sequential):
    def forward(self, tensor_list):
        features = self[0](tensor_list)
        return features, self[1](features)


class TransformerEncoderLayer(nn.Module):
    def __init__(self, d_model, nhead, dim_feedforward=128):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, nhead)
        self.linear1, self.linear2 = nn.Linear(d_model, dim_feedforward), nn.Linear(dim_feedforward, d_model)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, src, src_key_padding_mask, pos):
        q = k = src + pos
        src = self.norm1(src + self.self_attn(q, k, value=src, key_padding_mask=src_key_padding_mask)[0])
        return self.norm2(src + self.linear2(F.relu(self.linear1(src))))


class TransformerDecoderLayer(nn.Module):
    def __init__(self, d_model, nhead, dim_feedforward=128):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, nhead)
        self.multihead_attn = nn.MultiheadAttention(d_model, nhead)
        self.linear1, self.linear2 = nn.Linear(d_model, dim_feedforward), nn.Linear(dim_feedforward, d_model)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, tgt, memory, memory_key_padding_mask, pos, query_pos):
        q = k = tgt + query_pos
        tgt = self.norm1(tgt + self.self_attn(q, k, value=tgt)[0])
        tgt2 = self.multihead_attn(tgt + query_pos, memory + pos, value=memory, key_padding_mask=memory_key_padding_mask)[0]
        tgt = self.norm2(tgt + tgt2)
        return self.norm3(tgt + self.linear2(F.relu(self.linear1(tgt))))


class Transformer(nn.Module):
    def __init__(self, d_model=64, nhead=4, num_encoder_layers=1, num_decoder_layers=2):
        super().__init__()
        self.encoder = nn.ModuleList([TransformerEncoderLayer(d_model, nhead) for _ in range(num_encoder_layers)])
        self.decoder = nn.ModuleList([TransformerDecoderLayer(d_model, nhead) for _ in range(num_decoder_layers)])

    def forward(self, src, mask, query_embed, pos_embed):
        bs = src.shape[0]
        src = src.flatten(2).permute(2, 0, 1)
        pos_embed = pos_embed.flatten(2).permute(2, 0, 1)
        query_embed = query_embed.unsqueeze(1).repeat(1, bs, 1)
        mask = mask.flatten(1)
        memory = src
        for layer in self.encoder:
            memory = layer(memory, src_key_padding_mask=mask, pos=pos_embed)
        tgt = torch.zeros_like(query_embed)
        for layer in self.decoder:
            tgt = layer(tgt, memory, memory_key_padding_mask=mask, pos=pos_embed, query_pos=query_embed)
        return tgt.transpose(0, 1)


class DETR(nn.Module):
    def __init__(self, backbone, transformer, num_classes, num_queries=8, hidden_dim=64):
        super().__init__()
        self.backbone, self.transformer = backbone, transformer
        self.input_proj = nn.Conv2d(backbone[0].num_channels, hidden_dim, kernel_size=1)
        self.query_embed = nn.Embedding(num_queries, hidden_dim)
        self.class_embed = nn.Linear(hidden_dim, num_classes + 1)
        self.bbox_embed = nn.Sequential(nn.Linear(hidden_dim, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, 4))

    def forward(self, pixel_values, pixel_mask):
        mask = pixel_mask == 0
        features, pos = self.backbone(NestedTensor(pixel_values, mask))
        src, mask = features.decompose()
        hs = self.transformer(self.input_proj(src), mask, self.query_embed.weight, pos)
        return {"pred_logits": self.class_embed(hs), "pred_boxes": self.bbox_embed(hs).sigmoid()}


class SetCriterion(nn.Module):
    def __init__(self, num_classes, eos_coef=0.1):
        super().__init__()
        self.num_classes = num_classes
        empty_weight = torch.ones(num_classes + 1)
        empty_weight[-1] = eos_coef
        self.register_buffer("empty_weight", empty_weight)

    @torch.no_grad()
    def match(self, logits, boxes, target):
        cost = -logits.softmax(-1)[:, target["labels"]] + 5 * torch.cdist(boxes, target["boxes"], p=1)
        pairs = []
        for _ in range(len(target["labels"])):
            q, t = divmod(cost.argmin().item(), cost.size(1))
            pairs.append((q, t))
            cost[q, :], cost[:, t] = float("inf"), float("inf")
        return pairs

    def forward(self, outputs, targets):
        loss_ce, loss_bbox, n_boxes = 0.0, 0.0, 0
        for i, target in enumerate(targets):
            logits, boxes = outputs["pred_logits"][i], outputs["pred_boxes"][i]
            target_classes = torch.full((logits.size(0),), self.num_classes, dtype=torch.long)
            pairs = self.match(logits, boxes, target)
            for q, t in pairs:
                target_classes[q] = target["labels"][t]
                loss_bbox = loss_bbox + F.l1_loss(boxes[q], target["boxes"][t], reduction="sum")
            n_boxes += len(pairs)
            loss_ce = loss_ce + F.cross_entropy(logits, target_classes, self.empty_weight)
        return loss_ce / len(targets) + 5 * loss_bbox / max(n_boxes, 1)


@torch.no_grad()
def evaluate(model, processor, images, targets, threshold=0.5):
    model.eval()
    out = model(**processor.pad(images))
    hits, n_pred, n_true = 0, 0, 0
    for i, target in enumerate(targets):
        prob = out["pred_logits"][i].softmax(-1)[:, :-1]
        score, label = prob.max(-1)
        keep = score > threshold
        n_pred += keep.sum().item()
        n_true += len(target["labels"])
        for box, lab in zip(out["pred_boxes"][i][keep], label[keep]):
            err = (target["boxes"] - box).abs().sum(-1)
            hits += int(((err < 0.15) & (target["labels"] == lab)).any())
    return hits / max(n_pred, 1), hits / max(n_true, 1)


def main():
    torch.manual_seed(0)
    rng = random.Random(0)
    data = [render_shelf(rng) for _ in range(600)]
    processor = ShelfImageProcessor()
    model = DETR(Joiner(Backbone(), PositionEmbeddingSine()), Transformer(), num_classes=3)
    criterion = SetCriterion(num_classes=3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=1e-4)
    train, test = data[:500], data[500:]
    for epoch in range(12):
        model.train()
        rng.shuffle(train)
        total = 0.0
        for s in range(0, len(train), 24):
            images, targets = zip(*train[s : s + 24])
            loss = criterion(model(**processor.pad(images)), targets)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
            optimizer.step()
            total += loss.item()
        if epoch % 3 == 2:
            precision, recall = evaluate(model, processor, *zip(*test))
            print(f"epoch {epoch} loss {total / math.ceil(len(train) / 24):.3f} precision {precision:.3f} recall {recall:.3f}")


if __name__ == "__main__":
    main()
