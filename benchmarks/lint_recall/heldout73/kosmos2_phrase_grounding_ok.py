"""Grounded captioning with a Kosmos-2-style multimodal LM (torchscale / fairseq layout).

Image features are resampled into a fixed number of image embeddings and
written into the ``<image>`` span of the text; phrases are tied to boxes with
``<phrase>`` / ``<object>`` spans of two patch-index location tokens.

Source: seed self_attention_mask_guide.txt §3 (generate_causal_mask); pytorch/pytorch#103749 (conventions.md §3 item 5); conventions.md §2.3.
"""
import math
import re

import torch
import torch.nn.functional as F
from torch import nn

NUM_BINS = 8
WORDS = ["a", "snowman", "warming", "himself", "by", "fire", "dog", "on", "the", "grass", "next", "to", "ball"]
SPECIALS = ["<pad>", "<s>", "</s>", "<image>", "</image>", "<grounding>", "<phrase>", "</phrase>", "<object>", "</object>"]
LOCATIONS = [f"<patch_index_{i:04d}>" for i in range(NUM_BINS * NUM_BINS)]
VOCAB = SPECIALS + ["<img>"] + WORDS + LOCATIONS
TOKEN_ID = {t: i for i, t in enumerate(VOCAB)}
PAD = TOKEN_ID["<pad>"]


def fill_with_neg_inf(t):
    return t.float().fill_(float("-inf")).type_as(t)


def box_to_patch_tokens(box):
    x0, y0, x1, y1 = box
    ul = int(y0 * NUM_BINS) * NUM_BINS + int(x0 * NUM_BINS)
    lr = min(int(y1 * NUM_BINS), NUM_BINS - 1) * NUM_BINS + min(int(x1 * NUM_BINS), NUM_BINS - 1)
    return [LOCATIONS[ul], LOCATIONS[lr]]


