"""
NaViT, "Patch n' Pack: a Vision Transformer for any Aspect Ratio and
Resolution" (Dehghani et al., 2023): images of different sizes are cut into
patches and packed into fixed-length sequences, with factorized 2-D position
embeddings, token dropping and per-image attention pooling.

Source: seed self_attention_mask_guide.txt §6 (create_block_mask); conventions.md §2.3
"""

from functools import partial
from typing import List, Tuple

import torch
import torch.nn.functional as F
from torch import nn, Tensor


def exists(val):
    return val is not None


def divisible_by(numer, denom):
    return (numer % denom) == 0


def group_images_by_max_seq_len(images: List[Tensor], patch_size: int, max_seq_len: int) -> List[List[Tensor]]:
    groups, group, seq_len = [], [], 0
    for image in images:
        ih, iw = image.shape[-2:]
        assert divisible_by(ih, patch_size) and divisible_by(iw, patch_size)
        image_seq_len = (ih // patch_size) * (iw // patch_size)
        assert image_seq_len <= max_seq_len
        if (seq_len + image_seq_len) > max_seq_len:
            groups.append(group)
            group, seq_len = [], 0
        group.append(image)
        seq_len += image_seq_len
    if len(group) > 0:
        groups.append(group)
    return groups


def packed_attn_bias(spans: List[Tuple[int, int]], seq_len: int, device=None) -> Tensor:
    bias = torch.zeros(seq_len, seq_len, device=device)
    for start, end in spans:
        bias[start:end, start:end] = 1.
    bias = torch.where(bias == 1., 0., float('-inf'))
    return bias


class LayerNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(dim))
        self.register_buffer('beta', torch.zeros(dim))

    def forward(self, x):
        return F.layer_norm(x, x.shape[-1:], self.gamma, self.beta)


class Attention(nn.Module):
    def __init__(self, dim, heads=8, dim_head=64, dropout=0.):
        super().__init__()
        inner_dim = dim_head * heads
        self.heads = heads
        self.dropout = dropout
        self.norm = LayerNorm(dim)
        self.to_q = nn.Linear(dim, inner_dim, bias=False)
        self.to_kv = nn.Linear(dim, inner_dim * 2, bias=False)
        self.to_out = nn.Linear(inner_dim, dim, bias=False)

    def split_heads(self, t):
        b, n, _ = t.shape
        return t.view(b, n, self.heads, -1).transpose(1, 2)

    def forward(self, x, context=None, attn_mask=None):
        x = self.norm(x)
        kv_input = context if exists(context) else x
        q, k, v = map(self.split_heads, (self.to_q(x), *self.to_kv(kv_input).chunk(2, dim=-1)))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=self.dropout if self.training else 0.)
        out = out.transpose(1, 2).flatten(2)
        return self.to_out(out)


class Transformer(nn.Module):
    def __init__(self, dim, depth, heads, dim_head, mlp_dim, dropout=0.):
        super().__init__()
        self.layers = nn.ModuleList([])
        for _ in range(depth):
            self.layers.append(nn.ModuleList([
                Attention(dim, heads=heads, dim_head=dim_head, dropout=dropout),
                nn.Sequential(LayerNorm(dim), nn.Linear(dim, mlp_dim), nn.GELU(), nn.Linear(mlp_dim, dim))
            ]))
        self.norm = LayerNorm(dim)

    def forward(self, x, attn_mask=None):
        for attn, ff in self.layers:
            x = attn(x, attn_mask=attn_mask) + x
            x = ff(x) + x
        return self.norm(x)


