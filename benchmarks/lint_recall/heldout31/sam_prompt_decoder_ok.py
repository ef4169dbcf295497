"""Segment Anything prompt encoder and mask decoder, written the way facebookresearch/segment-anything
writes them (modeling/prompt_encoder.py, transformer.py, mask_decoder.py, predictor.py): random
Fourier positional encoding of the clicks, ``not_a_point_embed`` for label -1, a two-way
transformer between the output tokens plus prompts and the image embedding, hypernetwork mask
heads and an IoU head. Images in a batch carry different numbers of clicks, padded with label -1
and hidden from the attention; ``predict_torch`` decodes from cached image embeddings.

Source: huggingface/lerobot PR #710, NVIDIA/apex#1052, conventions.md §2.3, tools.md §0 P5
"""
import math

import torch
import torch.nn.functional as F
from torch import nn


class PositionEmbeddingRandom(nn.Module):
    def __init__(self, num_pos_feats=16, scale=1.0):
        super().__init__()
        self.register_buffer("positional_encoding_gaussian_matrix", scale * torch.randn((2, num_pos_feats)))

    def _pe_encoding(self, coords):
        coords = (2 * coords - 1) @ self.positional_encoding_gaussian_matrix
        return torch.cat([torch.sin(2 * math.pi * coords), torch.cos(2 * math.pi * coords)], dim=-1)

    def forward(self, size):
        h, w = size
        y_embed, x_embed = torch.meshgrid((torch.arange(h) + 0.5) / h, (torch.arange(w) + 0.5) / w, indexing="ij")
        return self._pe_encoding(torch.stack([x_embed, y_embed], dim=-1)).permute(2, 0, 1)

    def forward_with_coords(self, coords_input, image_size):
        coords = coords_input.clone()
        coords[:, :, 0], coords[:, :, 1] = coords[:, :, 0] / image_size[1], coords[:, :, 1] / image_size[0]
        return self._pe_encoding(coords.to(torch.float))


class Attention(nn.Module):
    def __init__(self, embedding_dim, num_heads, downsample_rate=1):
        super().__init__()
        self.internal_dim, self.num_heads = embedding_dim // downsample_rate, num_heads
        self.q_proj, self.k_proj = nn.Linear(embedding_dim, self.internal_dim), nn.Linear(embedding_dim, self.internal_dim)
        self.v_proj, self.out_proj = nn.Linear(embedding_dim, self.internal_dim), nn.Linear(self.internal_dim, embedding_dim)

    def _separate_heads(self, x):
        b, n, c = x.shape
        return x.reshape(b, n, self.num_heads, c // self.num_heads).transpose(1, 2)

    def forward(self, q, k, v, key_keep=None):
        q, k, v = self._separate_heads(self.q_proj(q)), self._separate_heads(self.k_proj(k)), self._separate_heads(self.v_proj(v))
        attn = q @ k.permute(0, 1, 3, 2) / math.sqrt(q.shape[-1])
        if key_keep is not None:
            attn = attn.masked_fill(~key_keep[:, None, None, :], torch.finfo(attn.dtype).min)
        out = (torch.softmax(attn, dim=-1) @ v).transpose(1, 2).flatten(2)
        return self.out_proj(out)


class TwoWayAttentionBlock(nn.Module):
    def __init__(self, dim, num_heads, skip_first_layer_pe=False):
        super().__init__()
        self.self_attn = Attention(dim, num_heads)
        self.cross_attn_token_to_image = Attention(dim, num_heads, downsample_rate=2)
        self.cross_attn_image_to_token = Attention(dim, num_heads, downsample_rate=2)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.ReLU(), nn.Linear(2 * dim, dim))
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(4))
        self.skip_first_layer_pe = skip_first_layer_pe

    def forward(self, queries, keys, query_pe, key_pe, token_keep):
        q = queries if self.skip_first_layer_pe else queries + query_pe
        queries = self.norms[0](queries + self.self_attn(q=q, k=q, v=queries, key_keep=token_keep))
        queries = self.norms[1](queries + self.cross_attn_token_to_image(q=queries + query_pe, k=keys + key_pe, v=keys))
        queries = self.norms[2](queries + self.mlp(queries))
        attn_out = self.cross_attn_image_to_token(q=keys + key_pe, k=queries + query_pe, v=queries, key_keep=token_keep)
        return queries, self.norms[3](keys + attn_out)


