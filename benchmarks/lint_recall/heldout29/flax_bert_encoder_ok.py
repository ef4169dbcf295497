"""A BERT-style text encoder ported from Flax (linen) to PyTorch.

The Flax model builds its masks with `nn.make_attention_mask(input_mask, input_mask)`, adds a
segment mask for packed examples (`make_attention_mask(segment_ids, segment_ids, jnp.equal)`)
and merges them with `nn.combine_masks`; the port re-implements those three helpers and
`dot_product_attention_weights` in torch with the linen signatures, keeps the
[batch, length, heads, head_dim] layout and the `einsum` strings, and keeps the `dtype` argument.

Source: pytorch/pytorch#103749, Biohub/esm#299, conventions.md §1 (JAX / Flax row) and §2.3.
"""
import functools

import torch
import torch.nn as nn


def make_attention_mask(query_input, key_input, pairwise_fn=torch.mul, dtype=torch.float32):
    mask = pairwise_fn(query_input[..., :, None], key_input[..., None, :])
    return mask[..., None, :, :].to(dtype)


def combine_masks(*masks, dtype=torch.float32):
    masks = [m for m in masks if m is not None]
    if not masks:
        return None
    mask = functools.reduce(torch.logical_and, masks)
    return mask.to(dtype)


def dot_product_attention_weights(query, key, mask=None, dtype=torch.float32):
    depth = query.shape[-1]
    query = query / depth**0.5
    attn_weights = torch.einsum("...qhd,...khd->...hqk", query, key).to(dtype)
    if mask is not None:
        attn_weights = attn_weights.masked_fill(mask == 0, torch.finfo(attn_weights.dtype).min)
    return torch.softmax(attn_weights, dim=-1)


class SelfAttention(nn.Module):
    def __init__(self, features, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(features, 3 * features)
        self.out = nn.Linear(features, features)

    def forward(self, x, mask):
        b, length, features = x.shape
        q, k, v = self.qkv(x).view(b, length, 3, self.num_heads, -1).unbind(2)
        weights = dot_product_attention_weights(q, k, mask=mask, dtype=x.dtype)
        y = torch.einsum("...hqk,...khd->...qhd", weights, v)
        return self.out(y.reshape(b, length, features))


class EncoderLayer(nn.Module):
    def __init__(self, features, num_heads):
        super().__init__()
        self.attention = SelfAttention(features, num_heads)
        self.ln_1 = nn.LayerNorm(features)
        self.mlp = nn.Sequential(nn.Linear(features, 2 * features), nn.GELU(), nn.Linear(2 * features, features))
        self.ln_2 = nn.LayerNorm(features)

    def forward(self, x, mask):
        x = self.ln_1(x + self.attention(x, mask))
        return self.ln_2(x + self.mlp(x))


class BertClassifier(nn.Module):
    def __init__(self, vocab=40, features=16, num_heads=2, num_layers=2, max_len=16, num_classes=3):
        super().__init__()
        self.token_embed = nn.Embedding(vocab, features)
        self.position_embed = nn.Embedding(max_len, features)
        self.layers = nn.ModuleList([EncoderLayer(features, num_heads) for _ in range(num_layers)])
        self.classifier = nn.Linear(features, num_classes)

    def forward(self, input_ids, input_mask, segment_ids=None):
        x = self.token_embed(input_ids) + self.position_embed(torch.arange(input_ids.shape[1]))
        pad_mask = make_attention_mask(input_mask, input_mask)
        segment_mask = None
        if segment_ids is not None:
            segment_mask = make_attention_mask(segment_ids, segment_ids, torch.eq)
        mask = combine_masks(pad_mask, segment_mask, dtype=x.dtype)
        for layer in self.layers:
            x = layer(x, mask)
        return self.classifier(x[:, 0])


if __name__ == "__main__":
    torch.manual_seed(0)
    model = BertClassifier().eval()
    input_ids = torch.tensor([[2, 11, 7, 23, 9, 3], [2, 15, 8, 3, 0, 0], [2, 31, 3, 0, 0, 0]])
    input_mask = (input_ids != 0).long()
    with torch.no_grad():
        logits = model(input_ids, input_mask)
        alone = torch.cat([model(ids[m.bool()][None], m[m.bool()][None]) for ids, m in zip(input_ids, input_mask)])
        packed_ids = torch.tensor([[2, 11, 3, 2, 15, 8, 3, 0]])
        packed = model(packed_ids, (packed_ids != 0).long(), torch.tensor([[1, 1, 1, 2, 2, 2, 2, 0]]))
    print("logits NaN per example:", torch.isnan(logits).any(dim=-1).tolist())
    print("max |batched - alone|:", (logits - alone).abs().max().item())
    print("packed example NaN:", bool(torch.isnan(packed).any()))
