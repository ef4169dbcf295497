"""A small vision-language model (Idefics2 / PaliGemma style) that merges image and text masks.

Images of different resolutions become different numbers of patches; the processor pads them
to the largest count and returns `patch_attention_mask` (1 = real patch). A ViT encodes the
patches, a perceiver resampler turns each image into a fixed number of latents (the latents
attend to the real patches and to each other), and the latents replace the `<image>`
placeholder tokens in the prompt. The language model uses a prefix-LM mask: image tokens and
the prompt attend to each other in both directions, the answer is causal, and left padding is
hidden everywhere. Masks are bool with True = attend for SDPA and additive 0 / finfo.min for
the eager paths.

Source: conventions.md §2.9 (a 4-D bool mask given to eager attention is added to the
weights: True adds +1 and nothing is masked) and §5 item 7; huggingface/transformers#32195
and #46458.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD, BOS, IMAGE = 0, 1, 2
PATCH_DIM = 3 * 4 * 4


class Processor:
    """Expands each `<image>` into `num_latents` placeholders; left-pads for generation."""

    def __init__(self, num_latents=4):
        self.num_latents = num_latents

    def __call__(self, prompts, answers, images):
        rows, types = [], []
        for prompt, answer in zip(prompts, answers):
            prefix = [BOS] + [IMAGE] * self.num_latents + [3 + (sum(map(ord, w)) % 90) for w in prompt.split()]
            suffix = [3 + (sum(map(ord, w)) % 90) for w in answer.split()]
            rows.append(prefix + suffix)
            types.append([0] * len(prefix) + [1] * len(suffix))
        width = max(map(len, rows))
        input_ids = torch.full((len(rows), width), PAD, dtype=torch.long)
        token_type_ids = torch.zeros(len(rows), width, dtype=torch.long)
        for i, (r, t) in enumerate(zip(rows, types)):
            input_ids[i, width - len(r) :] = torch.tensor(r)
            token_type_ids[i, width - len(t) :] = torch.tensor(t)
        max_patches = max(img.shape[0] for img in images)
        pixel_values = torch.zeros(len(images), max_patches, PATCH_DIM)
        patch_attention_mask = torch.zeros(len(images), max_patches, dtype=torch.long)
        for i, img in enumerate(images):
            pixel_values[i, : img.shape[0]] = img
            patch_attention_mask[i, : img.shape[0]] = 1
        return {
            "input_ids": input_ids,
            "attention_mask": (input_ids != PAD).long(),
            "token_type_ids": token_type_ids,
            "pixel_values": pixel_values,
            "patch_attention_mask": patch_attention_mask,
        }


class VisionTower(nn.Module):
    def __init__(self, dim=48, heads=4, layers=2, max_patches=16):
        super().__init__()
        self.heads = heads
        self.patch_embed = nn.Linear(PATCH_DIM, dim)
        self.pos = nn.Parameter(torch.randn(max_patches, dim) * 0.02)
        self.layers = nn.ModuleList(
            nn.ModuleDict({"norm1": nn.LayerNorm(dim), "qkv": nn.Linear(dim, 3 * dim), "proj": nn.Linear(dim, dim), "norm2": nn.LayerNorm(dim), "mlp": nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))})
            for _ in range(layers)
        )
        self.post_norm = nn.LayerNorm(dim)

    def forward(self, pixel_values, patch_attention_mask):
        patch_keep = patch_attention_mask.bool()
        x = self.patch_embed(pixel_values) + self.pos[: pixel_values.shape[1]]
        b, n, d = x.shape
        for layer in self.layers:
            q, k, v = layer["qkv"](layer["norm1"](x)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=patch_keep[:, None, None, :])
            x = x + layer["proj"](out.transpose(1, 2).reshape(b, n, d))
            x = x + layer["mlp"](layer["norm2"](x))
        return self.post_norm(x)


class PerceiverResampler(nn.Module):
    """Learned latents attend to [real patches; latents] (Idefics2 connector), eager attention."""

    def __init__(self, vision_dim=48, text_dim=64, num_latents=4, heads=4):
        super().__init__()
        self.heads, self.num_latents = heads, num_latents
        self.latents = nn.Parameter(torch.randn(num_latents, text_dim) * 0.02)
        self.context_proj = nn.Linear(vision_dim, text_dim)
        self.norm_latents = nn.LayerNorm(text_dim)
        self.norm_context = nn.LayerNorm(text_dim)
        self.to_q = nn.Linear(text_dim, text_dim, bias=False)
        self.to_kv = nn.Linear(text_dim, 2 * text_dim, bias=False)
        self.out = nn.Linear(text_dim, text_dim, bias=False)
        self.mlp = nn.Sequential(nn.LayerNorm(text_dim), nn.Linear(text_dim, 2 * text_dim), nn.GELU(), nn.Linear(2 * text_dim, text_dim))

    def forward(self, image_hidden, patch_attention_mask):
        b, n_lat, h = image_hidden.shape[0], self.num_latents, self.heads
        latents = self.norm_latents(self.latents[None].expand(b, -1, -1))
        context = torch.cat([self.norm_context(self.context_proj(image_hidden)), latents], dim=1)
        d = latents.shape[-1]
        q = self.to_q(latents).view(b, n_lat, h, d // h).transpose(1, 2)
        k, v = self.to_kv(context).view(b, context.shape[1], 2, h, d // h).permute(2, 0, 3, 1, 4)
        key_keep = torch.cat([patch_attention_mask, patch_attention_mask.new_ones(b, n_lat)], dim=1).bool()
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // h)
        scores = scores.masked_fill(~key_keep[:, None, None, :], torch.finfo(scores.dtype).min)
        latents = self.latents[None] + self.out((scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, n_lat, d))
        return latents + self.mlp(latents)


def prefix_lm_keep(attention_mask, token_type_ids):
    """(batch, 1, L, L) bool, True = attend: causal, plus both directions inside the prefix."""
    L = attention_mask.shape[1]
    causal = torch.ones(L, L, dtype=torch.bool, device=attention_mask.device).tril()
    prefix = (token_type_ids == 0) & attention_mask.bool()
    bidirectional = prefix[:, :, None] & prefix[:, None, :]
    keep = causal[None] | bidirectional
    return (keep & attention_mask.bool()[:, None, :])[:, None]


def to_additive(keep, dtype):
    return torch.where(keep, torch.zeros((), dtype=dtype), torch.tensor(torch.finfo(dtype).min, dtype=dtype))


class LMLayer(nn.Module):
    def __init__(self, dim=64, heads=4):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, mask, attn_implementation):
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if attn_implementation == "sdpa":
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            weights = (q @ k.transpose(-2, -1)) * (d // self.heads) ** -0.5 + mask
            out = weights.softmax(dim=-1) @ v
        x = x + self.proj(out.transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.norm2(x))


class TinyVLM(nn.Module):
    def __init__(self, vocab_size=96, dim=64, layers=2, num_latents=4, attn_implementation="sdpa"):
        super().__init__()
        self.attn_implementation = attn_implementation
        self.vision_tower = VisionTower()
        self.connector = PerceiverResampler(text_dim=dim, num_latents=num_latents)
        self.embed_tokens = nn.Embedding(vocab_size, dim, padding_idx=PAD)
        self.embed_positions = nn.Embedding(64, dim)
        self.layers = nn.ModuleList(LMLayer(dim) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab_size, bias=False)

    def get_image_features(self, pixel_values, patch_attention_mask):
        return self.connector(self.vision_tower(pixel_values, patch_attention_mask), patch_attention_mask)

    def forward(self, input_ids, attention_mask, token_type_ids, pixel_values, patch_attention_mask, labels=None):
        inputs_embeds = self.embed_tokens(input_ids)
        image_features = self.get_image_features(pixel_values, patch_attention_mask).to(inputs_embeds.dtype)
        special_image_mask = (input_ids == IMAGE)[..., None].expand_as(inputs_embeds)
        inputs_embeds = inputs_embeds.masked_scatter(special_image_mask, image_features)
        position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        x = inputs_embeds + self.embed_positions(position_ids)
        keep = prefix_lm_keep(attention_mask, token_type_ids)
        mask = keep if self.attn_implementation == "sdpa" else to_additive(keep, x.dtype)
        for layer in self.layers:
            x = layer(x, mask, self.attn_implementation)
        logits = self.lm_head(self.norm(x))
        loss = None
        if labels is not None:
            labels = labels.masked_fill((token_type_ids == 0) | (attention_mask == 0), -100)
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100)
        return logits, loss


if __name__ == "__main__":
    torch.manual_seed(0)
    processor = Processor()
    model = TinyVLM().eval()
    small, large = torch.randn(4, PATCH_DIM), torch.randn(6, PATCH_DIM)
    batch = processor(["describe the image", "what color is the car"], ["a cat", "it is red"], [small, large])
    with torch.no_grad():
        feats = model.get_image_features(batch["pixel_values"], batch["patch_attention_mask"])
        alone = model.get_image_features(small[None], torch.ones(1, 4, dtype=torch.long))
        print("small image latents: batched vs alone max |diff| =", (feats[0] - alone[0]).abs().max().item())
        sdpa_logits, _ = model(**batch)
        model.attn_implementation = "eager"
        eager_logits, _ = model(**batch)
        model.attn_implementation = "sdpa"
        real = batch["attention_mask"].bool()
        print("language model sdpa vs eager (real tokens) max |diff| =", (sdpa_logits - eager_logits)[real].abs().max().item())
        keep = prefix_lm_keep(batch["attention_mask"], batch["token_type_ids"])
        first_answer = int((batch["token_type_ids"][0] == 1).nonzero()[0])
        print("answer token sees a later answer token:", bool(keep[0, 0, first_answer, first_answer + 1]))
        print("image token sees the prompt:", bool(keep[0, 0, first_answer - 6, first_answer - 1]))
    model.train()
    _, loss = model(**batch, labels=batch["input_ids"])
    print("loss", round(loss.item(), 4))