class SamPromptDecoder(nn.Module):
    def __init__(self, dim=32, num_heads=4, depth=2, num_multimask_outputs=3, image_size=(64, 64)):
        super().__init__()
        self.input_image_size, self.num_mask_tokens = image_size, num_multimask_outputs + 1
        self.pe_layer = PositionEmbeddingRandom(dim // 2)
        self.point_embeddings = nn.ModuleList(nn.Embedding(1, dim) for _ in range(2))
        self.not_a_point_embed = nn.Embedding(1, dim)
        self.iou_token, self.mask_tokens = nn.Embedding(1, dim), nn.Embedding(self.num_mask_tokens, dim)
        self.layers = nn.ModuleList(TwoWayAttentionBlock(dim, num_heads, skip_first_layer_pe=(i == 0)) for i in range(depth))
        self.final_attn_token_to_image = Attention(dim, num_heads, downsample_rate=2)
        self.norm_final_attn = nn.LayerNorm(dim)
        self.output_upscaling = nn.ConvTranspose2d(dim, dim // 4, kernel_size=2, stride=2)
        self.output_hypernetworks_mlps = nn.ModuleList(nn.Linear(dim, dim // 4) for _ in range(self.num_mask_tokens))
        self.iou_prediction_head = nn.Linear(dim, self.num_mask_tokens)

    def _embed_points(self, points, labels):
        point_embedding = self.pe_layer.forward_with_coords(points + 0.5, self.input_image_size)
        point_embedding[labels == -1] = 0.0
        point_embedding[labels == -1] += self.not_a_point_embed.weight
        point_embedding[labels == 0] += self.point_embeddings[0].weight
        point_embedding[labels == 1] += self.point_embeddings[1].weight
        return point_embedding

    def forward(self, image_embeddings, point_coords, point_labels):
        b, c, h, w = image_embeddings.shape
        sparse = self._embed_points(point_coords, point_labels)
        output_tokens = torch.cat([self.iou_token.weight, self.mask_tokens.weight], dim=0).expand(b, -1, -1)
        tokens = torch.cat([output_tokens, sparse], dim=1)
        token_keep = torch.cat([point_labels.new_ones(b, output_tokens.shape[1], dtype=torch.bool), point_labels != -1], 1)
        keys, key_pe = image_embeddings.flatten(2).permute(0, 2, 1), self.pe_layer((h, w)).flatten(1).T[None]
        queries = tokens
        for layer in self.layers:
            queries, keys = layer(queries, keys, tokens, key_pe, token_keep)
        queries = self.norm_final_attn(queries + self.final_attn_token_to_image(q=queries + tokens, k=keys + key_pe, v=keys))
        upscaled = F.gelu(self.output_upscaling(keys.transpose(1, 2).reshape(b, c, h, w)))
        hyper_in = torch.stack([mlp(queries[:, 1 + i]) for i, mlp in enumerate(self.output_hypernetworks_mlps)], dim=1)
        masks = (hyper_in @ upscaled.flatten(2)).view(b, -1, 2 * h, 2 * w)
        return masks, self.iou_prediction_head(queries[:, 0])


@torch.no_grad()
def predict_torch(decoder, features, point_coords, point_labels, dtype=torch.bfloat16):
    with torch.autocast(device_type=features.device.type, dtype=dtype):
        low_res_masks, iou_predictions = decoder(features, point_coords, point_labels)
    return low_res_masks.float(), iou_predictions.float()


if __name__ == "__main__":
    torch.manual_seed(0)
    decoder = SamPromptDecoder().eval()
    features = torch.randn(2, 32, 8, 8)
    coords = torch.tensor([[[10.0, 12.0], [40.0, 33.0], [5.0, 60.0]], [[20.0, 20.0], [0.0, 0.0], [0.0, 0.0]]])
    labels = torch.tensor([[1, 0, 1], [1, -1, -1]])
    with torch.no_grad():
        masks, iou = decoder(features, coords, labels)
        alone, _ = decoder(features[1:], coords[1:, :1], labels[1:, :1])
        print("float32: padded clicks batched vs alone:", (masks[1] - alone[0]).abs().max().item())
    try:
        masks_bf16, _ = predict_torch(decoder, features, coords, labels)
        print("bfloat16 autocast vs float32:", (masks_bf16 - masks).abs().max().item(), "NaN:", torch.isnan(masks_bf16).any().item())
    except RuntimeError as err:
        print("bfloat16 autocast:", err)
