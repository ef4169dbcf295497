"""Multimodal chat LLM with interleaved image tokens (LLaVA / Gemma-3 style).

Image features from a small vision tower are projected into the placeholder image tokens of the
prompt. Text attends causally; the tokens of one image attend to each other in both directions.
The 4-D mask is built once per batch and handed to every decoder layer, which runs SDPA by
default and an eager implementation when attention weights are requested (visual grounding).

Source: conventions.md §2.9 (4-D bool mask in eager attention), pytorch/pytorch#103963 (conventions.md §3 item 6), huggingface/transformers#32195 (item 25)
"""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class MLLMConfig:
    vocab: int = 512
    dim: int = 64
    heads: int = 4
    depth: int = 2
    image_token_id: int = 511
    tokens_per_image: int = 4
    patch: int = 8
    attn_implementation: str = "sdpa"


def build_attention_mask(input_ids, attention_mask, image_token_id):
    b, t = input_ids.shape
    is_image = input_ids == image_token_id
    starts = is_image & ~F.pad(is_image, (1, 0))[:, :-1]
    image_group = torch.where(is_image, starts.cumsum(-1), -1)
    causal = torch.ones(t, t, dtype=torch.bool, device=input_ids.device).tril()
    same_image = (image_group[:, :, None] == image_group[:, None, :]) & is_image[:, :, None]
    allowed = (causal[None] | same_image) & attention_mask.bool()[:, None, :]
    return allowed[:, None]


def eager_attention_forward(q, k, v, attention_mask, scaling):
    attn_weights = torch.matmul(q, k.transpose(2, 3)) * scaling
    if attention_mask is not None:
        attn_weights = attn_weights.masked_fill(~attention_mask, torch.finfo(attn_weights.dtype).min)
    attn_weights = attn_weights.softmax(dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(attn_weights, v), attn_weights


def sdpa_attention_forward(q, k, v, attention_mask, scaling):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask, scale=scaling), None


ATTENTION_FUNCTIONS = {"eager": eager_attention_forward, "sdpa": sdpa_attention_forward}


class DecoderAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.head_dim = cfg.dim // cfg.heads
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim, bias=False)
        self.o_proj = nn.Linear(cfg.dim, cfg.dim, bias=False)

    def forward(self, x, attention_mask, output_attentions=False):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.cfg.heads, self.head_dim).transpose(1, 3).unbind(2)
        impl = "eager" if output_attentions else self.cfg.attn_implementation
        attn_fn = ATTENTION_FUNCTIONS[impl]
        out, weights = attn_fn(q, k, v, attention_mask, self.head_dim ** -0.5)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, d)), weights


class DecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_norm = nn.RMSNorm(cfg.dim)
        self.attn = DecoderAttention(cfg)
        self.post_norm = nn.RMSNorm(cfg.dim)
        self.mlp = nn.Sequential(nn.Linear(cfg.dim, 4 * cfg.dim), nn.SiLU(), nn.Linear(4 * cfg.dim, cfg.dim))

    def forward(self, x, attention_mask, output_attentions=False):
        h, weights = self.attn(self.input_norm(x), attention_mask, output_attentions)
        x = x + h
        return x + self.mlp(self.post_norm(x)), weights


class VisionTower(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.patch = nn.Conv2d(3, cfg.dim, cfg.patch, stride=cfg.patch)
        self.pool = nn.AdaptiveAvgPool1d(cfg.tokens_per_image)
        self.projector = nn.Sequential(nn.Linear(cfg.dim, cfg.dim), nn.GELU(), nn.Linear(cfg.dim, cfg.dim))

    def forward(self, pixel_values):
        feats = self.patch(pixel_values).flatten(2)
        return self.projector(self.pool(feats).transpose(1, 2))


class MultimodalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.dim)
        self.pos = nn.Embedding(256, cfg.dim)
        self.vision = VisionTower(cfg)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.depth))
        self.norm = nn.RMSNorm(cfg.dim)
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab, bias=False)

    def forward(self, input_ids, attention_mask, pixel_values=None, output_attentions=False):
        x = self.embed(input_ids)
        is_image = input_ids == self.cfg.image_token_id
        if pixel_values is not None:
            x = x.masked_scatter(is_image[..., None], self.vision(pixel_values).to(x.dtype))
        positions = (attention_mask.cumsum(-1) - 1).clamp_min(0)
        x = x + self.pos(positions)
        mask_4d = build_attention_mask(input_ids, attention_mask, self.cfg.image_token_id)
        all_weights = []
        for layer in self.layers:
            x, weights = layer(x, mask_4d, output_attentions)
            all_weights.append(weights)
        return self.lm_head(self.norm(x)), all_weights


def build_prompt(text_ids, n_images, cfg):
    image_block = [cfg.image_token_id] * cfg.tokens_per_image
    return torch.tensor(image_block * n_images + list(text_ids))


def left_pad(prompts, pad_id=0):
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros(len(prompts), width, dtype=torch.long)
    for i, p in enumerate(prompts):
        input_ids[i, width - len(p):] = p
        attention_mask[i, width - len(p):] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask}


@torch.no_grad()
def grounding_map(model, batch, pixel_values):
    logits, weights = model(batch["input_ids"], batch["attention_mask"], pixel_values, output_attentions=True)
    is_image = batch["input_ids"] == model.cfg.image_token_id
    last = torch.stack(weights)[:, :, :, -1].mean(dim=(0, 2))
    return logits[:, -1], last.masked_fill(~is_image, 0.0)
