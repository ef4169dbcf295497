"""Vision-language model that merges projected image patches into the text sequence.

Follows LLaVA as ported to transformers: a small ViT vision tower produces patch features, the
``MultiModalProjector`` maps them to the language model's width, and
``_merge_input_ids_with_image_features`` expands every ``<image>`` token into the patch
embeddings, building the merged ``attention_mask``, ``labels`` (-100 on image positions and
padding) and ``position_ids``. The language model accepts ``attn_implementation="sdpa"`` or
``"eager"``; ``_update_causal_mask`` turns the 2-D mask into the 4-D mask the layers receive.

Source: conventions.md §1 (HF 4-D masks row) and §2.9, huggingface/transformers#32195, seed self_attention_mask_guide.txt §7 Q3
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class LlavaConfig:
    vocab_size: int = 40
    image_token_index: int = 39
    pad_token_id: int = 0
    image_size: int = 16
    patch_size: int = 8
    vision_hidden_size: int = 32
    text_hidden_size: int = 64
    num_heads: int = 4
    num_layers: int = 2
    ignore_index: int = -100

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2


class VisionTower(nn.Module):
    def __init__(self, cfg: LlavaConfig):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, cfg.vision_hidden_size, cfg.patch_size, stride=cfg.patch_size)
        self.pos = nn.Parameter(torch.randn(1, cfg.num_patches, cfg.vision_hidden_size) * 0.02)
        layer = nn.TransformerEncoderLayer(cfg.vision_hidden_size, 4, 2 * cfg.vision_hidden_size, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=1, enable_nested_tensor=False)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(pixel_values).flatten(2).transpose(1, 2) + self.pos
        return self.encoder(x)


class MultiModalProjector(nn.Module):
    def __init__(self, cfg: LlavaConfig):
        super().__init__()
        self.linear_1 = nn.Linear(cfg.vision_hidden_size, cfg.text_hidden_size)
        self.linear_2 = nn.Linear(cfg.text_hidden_size, cfg.text_hidden_size)

    def forward(self, image_features: torch.Tensor) -> torch.Tensor:
        return self.linear_2(F.gelu(self.linear_1(image_features)))


class LlamaAttention(nn.Module):
    def __init__(self, cfg: LlavaConfig, attn_implementation: str):
        super().__init__()
        self.attn_implementation = attn_implementation
        self.num_heads, self.head_dim = cfg.num_heads, cfg.text_hidden_size // cfg.num_heads
        self.qkv = nn.Linear(cfg.text_hidden_size, 3 * cfg.text_hidden_size, bias=False)
        self.o_proj = nn.Linear(cfg.text_hidden_size, cfg.text_hidden_size, bias=False)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        B, T, C = hidden_states.shape
        q, k, v = (t.view(B, T, self.num_heads, self.head_dim).transpose(1, 2) for t in self.qkv(hidden_states).split(C, -1))
        if self.attn_implementation == "sdpa":
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask)
        else:
            attn_weights = q @ k.transpose(2, 3) / math.sqrt(self.head_dim)
            attn_weights = attn_weights.masked_fill(~attention_mask, torch.finfo(attn_weights.dtype).min)
            out = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(q.dtype) @ v
        return self.o_proj(out.transpose(1, 2).reshape(B, T, C))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, cfg: LlavaConfig, attn_implementation: str):
        super().__init__()
        self.input_layernorm = nn.RMSNorm(cfg.text_hidden_size)
        self.self_attn = LlamaAttention(cfg, attn_implementation)
        self.post_attention_layernorm = nn.RMSNorm(cfg.text_hidden_size)
        self.mlp = nn.Sequential(nn.Linear(cfg.text_hidden_size, 2 * cfg.text_hidden_size), nn.SiLU(), nn.Linear(2 * cfg.text_hidden_size, cfg.text_hidden_size))

    def forward(self, hidden_states, attention_mask):
        hidden_states = hidden_states + self.self_attn(self.input_layernorm(hidden_states), attention_mask=attention_mask)
        return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))


class LlavaForConditionalGeneration(nn.Module):
    def __init__(self, cfg: LlavaConfig, attn_implementation: str = "sdpa"):
        super().__init__()
        self.config = cfg
        self.vision_tower = VisionTower(cfg)
        self.multi_modal_projector = MultiModalProjector(cfg)
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.text_hidden_size)
        self.embed_positions = nn.Embedding(128, cfg.text_hidden_size)
        self.layers = nn.ModuleList(LlamaDecoderLayer(cfg, attn_implementation) for _ in range(cfg.num_layers))
        self.norm = nn.RMSNorm(cfg.text_hidden_size)
        self.lm_head = nn.Linear(cfg.text_hidden_size, cfg.vocab_size, bias=False)

    def set_attn_implementation(self, attn_implementation: str) -> None:
        for layer in self.layers:
            layer.self_attn.attn_implementation = attn_implementation

    def _merge_input_ids_with_image_features(self, image_features, inputs_embeds, input_ids, attention_mask, labels):
        num_images, num_image_patches, embed_dim = image_features.shape
        batch_size, sequence_length = input_ids.shape
        special_image_token_mask = input_ids == self.config.image_token_index
        num_special_image_tokens = special_image_token_mask.sum(dim=-1)
        max_embed_dim = int(num_special_image_tokens.max()) * (num_image_patches - 1) + sequence_length
        batch_indices, non_image_indices = torch.where(~special_image_token_mask)
        new_token_positions = torch.cumsum(special_image_token_mask * (num_image_patches - 1) + 1, -1) - 1
        text_to_overwrite = new_token_positions[batch_indices, non_image_indices]

        final_embedding = torch.zeros(batch_size, max_embed_dim, embed_dim, dtype=inputs_embeds.dtype)
        final_attention_mask = torch.zeros(batch_size, max_embed_dim, dtype=attention_mask.dtype)
        final_labels = torch.full((batch_size, max_embed_dim), self.config.ignore_index, dtype=input_ids.dtype)
        final_embedding[batch_indices, text_to_overwrite] = inputs_embeds[batch_indices, non_image_indices]
        final_attention_mask[batch_indices, text_to_overwrite] = attention_mask[batch_indices, non_image_indices]
        if labels is not None:
            final_labels[batch_indices, text_to_overwrite] = labels[batch_indices, non_image_indices]

        image_to_overwrite = torch.ones(batch_size, max_embed_dim, dtype=torch.bool)
        image_to_overwrite[batch_indices, text_to_overwrite] = False
        image_to_overwrite &= image_to_overwrite.cumsum(-1) - 1 >= (max_embed_dim - new_token_positions[:, -1:] - 1)
        final_embedding[image_to_overwrite] = image_features.reshape(-1, embed_dim)
        final_attention_mask |= image_to_overwrite
        position_ids = (final_attention_mask.cumsum(-1) - 1).masked_fill(final_attention_mask == 0, 1)
        return final_embedding, final_attention_mask, final_labels, position_ids

    def _update_causal_mask(self, attention_mask: torch.Tensor) -> torch.Tensor:
        T = attention_mask.shape[1]
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        padded_rows = ~attention_mask.bool()[:, :, None]
        return (causal[None] & attention_mask.bool()[:, None, :] | padded_rows & torch.eye(T, dtype=torch.bool))[:, None]

    def forward(self, input_ids, pixel_values, attention_mask, labels=None):
        inputs_embeds = self.embed_tokens(input_ids.masked_fill(input_ids == self.config.image_token_index, 0))
        image_features = self.multi_modal_projector(self.vision_tower(pixel_values))
        inputs_embeds, attention_mask, labels, position_ids = self._merge_input_ids_with_image_features(
            image_features, inputs_embeds, input_ids, attention_mask, labels
        )
        hidden_states = inputs_embeds + self.embed_positions(position_ids)
        causal_mask = self._update_causal_mask(attention_mask)
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask=causal_mask)
        logits = self.lm_head(self.norm(hidden_states))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1), ignore_index=-100)
        return {"loss": loss, "logits": logits, "attention_mask": attention_mask}


def make_batch(n: int, cfg: LlavaConfig, g: torch.Generator) -> dict:
    colours = torch.randint(0, 3, (n,), generator=g)
    pixel_values = torch.randn(n, 3, cfg.image_size, cfg.image_size, generator=g) * 0.1
    pixel_values[torch.arange(n), colours] += 1.0
    rows = []
    for i in range(n):
        question = torch.randint(4, 30, (int(torch.randint(1, 6, (1,), generator=g)),), generator=g).tolist()
        rows.append(([1, cfg.image_token_index] + question + [2], [31 + int(colours[i]), 3]))
    width = max(len(p) + len(a) for p, a in rows)
    input_ids = torch.full((n, width), cfg.pad_token_id)
    attention_mask = torch.zeros(n, width, dtype=torch.long)
    labels = torch.full((n, width), -100)
    for i, (prompt, answer) in enumerate(rows):
        seq = prompt + answer
        input_ids[i, : len(seq)] = torch.tensor(seq)
        attention_mask[i, : len(seq)] = 1
        labels[i, len(prompt) : len(seq)] = torch.tensor(answer)
    return {"input_ids": input_ids, "pixel_values": pixel_values, "attention_mask": attention_mask, "labels": labels}


def main() -> None:
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    cfg = LlavaConfig()
    model = LlavaForConditionalGeneration(cfg, attn_implementation="sdpa")
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(60):
        out = model(**make_batch(16, cfg, g))
        optimizer.zero_grad()
        out["loss"].backward()
        optimizer.step()
        if step % 20 == 0 or step == 59:
            print(f"step {step:2d} loss {out['loss'].item():.4f}")

    model.eval()
    batch = make_batch(64, cfg, g)
    with torch.no_grad():
        sdpa = model(**batch)
        model.set_attn_implementation("eager")
        eager = model(**batch)
    real = sdpa["attention_mask"].bool()
    print(f"eager vs sdpa on real tokens: {(eager['logits'] - sdpa['logits'])[real].abs().max().item():.3g}")
    changed = dict(batch, input_ids=batch["input_ids"].masked_fill(batch["input_ids"] == 3, 5))
    with torch.no_grad():
        eager_changed = model(**changed)["logits"]
    before = (batch["labels"] == -100).float().cumprod(-1).sum(-1).long() + cfg.num_patches - 1
    early = torch.arange(eager_changed.shape[1])[None] < before[:, None]
    print(f"eager: changing the last answer token moves earlier logits by {(eager_changed - eager['logits'])[early].abs().max().item():.3g}")
    for name, out in (("sdpa", sdpa), ("eager", eager)):
        answer_pos = (batch["labels"] != -100).float().argmax(-1) - 1 + cfg.num_patches - 1
        pred = out["logits"][torch.arange(64), answer_pos].argmax(-1)
        accuracy = (pred == batch["labels"].max(-1).values).float().mean().item()
        print(f"{name}: colour answered correctly for {accuracy:.2f} of images")


if __name__ == "__main__":
    main()
