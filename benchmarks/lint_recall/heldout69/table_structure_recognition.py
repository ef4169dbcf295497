"""Table Transformer (DETR) for table structure recognition.

Cropped table images of different sizes are batched as a NestedTensor; the
encoder is written with scaled_dot_product_attention, the decoder is the DETR
decoder with nn.MultiheadAttention, and the heads predict rows, columns,
spanning cells and header boxes.

Source: pytorch/pytorch#103963 and huggingface/transformers#32195 (conventions.md
section 3, items 6 and 25); conventions.md section 5 item 7.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

STRUCTURE_CLASSES = ["table", "table column", "table row", "table column header",
                     "table projected row header", "table spanning cell"]


class NestedTensor:
    def __init__(self, tensors, mask):
        self.tensors, self.mask = tensors, mask

    def decompose(self):
        return self.tensors, self.mask


def nested_tensor_from_tensor_list(tensor_list):
    max_size = [max(s) for s in zip(*[img.shape for img in tensor_list])]
    b = len(tensor_list)
    tensor = torch.zeros([b] + max_size, dtype=tensor_list[0].dtype)
    mask = torch.ones((b, max_size[1], max_size[2]), dtype=torch.bool)
    for img, pad_img, m in zip(tensor_list, tensor, mask):
        pad_img[: img.shape[0], : img.shape[1], : img.shape[2]].copy_(img)
        m[: img.shape[1], : img.shape[2]] = False
    return NestedTensor(tensor, mask)


class PositionEmbeddingSine(nn.Module):
    def __init__(self, num_pos_feats=32, temperature=10000):
        super().__init__()
        self.num_pos_feats, self.temperature = num_pos_feats, temperature

    def forward(self, mask):
        not_mask = ~mask
        y_embed = not_mask.cumsum(1, dtype=torch.float32)
        x_embed = not_mask.cumsum(2, dtype=torch.float32)
        eps, scale = 1e-6, 2 * math.pi
        y_embed = y_embed / (y_embed[:, -1:, :] + eps) * scale
        x_embed = x_embed / (x_embed[:, :, -1:] + eps) * scale
        dim_t = torch.arange(self.num_pos_feats, dtype=torch.float32)
        dim_t = self.temperature ** (2 * (dim_t // 2) / self.num_pos_feats)
        pos_x = x_embed[:, :, :, None] / dim_t
        pos_y = y_embed[:, :, :, None] / dim_t
        pos_x = torch.stack((pos_x[..., 0::2].sin(), pos_x[..., 1::2].cos()), dim=4).flatten(3)
        pos_y = torch.stack((pos_y[..., 0::2].sin(), pos_y[..., 1::2].cos()), dim=4).flatten(3)
        return torch.cat((pos_y, pos_x), dim=3).permute(0, 3, 1, 2)


class EncoderLayer(nn.Module):
    def __init__(self, d_model, nhead):
        super().__init__()
        self.nhead = nhead
        self.in_proj = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.linear1, self.linear2 = nn.Linear(d_model, 4 * d_model), nn.Linear(4 * d_model, d_model)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, src, pixel_keep, pos):
        b, n, d = src.shape
        w_q, w_k, w_v = self.in_proj.weight.chunk(3)
        b_q, b_k, b_v = self.in_proj.bias.chunk(3)
        q = F.linear(src + pos, w_q, b_q).view(b, n, self.nhead, -1).transpose(1, 2)
        k = F.linear(src + pos, w_k, b_k).view(b, n, self.nhead, -1).transpose(1, 2)
        v = F.linear(src, w_v, b_v).view(b, n, self.nhead, -1).transpose(1, 2)
        keep = pixel_keep[:, None, None, :]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep.to(q.dtype))  # expect: MC508 pixels
        src = self.norm1(src + self.out_proj(out.transpose(1, 2).reshape(b, n, d)))
        return self.norm2(src + self.linear2(F.relu(self.linear1(src))))


class TableTransformer(nn.Module):
    def __init__(self, num_classes=len(STRUCTURE_CLASSES), d_model=64, nhead=4, num_queries=12):
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv2d(3, 32, 7, 4, 3), nn.ReLU(), nn.Conv2d(32, 64, 3, 2, 1), nn.ReLU(),
        )
        self.input_proj = nn.Conv2d(64, d_model, 1)
        self.position_embedding = PositionEmbeddingSine(d_model // 2)
        self.encoder = nn.ModuleList([EncoderLayer(d_model, nhead) for _ in range(2)])
        layer = nn.TransformerDecoderLayer(d_model, nhead, 4 * d_model, dropout=0.0, batch_first=True)
        self.decoder = nn.TransformerDecoder(layer, 2)
        self.query_embed = nn.Embedding(num_queries, d_model)
        self.class_embed = nn.Linear(d_model, num_classes + 1)
        self.bbox_embed = nn.Sequential(nn.Linear(d_model, d_model), nn.ReLU(), nn.Linear(d_model, 4))

    def forward(self, samples: NestedTensor):
        src, mask = samples.decompose()
        features = self.backbone(src)
        mask = F.interpolate(mask[None].float(), size=features.shape[-2:]).to(torch.bool)[0]
        pos = self.position_embedding(mask).flatten(2).transpose(1, 2)
        memory = self.input_proj(features).flatten(2).transpose(1, 2)
        for layer in self.encoder:
            memory = layer(memory, ~mask.flatten(1), pos)
        query_pos = self.query_embed.weight[None].expand(src.shape[0], -1, -1)
        hs = self.decoder(query_pos, memory + pos, memory_key_padding_mask=mask.flatten(1))
        return {"pred_logits": self.class_embed(hs), "pred_boxes": self.bbox_embed(hs).sigmoid()}


def box_cxcywh_to_xyxy(x):
    cx, cy, w, h = x.unbind(-1)
    return torch.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], dim=-1)


@torch.no_grad()
def postprocess(outputs, target_sizes, threshold=0.5):
    probs = outputs["pred_logits"].softmax(-1)[..., :-1]
    scores, labels = probs.max(-1)
    boxes = box_cxcywh_to_xyxy(outputs["pred_boxes"])
    img_h, img_w = target_sizes.unbind(1)
    boxes = boxes * torch.stack([img_w, img_h, img_w, img_h], dim=1)[:, None, :]
    results = []
    for s, l, b in zip(scores, labels, boxes):
        keep = s > threshold
        results.append({"scores": s[keep], "labels": [STRUCTURE_CLASSES[i] for i in l[keep]], "boxes": b[keep]})
    return results


def set_loss(outputs, targets):
    loss = 0.0
    for logits, boxes, tgt in zip(outputs["pred_logits"], outputs["pred_boxes"], targets):
        cost = torch.cdist(boxes, tgt["boxes"], p=1)
        idx = cost.argmin(0)
        labels = torch.full((logits.shape[0],), logits.shape[-1] - 1, dtype=torch.long)
        labels[idx] = tgt["labels"]
        loss = loss + F.cross_entropy(logits, labels) + F.l1_loss(boxes[idx], tgt["boxes"])
    return loss / len(targets)


if __name__ == "__main__":
    torch.manual_seed(0)
    crops = [torch.randn(3, 96, 128), torch.randn(3, 64, 80)]
    samples = nested_tensor_from_tensor_list(crops)
    targets = [
        {"labels": torch.tensor([0, 1, 2]), "boxes": torch.rand(3, 4) * 0.5 + 0.25},
        {"labels": torch.tensor([0, 2]), "boxes": torch.rand(2, 4) * 0.5 + 0.25},
    ]
    model = TableTransformer()
    outputs = model(samples)
    loss = set_loss(outputs, targets)
    loss.backward()
    sizes = torch.tensor([[c.shape[1], c.shape[2]] for c in crops])
    print("loss", round(loss.item(), 4), "detections", [len(r["scores"]) for r in postprocess(outputs, sizes)])