def patch_index_to_coordinate(ul_idx, lr_idx):
    cell = 1.0 / NUM_BINS
    x0, y0 = (ul_idx % NUM_BINS) * cell, (ul_idx // NUM_BINS) * cell
    x1, y1 = (lr_idx % NUM_BINS + 1) * cell, (lr_idx // NUM_BINS + 1) * cell
    return x0, y0, x1, y1


def extract_entities(text):
    pattern = r"<phrase>(.+?)</phrase><object><patch_index_(\d+)><patch_index_(\d+)></object>"
    return [(m.group(1).strip(), patch_index_to_coordinate(int(m.group(2)), int(m.group(3)))) for m in re.finditer(pattern, text)]


class ImageToTextProjection(nn.Module):
    def __init__(self, vision_dim, embed_dim, num_latents=4):
        super().__init__()
        self.dense = nn.Linear(vision_dim, embed_dim)
        self.latent_query = nn.Parameter(torch.randn(num_latents, embed_dim))
        self.x_attn = nn.MultiheadAttention(embed_dim, 4, batch_first=True)

    def forward(self, features):
        hidden = self.dense(features)
        latents = self.latent_query.unsqueeze(0).expand(hidden.size(0), -1, -1)
        kv = torch.cat([hidden, latents], dim=1)
        return self.x_attn(latents, kv, kv, need_weights=False)[0]


class MultiheadAttention(nn.Module):
    def __init__(self, embed_dim, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim ** -0.5
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(embed_dim, embed_dim) for _ in range(4))

    def forward(self, x, key_padding_mask, attn_mask):
        tgt_len, bsz, embed_dim = x.size()
        q = (self.q_proj(x) * self.scaling).view(tgt_len, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        k = self.k_proj(x).view(tgt_len, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        v = self.v_proj(x).view(tgt_len, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        attn_weights = torch.bmm(q, k.transpose(1, 2))
        attn_weights += attn_mask.unsqueeze(0)
        attn_weights = attn_weights.view(bsz, self.num_heads, tgt_len, tgt_len)
        attn_weights = attn_weights.masked_fill(key_padding_mask.unsqueeze(1).unsqueeze(2), float("-inf"))
        attn_probs = F.softmax(attn_weights.view(bsz * self.num_heads, tgt_len, tgt_len).float(), dim=-1).type_as(attn_weights)
        attn = torch.bmm(attn_probs, v).transpose(0, 1).reshape(tgt_len, bsz, embed_dim)
        return self.out_proj(attn)


class DecoderLayer(nn.Module):
    def __init__(self, embed_dim, heads):
        super().__init__()
        self.self_attn = MultiheadAttention(embed_dim, heads)
        self.self_attn_layer_norm = nn.LayerNorm(embed_dim)
        self.ffn = nn.Sequential(nn.Linear(embed_dim, embed_dim * 4), nn.GELU(), nn.Linear(embed_dim * 4, embed_dim))
        self.final_layer_norm = nn.LayerNorm(embed_dim)

    def forward(self, x, self_attn_padding_mask, self_attn_mask):
        x = x + self.self_attn(self.self_attn_layer_norm(x), self_attn_padding_mask, self_attn_mask)
        return x + self.ffn(self.final_layer_norm(x))


class Kosmos2(nn.Module):
    def __init__(self, embed_dim=48, heads=4, layers=2, max_positions=64):
        super().__init__()
        self.vision_model = nn.Sequential(nn.Conv2d(3, 32, 8, 8), nn.Flatten(2))
        self.image_to_text_projection = ImageToTextProjection(32, embed_dim)
        self.embed_tokens = nn.Embedding(len(VOCAB), embed_dim, padding_idx=PAD)
        self.embed_positions = nn.Embedding(max_positions, embed_dim)
        self.embed_scale = math.sqrt(embed_dim)
        self.layers = nn.ModuleList([DecoderLayer(embed_dim, heads) for _ in range(layers)])
        self.layer_norm = nn.LayerNorm(embed_dim)
        self.output_projection = nn.Linear(embed_dim, len(VOCAB), bias=False)
        self._future_mask = torch.empty(0)

    def buffered_future_mask(self, tensor):
        dim = tensor.size(0)
        if self._future_mask.size(0) < dim:
            self._future_mask = torch.triu(fill_with_neg_inf(torch.zeros([dim, dim])), 1)
        self._future_mask = self._future_mask.to(tensor)
        return self._future_mask[:dim, :dim]

    def forward(self, input_ids, pixel_values, image_embeds_position_mask):
        image_embeds = self.image_to_text_projection(self.vision_model(pixel_values).transpose(1, 2))
        x = self.embed_scale * self.embed_tokens(input_ids)
        x[image_embeds_position_mask.bool()] = image_embeds.reshape(-1, image_embeds.size(-1)).to(x.dtype)
        positions = torch.cumsum(input_ids.ne(PAD).long(), dim=1) * input_ids.ne(PAD).long()
        x = (x + self.embed_positions(positions)).transpose(0, 1)
        self_attn_padding_mask = input_ids.eq(PAD)
        for layer in self.layers:
            x = layer(x, self_attn_padding_mask, self.buffered_future_mask(x))
        return self.output_projection(self.layer_norm(x).transpose(0, 1))


def build_grounded_inputs(captions, num_image_tokens=4):
    rows, image_masks = [], []
    for caption in captions:
        toks = ["<s>", "<image>"] + ["<img>"] * num_image_tokens + ["</image>", "<grounding>"]
        for piece in caption:
            toks += piece if isinstance(piece, list) else piece.split()
        toks.append("</s>")
        rows.append([TOKEN_ID[t] for t in toks])
        image_masks.append([0, 0] + [1] * num_image_tokens + [0] * (len(toks) - 2 - num_image_tokens))
    width = max(map(len, rows))
    input_ids = torch.full((len(rows), width), PAD, dtype=torch.long)
    image_embeds_position_mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, (row, im) in enumerate(zip(rows, image_masks)):
        input_ids[i, : len(row)] = torch.tensor(row)
        image_embeds_position_mask[i, : len(im)] = torch.tensor(im)
    return input_ids, image_embeds_position_mask


if __name__ == "__main__":
    torch.manual_seed(0)
    captions = [
        [["<phrase>"], "a snowman", ["</phrase>", "<object>"] + box_to_patch_tokens((0.1, 0.2, 0.5, 0.9)) + ["</object>"], "warming himself by", ["<phrase>"], "a fire", ["</phrase>", "<object>"] + box_to_patch_tokens((0.6, 0.5, 0.9, 0.95)) + ["</object>"]],
        [["<phrase>"], "a dog", ["</phrase>", "<object>"] + box_to_patch_tokens((0.3, 0.3, 0.7, 0.8)) + ["</object>"], "on the grass"],
    ]
    input_ids, image_mask = build_grounded_inputs(captions)
    pixel_values = torch.randn(2, 3, 32, 32)
    model = Kosmos2()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    targets = input_ids[:, 1:].masked_fill((input_ids[:, 1:] == PAD) | image_mask[:, 1:].bool(), -100)
    for step in range(3):
        logits = model(input_ids, pixel_values, image_mask)
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), targets.flatten(), ignore_index=-100)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")
    text = "".join(VOCAB[i] if VOCAB[i].startswith("<") else " " + VOCAB[i] for i in input_ids[0].tolist())
    print(extract_entities(text))
