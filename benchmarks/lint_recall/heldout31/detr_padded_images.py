"""DETR detector written the way facebookresearch/detr writes it (util/misc.py, models/backbone.py,
models/position_encoding.py, models/transformer.py, models/detr.py): ``NestedTensor`` batches
padded by ``nested_tensor_from_tensor_list`` with a mask that is True on padding, the mask
resized to the feature map with ``F.interpolate``, ``PositionEmbeddingSine`` from the cumulative
sum of the unpadded pixels, an encoder on ``F.scaled_dot_product_attention`` and the original
``nn.MultiheadAttention`` decoder with ``memory_key_padding_mask``.

Source: pytorch/pytorch#103963, tools.md §0 P1, conventions.md §1 (SDPA row, direction cheat-sheet)
"""
import math

import torch
import torch.nn.functional as F
from torch import nn


class NestedTensor:
    def __init__(self, tensors, mask):
        self.tensors, self.mask = tensors, mask

    def decompose(self):
        return self.tensors, self.mask


def nested_tensor_from_tensor_list(tensor_list):
    c, h, w = [max(s) for s in zip(*[img.shape for img in tensor_list])]
    tensor = torch.zeros(len(tensor_list), c, h, w)
    mask = torch.ones(len(tensor_list), h, w, dtype=torch.bool)
    for img, pad_img, m in zip(tensor_list, tensor, mask):
        pad_img[: img.shape[0], : img.shape[1], : img.shape[2]].copy_(img)
        m[: img.shape[1], : img.shape[2]] = False
    return NestedTensor(tensor, mask)


class PositionEmbeddingSine(nn.Module):
    def __init__(self, num_pos_feats=16, temperature=10000, normalize=True):
        super().__init__()
        self.num_pos_feats, self.temperature, self.normalize, self.scale = num_pos_feats, temperature, normalize, 2 * math.pi

    def forward(self, mask):
        not_mask = ~mask
        y_embed, x_embed = not_mask.cumsum(1, dtype=torch.float32), not_mask.cumsum(2, dtype=torch.float32)
        if self.normalize:
            y_embed = y_embed / (y_embed[:, -1:, :] + 1e-6) * self.scale
            x_embed = x_embed / (x_embed[:, :, -1:] + 1e-6) * self.scale
        dim_t = torch.arange(self.num_pos_feats, dtype=torch.float32)
        dim_t = self.temperature ** (2 * (dim_t // 2) / self.num_pos_feats)
        pos_x, pos_y = x_embed[:, :, :, None] / dim_t, y_embed[:, :, :, None] / dim_t
        pos_x = torch.stack((pos_x[:, :, :, 0::2].sin(), pos_x[:, :, :, 1::2].cos()), dim=4).flatten(3)
        pos_y = torch.stack((pos_y[:, :, :, 0::2].sin(), pos_y[:, :, :, 1::2].cos()), dim=4).flatten(3)
        return torch.cat((pos_y, pos_x), dim=3).permute(0, 3, 1, 2)


class EncoderLayer(nn.Module):
    def __init__(self, d_model, nhead):
        super().__init__()
        self.nhead = nhead
        self.qk, self.v, self.out = nn.Linear(d_model, 2 * d_model), nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.ffn = nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.ReLU(), nn.Linear(2 * d_model, d_model))
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, src, attn_mask, pos):
        b, n, d = src.shape
        q, k = self.qk(src + pos).view(b, n, 2, self.nhead, -1).permute(2, 0, 3, 1, 4)
        v = self.v(src).view(b, n, self.nhead, -1).transpose(1, 2)
        src2 = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask).transpose(1, 2).reshape(b, n, d)
        src = self.norm1(src + self.out(src2))
        return self.norm2(src + self.ffn(src))


class DecoderLayer(nn.Module):
    def __init__(self, d_model, nhead):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, nhead, batch_first=True)
        self.multihead_attn = nn.MultiheadAttention(d_model, nhead, batch_first=True)
        self.ffn = nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.ReLU(), nn.Linear(2 * d_model, d_model))
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, tgt, memory, memory_key_padding_mask, pos, query_pos):
        q = k = tgt + query_pos
        tgt = self.norm1(tgt + self.self_attn(q, k, value=tgt)[0])
        tgt2 = self.multihead_attn(query=tgt + query_pos, key=memory + pos, value=memory,
                                   key_padding_mask=memory_key_padding_mask)[0]
        tgt = self.norm2(tgt + tgt2)
        return self.norm3(tgt + self.ffn(tgt))


class DETR(nn.Module):
    def __init__(self, num_classes=5, hidden_dim=32, nheads=4, num_queries=6, layers=2):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, hidden_dim, kernel_size=8, stride=8), nn.ReLU())
        self.position_embedding = PositionEmbeddingSine(hidden_dim // 2)
        self.encoder = nn.ModuleList(EncoderLayer(hidden_dim, nheads) for _ in range(layers))
        self.decoder = nn.ModuleList(DecoderLayer(hidden_dim, nheads) for _ in range(layers))
        self.query_embed = nn.Embedding(num_queries, hidden_dim)
        self.class_embed = nn.Linear(hidden_dim, num_classes + 1)
        self.bbox_embed = nn.Sequential(nn.Linear(hidden_dim, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, 4))

    def forward(self, samples: NestedTensor):
        images, m = samples.decompose()
        src = self.backbone(images)
        mask = F.interpolate(m[None].float(), size=src.shape[-2:]).to(torch.bool)[0]
        pos = self.position_embedding(mask).flatten(2).permute(0, 2, 1)
        bs = src.shape[0]
        src, mask = src.flatten(2).permute(0, 2, 1), mask.flatten(1)
        keep = ~mask
        attn_mask = keep[:, None, None, :].to(src.dtype)  # expect: MC508 detr
        memory = src
        for layer in self.encoder:
            memory = layer(memory, attn_mask, pos)
        query_pos = self.query_embed.weight.unsqueeze(0).repeat(bs, 1, 1)
        hs = torch.zeros_like(query_pos)
        for layer in self.decoder:
            hs = layer(hs, memory, mask, pos, query_pos)
        return {"pred_logits": self.class_embed(hs), "pred_boxes": self.bbox_embed(hs).sigmoid()}


if __name__ == "__main__":
    torch.manual_seed(0)
    model = DETR().eval()
    images = [torch.randn(3, 32, 48), torch.randn(3, 24, 32)]
    with torch.no_grad():
        out = model(nested_tensor_from_tensor_list(images))
        alone = model(nested_tensor_from_tensor_list(images[1:]))
        print("padded image batched vs alone:", (out["pred_logits"][1] - alone["pred_logits"][0]).abs().max().item())
        noisy = nested_tensor_from_tensor_list(images)
        noisy.tensors[1, :, 24:, :] = 5.0
        print("padding content leak:", (model(noisy)["pred_boxes"][1] - out["pred_boxes"][1]).abs().max().item())
        scores, labels = out["pred_logits"].softmax(-1)[..., :-1].max(-1)
        print("top detection per image:", labels[:, scores.argmax(-1)].diagonal().tolist())
