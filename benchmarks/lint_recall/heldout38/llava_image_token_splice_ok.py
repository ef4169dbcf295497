"""LLaVA-style visual instruction tuning with image features spliced into the text.

The layout follows haotian-liu/LLaVA: a CLIP-like vision tower read at
`mm_vision_select_layer` without its class token, a two-layer GELU `mm_projector`,
`prepare_inputs_labels_for_multimodal` replacing each `<image>` token by the projected patch
features (labels `IGNORE_INDEX` there), re-padding the spliced batch on the tokenizer's
padding side, and a Llama decoder with eager attention and a 4-D additive mask built by the
transformers 4.3x helpers. The demo asks for the colour of a square in the image.

Source: huggingface/transformers PR #27114 and NVIDIA-NeMo/Automodel PR #2658
(conventions.md §3 items 15 and 16); conventions.md §2.3 and §5 item 4; tools.md §0 P5.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

IGNORE_INDEX = -100
IMAGE_TOKEN_INDEX = 3
PAD, BOS, EOS = 0, 1, 2
COLORS = torch.tensor([[1.0, 0.1, 0.1], [0.1, 1.0, 0.1], [0.1, 0.1, 1.0], [1.0, 1.0, 0.1]])


@dataclass
class LlavaConfig:
    image_size: int = 16
    patch_size: int = 4
    vision_hidden: int = 48
    vision_layers: int = 3
    mm_vision_select_layer: int = -2
    hidden_size: int = 64
    num_heads: int = 4
    num_layers: int = 2
    vocab_size: int = 40
    rope_theta: float = 10000.0


class VisionBlock(nn.Module):
    def __init__(self, dim: int, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.layer_norm1, self.layer_norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        B, N, C = x.shape
        q, k, v = self.qkv(self.layer_norm1(x)).view(B, N, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, N, C))
        return x + self.mlp(self.layer_norm2(x))


class CLIPVisionTower(nn.Module):
    def __init__(self, cfg: LlavaConfig):
        super().__init__()
        self.select_layer = cfg.mm_vision_select_layer
        self.patch_embedding = nn.Conv2d(3, cfg.vision_hidden, cfg.patch_size, cfg.patch_size)
        num_patches = (cfg.image_size // cfg.patch_size) ** 2
        self.class_embedding = nn.Parameter(torch.randn(cfg.vision_hidden) * 0.02)
        self.position_embedding = nn.Parameter(
            torch.randn(num_patches + 1, cfg.vision_hidden) * 0.02
        )
        self.pre_layrnorm = nn.LayerNorm(cfg.vision_hidden)
        self.layers = nn.ModuleList(
            VisionBlock(cfg.vision_hidden) for _ in range(cfg.vision_layers)
        )

    def forward(self, images):
        x = self.patch_embedding(images).flatten(2).transpose(1, 2)
        cls = self.class_embedding.expand(x.shape[0], 1, -1)
        x = self.pre_layrnorm(torch.cat([cls, x], dim=1) + self.position_embedding)
        hidden_states = [x]
        for layer in self.layers:
            x = layer(x)
            hidden_states.append(x)
        return hidden_states[self.select_layer][:, 1:]


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def _make_causal_mask(tgt_len: int, dtype, device):
    mask = torch.full((tgt_len, tgt_len), torch.finfo(dtype).min, device=device)
    return mask.triu(1).to(dtype)[None, None]


def _expand_mask(mask: torch.Tensor, dtype):
    inverted_mask = 1.0 - mask[:, None, None, :].to(dtype)
    return inverted_mask.masked_fill(inverted_mask.to(torch.bool), torch.finfo(dtype).min)


def _prepare_4d_causal_attention_mask(attention_mask, input_shape, dtype, device):
    causal_4d_mask = _make_causal_mask(input_shape[-1], dtype, device)
    expanded_attn_mask = _expand_mask(attention_mask, dtype)
    return expanded_attn_mask.masked_fill(causal_4d_mask.bool(), torch.finfo(dtype).min)


class LlamaAttention(nn.Module):
    def __init__(self, cfg: LlavaConfig):
        super().__init__()
        self.num_heads = cfg.num_heads
        self.head_dim = cfg.hidden_size // cfg.num_heads
        self.q_proj = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=False)
        self.o_proj = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=False)

    def forward(self, hidden_states, attention_mask, cos, sin):
        B, T, _ = hidden_states.shape
        shape = (B, T, self.num_heads, self.head_dim)
        q = self.q_proj(hidden_states).view(shape).transpose(1, 2)
        k = self.k_proj(hidden_states).view(shape).transpose(1, 2)
        v = self.v_proj(hidden_states).view(shape).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        attn_weights = q @ k.transpose(2, 3) / math.sqrt(self.head_dim)
        attn_weights = attn_weights + attention_mask
        attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(q.dtype)
        return self.o_proj((attn_weights @ v).transpose(1, 2).reshape(B, T, -1))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, cfg: LlavaConfig):
        super().__init__()
        self.self_attn = LlamaAttention(cfg)
        self.input_layernorm = nn.RMSNorm(cfg.hidden_size, eps=1e-6)
        self.post_attention_layernorm = nn.RMSNorm(cfg.hidden_size, eps=1e-6)
        d = cfg.hidden_size
        self.gate_proj, self.up_proj = (
            nn.Linear(d, 2 * d, bias=False),
            nn.Linear(d, 2 * d, bias=False),
        )
        self.down_proj = nn.Linear(2 * d, d, bias=False)

    def forward(self, x, attention_mask, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), attention_mask, cos, sin)
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class LlamaModel(nn.Module):
    def __init__(self, cfg: LlavaConfig):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size, PAD)
        self.layers = nn.ModuleList(LlamaDecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = nn.RMSNorm(cfg.hidden_size, eps=1e-6)

    def rotary(self, position_ids):
        dim = self.cfg.hidden_size // self.cfg.num_heads
        inv_freq = 1.0 / (self.cfg.rope_theta ** (torch.arange(0, dim, 2).float() / dim))
        emb = (position_ids[..., None].float() * inv_freq).repeat(1, 1, 2)
        return emb.cos()[:, None], emb.sin()[:, None]

    def forward(self, inputs_embeds, attention_mask, position_ids):
        B, T, _ = inputs_embeds.shape
        mask_4d = _prepare_4d_causal_attention_mask(
            attention_mask, (B, T), inputs_embeds.dtype, inputs_embeds.device
        )
        cos, sin = self.rotary(position_ids)
        h = inputs_embeds
        for layer in self.layers:
            h = layer(h, mask_4d, cos, sin)
        return self.norm(h)


class LlavaLlamaForCausalLM(nn.Module):
    def __init__(self, cfg: LlavaConfig, padding_side: str = "right"):
        super().__init__()
        self.padding_side = padding_side
        self.vision_tower = CLIPVisionTower(cfg)
        self.mm_projector = nn.Sequential(
            nn.Linear(cfg.vision_hidden, cfg.hidden_size),
            nn.GELU(),
            nn.Linear(cfg.hidden_size, cfg.hidden_size),
        )
        self.model = LlamaModel(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def prepare_inputs_labels_for_multimodal(self, input_ids, attention_mask, labels, images):
        image_features = self.mm_projector(self.vision_tower(images))
        new_embeds, new_labels = [], []
        for b in range(input_ids.shape[0]):
            ids = input_ids[b][attention_mask[b].bool()]
            lab = labels[b][attention_mask[b].bool()]
            pos = int((ids == IMAGE_TOKEN_INDEX).nonzero()[0])
            text_embeds = self.model.embed_tokens(ids)
            new_embeds.append(
                torch.cat([text_embeds[:pos], image_features[b], text_embeds[pos + 1 :]])
            )
            image_labels = lab.new_full((image_features.shape[1],), IGNORE_INDEX)
            new_labels.append(torch.cat([lab[:pos], image_labels, lab[pos + 1 :]]))
        max_len = max(e.shape[0] for e in new_embeds)
        B, D = len(new_embeds), new_embeds[0].shape[1]
        embeds = torch.zeros(B, max_len, D)
        out_labels = torch.full((B, max_len), IGNORE_INDEX, dtype=torch.long)
        new_mask = torch.zeros(B, max_len, dtype=torch.long)
        position_ids = torch.zeros(B, max_len, dtype=torch.long)
        for b, (e, lab) in enumerate(zip(new_embeds, new_labels)):
            n = e.shape[0]
            sl = slice(max_len - n, max_len) if self.padding_side == "left" else slice(0, n)
            embeds[b, sl], out_labels[b, sl], new_mask[b, sl] = e, lab, 1
            position_ids[b, sl] = torch.arange(n)
        return embeds, new_mask, out_labels, position_ids

    def forward(self, input_ids, attention_mask, labels, images):
        embeds, mask, labels, position_ids = self.prepare_inputs_labels_for_multimodal(
            input_ids, attention_mask, labels, images
        )
        logits = self.lm_head(self.model(embeds, mask, position_ids))
        loss = F.cross_entropy(
            logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=IGNORE_INDEX
        )
        return loss, logits


def make_example(gen: torch.Generator, cfg: LlavaConfig):
    color = int(torch.randint(0, 4, (1,), generator=gen))
    img = torch.rand(3, cfg.image_size, cfg.image_size, generator=gen) * 0.2
    y, x = torch.randint(0, cfg.image_size - 6, (2,), generator=gen).tolist()
    img[:, y : y + 6, x : x + 6] = COLORS[color][:, None, None]
    filler = torch.randint(
        20, 30, (int(torch.randint(0, 4, (1,), generator=gen)),), generator=gen
    ).tolist()
    prompt = [BOS, 10, IMAGE_TOKEN_INDEX, *filler, 11, 12]
    return prompt, [14 + color, EOS], img


def collate(examples, train: bool = True):
    seqs = [p + a if train else p for p, a, _ in examples]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), PAD, dtype=torch.long)
    labels = torch.full((len(seqs), width), IGNORE_INDEX, dtype=torch.long)
    mask = torch.zeros(len(seqs), width, dtype=torch.long)
    for i, ((prompt, answer, _), s) in enumerate(zip(examples, seqs)):
        ids[i, : len(s)], mask[i, : len(s)] = torch.tensor(s), 1
        if train:
            labels[i, len(prompt) : len(s)] = torch.tensor(answer)
    return ids, mask, labels, torch.stack([img for _, _, img in examples])


def main():
    torch.manual_seed(0)
    cfg = LlavaConfig()
    model = LlavaLlamaForCausalLM(cfg)
    gen = torch.Generator().manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for step in range(80):
        ids, mask, labels, images = collate([make_example(gen, cfg) for _ in range(16)])
        loss, _ = model(ids, mask, labels, images)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 20 == 0:
            print(f"step {step}: loss {loss.item():.3f}")
    model.eval()
    model.padding_side = "left"
    test = [make_example(torch.Generator().manual_seed(1000 + i), cfg) for i in range(32)]
    ids, mask, labels, images = collate(test, train=False)
    with torch.no_grad():
        embeds, new_mask, _, position_ids = model.prepare_inputs_labels_for_multimodal(
            ids, mask, labels, images
        )
        logits = model.lm_head(model.model(embeds, new_mask, position_ids))[:, -1]
        mask_4d = _prepare_4d_causal_attention_mask(
            new_mask, new_mask.shape, embeds.dtype, embeds.device
        )
    acc = (logits.argmax(-1) == torch.tensor([a[0] for _, a, _ in test])).float().mean().item()
    inf_cells = int(torch.isinf(mask_4d).sum())
    print(f"colour accuracy {acc:.3f}; -inf cells in the left-padded mask {inf_cells}")


if __name__ == "__main__":
    main()