class NaViT(nn.Module):
    def __init__(self, *, image_size, patch_size, num_classes, dim, depth, heads, mlp_dim, channels=3, dim_head=32, max_images_per_seq=4, token_dropout_prob=0.):
        super().__init__()
        self.patch_size = patch_size
        self.max_seq_len = (image_size // patch_size) ** 2
        self.max_images_per_seq = max_images_per_seq
        self.token_dropout_prob = token_dropout_prob
        patch_dim = channels * patch_size ** 2
        num_patches_side = image_size // patch_size

        self.to_patch_embedding = nn.Sequential(LayerNorm(patch_dim), nn.Linear(patch_dim, dim), LayerNorm(dim))
        self.pos_embed_height = nn.Parameter(torch.randn(num_patches_side, dim))
        self.pos_embed_width = nn.Parameter(torch.randn(num_patches_side, dim))
        self.transformer = Transformer(dim, depth, heads, dim_head, mlp_dim)

        self.attn_pool_queries = nn.Parameter(torch.randn(dim))
        self.attn_pool = Attention(dim=dim, dim_head=dim_head, heads=heads)
        self.mlp_head = nn.Sequential(LayerNorm(dim), nn.Linear(dim, num_classes, bias=False))

    def patchify(self, image):
        c, ih, iw = image.shape
        p = self.patch_size
        ph, pw = ih // p, iw // p
        patches = image.view(c, ph, p, pw, p).permute(1, 3, 0, 2, 4).reshape(ph * pw, c * p * p)
        pos = torch.stack(torch.meshgrid(torch.arange(ph), torch.arange(pw), indexing='ij'), dim=-1).reshape(-1, 2)
        return patches, pos

    def forward(self, batched_images: List[List[Tensor]]):
        device = self.pos_embed_height.device
        sequences, positions, image_ids, all_spans = [], [], [], []

        for images in batched_images:
            seq, pos, ids, spans, start = [], [], [], [], 0
            for image_id, image in enumerate(images):
                patches, patch_pos = self.patchify(image)
                if self.training and self.token_dropout_prob > 0:
                    num_keep = max(1, int(patches.shape[0] * (1 - self.token_dropout_prob)))
                    keep_indices = torch.randperm(patches.shape[0])[:num_keep]
                    patches, patch_pos = patches[keep_indices], patch_pos[keep_indices]
                seq.append(patches)
                pos.append(patch_pos)
                ids.append(torch.full((patches.shape[0],), image_id, dtype=torch.long))
                spans.append((start, start + patches.shape[0]))
                start += patches.shape[0]
            sequences.append(torch.cat(seq))
            positions.append(torch.cat(pos))
            image_ids.append(torch.cat(ids))
            all_spans.append(spans)

        pad = partial(nn.utils.rnn.pad_sequence, batch_first=True)
        patches, patch_positions = pad(sequences).to(device), pad(positions).to(device)
        image_ids = pad(image_ids, padding_value=-1).to(device)
        seq_len = patches.shape[1]

        attn_bias = torch.stack([
            packed_attn_bias(spans + [(spans[-1][1], seq_len)], seq_len, device=device) for spans in all_spans
        ])

        x = self.to_patch_embedding(patches)
        h_idx, w_idx = patch_positions.unbind(dim=-1)
        x = x + self.pos_embed_height[h_idx] + self.pos_embed_width[w_idx]
        x = self.transformer(x, attn_mask=attn_bias[:, None])

        num_queries = self.max_images_per_seq
        query_ids = torch.arange(num_queries, device=device)
        attn_pool_mask = query_ids[None, :, None] == image_ids[:, None, :]
        queries = self.attn_pool_queries.expand(x.shape[0], num_queries, -1)
        pooled = self.attn_pool(queries, context=x, attn_mask=attn_pool_mask[:, None]) + queries

        is_image = query_ids[None, :] < torch.tensor([len(images) for images in batched_images], device=device)[:, None]
        return self.mlp_head(pooled[is_image])


if __name__ == '__main__':
    torch.manual_seed(0)
    model = NaViT(image_size=32, patch_size=8, num_classes=5, dim=32, depth=2, heads=2, mlp_dim=64, token_dropout_prob=0.25)
    images = [torch.randn(3, 16, 24), torch.randn(3, 32, 16), torch.randn(3, 8, 8), torch.randn(3, 24, 32), torch.randn(3, 16, 16)]
    batched_images = group_images_by_max_seq_len(images, patch_size=8, max_seq_len=16)
    logits = model(batched_images)
    loss = F.cross_entropy(logits, torch.randint(0, 5, (logits.shape[0],)))
    loss.backward()
    model.eval()
    with torch.no_grad():
        eval_logits = model(batched_images)
    print('groups', [len(g) for g in batched_images], 'loss', round(loss.item(), 4), 'finite', bool(eval_logits.isfinite().all()))
