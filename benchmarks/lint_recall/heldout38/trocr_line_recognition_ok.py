"""TrOCR-style text-line recognition: a ViT encoder over variable-width line images and an
autoregressive decoder with cross-attention.

Layout after microsoft/unilm's TrOCR and its transformers port (`VisionEncoderDecoderModel`
with `TrOCRForCausalLM`): patch embedding of the line image, encoder self-attention over the
patches of each line (lines of a batch padded to the widest, with a `pixel_mask` per patch),
`TrOCRAttention` used for causal self-attention and for cross-attention to the encoder
states, `TrOCRLearnedPositionalEmbedding` with its offset of 2, `shift_tokens_right` for the
decoder inputs, -100 labels, greedy `generate` and character error rate. The "font" is a set
of random 8x4 glyphs.

Source: seed masked_fill_inplace.txt (区别, 非原地操作).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD, BOS, EOS = 0, 1, 2
FIRST_CHAR = 3


@dataclass
class TrOCRConfig:
    num_chars: int = 16
    glyph_height: int = 8
    glyph_width: int = 4
    patch_width: int = 2
    d_model: int = 64
    heads: int = 4
    encoder_layers: int = 2
    decoder_layers: int = 2
    max_target_positions: int = 16

    @property
    def vocab_size(self) -> int:
        return FIRST_CHAR + self.num_chars


class ViTLayer(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, patch_keep):
        B, N, C = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(B, N, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=patch_keep[:, None, None, :])
        x = x + self.proj(out.transpose(1, 2).reshape(B, N, C))
        return x + self.mlp(self.norm2(x))


class ViTEncoder(nn.Module):
    def __init__(self, cfg: TrOCRConfig):
        super().__init__()
        self.patch_embed = nn.Conv2d(
            1, cfg.d_model, (cfg.glyph_height, cfg.patch_width), (cfg.glyph_height, cfg.patch_width)
        )
        max_patches = cfg.max_target_positions * cfg.glyph_width // cfg.patch_width
        self.pos_embed = nn.Parameter(torch.randn(1, max_patches, cfg.d_model) * 0.02)
        self.layers = nn.ModuleList(
            ViTLayer(cfg.d_model, cfg.heads) for _ in range(cfg.encoder_layers)
        )
        self.norm = nn.LayerNorm(cfg.d_model)

    def forward(self, pixel_values, patch_keep):
        x = self.patch_embed(pixel_values).flatten(2).transpose(1, 2)
        x = x + self.pos_embed[:, : x.shape[1]]
        for layer in self.layers:
            x = layer(x, patch_keep)
        return self.norm(x)


class TrOCRLearnedPositionalEmbedding(nn.Embedding):
    def __init__(self, num_embeddings: int, embedding_dim: int):
        self.offset = 2
        super().__init__(num_embeddings + self.offset, embedding_dim)

    def forward(self, input_ids):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        return super().forward(positions + self.offset)


class TrOCRAttention(nn.Module):
    def __init__(self, embed_dim: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim**-0.5
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def _shape(self, x):
        return x.view(x.shape[0], x.shape[1], self.num_heads, self.head_dim).transpose(1, 2)

    def forward(
        self, hidden_states, key_value_states=None, causal_mask=None, key_padding_mask=None
    ):
        kv = hidden_states if key_value_states is None else key_value_states
        query_states = self._shape(self.q_proj(hidden_states) * self.scaling)
        key_states = self._shape(self.k_proj(kv))
        value_states = self._shape(self.v_proj(kv))
        attn_weights = query_states @ key_states.transpose(-1, -2)
        if causal_mask is not None:
            attn_weights = attn_weights + causal_mask
        if key_padding_mask is not None:
            attn_weights = attn_weights.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
        attn_probs = F.softmax(attn_weights, dim=-1)
        attn_output = (attn_probs @ value_states).transpose(1, 2).reshape(hidden_states.shape)
        return self.out_proj(attn_output)


class TrOCRDecoderLayer(nn.Module):
    def __init__(self, cfg: TrOCRConfig):
        super().__init__()
        d = cfg.d_model
        self.self_attn = TrOCRAttention(d, cfg.heads)
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.encoder_attn = TrOCRAttention(d, cfg.heads)
        self.encoder_attn_layer_norm = nn.LayerNorm(d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.final_layer_norm = nn.LayerNorm(d)

    def forward(self, hidden_states, causal_mask, encoder_hidden_states, encoder_padding_mask):
        h = self.self_attn(hidden_states, causal_mask=causal_mask)
        hidden_states = self.self_attn_layer_norm(hidden_states + h)
        h = self.encoder_attn(
            hidden_states, encoder_hidden_states, key_padding_mask=encoder_padding_mask
        )
        hidden_states = self.encoder_attn_layer_norm(hidden_states + h)
        h = self.fc2(F.gelu(self.fc1(hidden_states)))
        return self.final_layer_norm(hidden_states + h)


class TrOCRForCausalLM(nn.Module):
    def __init__(self, cfg: TrOCRConfig):
        super().__init__()
        self.embed_scale = math.sqrt(cfg.d_model)
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.d_model, PAD)
        self.embed_positions = TrOCRLearnedPositionalEmbedding(
            cfg.max_target_positions, cfg.d_model
        )
        self.layernorm_embedding = nn.LayerNorm(cfg.d_model)
        self.layers = nn.ModuleList(TrOCRDecoderLayer(cfg) for _ in range(cfg.decoder_layers))
        self.output_projection = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def forward(self, input_ids, encoder_hidden_states, encoder_padding_mask):
        T = input_ids.shape[1]
        h = self.embed_tokens(input_ids) * self.embed_scale + self.embed_positions(input_ids)
        h = self.layernorm_embedding(h)
        causal_mask = torch.full((T, T), float("-inf"), device=h.device).triu(1)
        for layer in self.layers:
            h = layer(h, causal_mask, encoder_hidden_states, encoder_padding_mask)
        return self.output_projection(h)


def shift_tokens_right(labels, pad_token_id, decoder_start_token_id):
    shifted = labels.new_zeros(labels.shape)
    shifted[:, 1:] = labels[:, :-1].clone()
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill(shifted == -100, pad_token_id)


class VisionEncoderDecoderModel(nn.Module):
    def __init__(self, cfg: TrOCRConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder = ViTEncoder(cfg)
        self.decoder = TrOCRForCausalLM(cfg)

    def encode(self, pixel_values, pixel_mask):
        return self.encoder(pixel_values, pixel_mask), ~pixel_mask

    def forward(self, pixel_values, pixel_mask, labels):
        encoder_hidden_states, encoder_padding_mask = self.encode(pixel_values, pixel_mask)
        decoder_input_ids = shift_tokens_right(labels, PAD, BOS)
        logits = self.decoder(decoder_input_ids, encoder_hidden_states, encoder_padding_mask)
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100), logits

    @torch.no_grad()
    def generate(self, pixel_values, pixel_mask, max_length: int = 10):
        encoder_hidden_states, encoder_padding_mask = self.encode(pixel_values, pixel_mask)
        ids = torch.full((pixel_values.shape[0], 1), BOS, dtype=torch.long)
        for _ in range(max_length):
            logits = self.decoder(ids, encoder_hidden_states, encoder_padding_mask)
            ids = torch.cat([ids, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        return ids[:, 1:]


class LineRenderer:
    def __init__(self, cfg: TrOCRConfig, seed: int = 0):
        gen = torch.Generator().manual_seed(seed)
        self.cfg = cfg
        self.glyphs = (
            torch.rand(cfg.num_chars, cfg.glyph_height, cfg.glyph_width, generator=gen) > 0.5
        ).float()

    def batch(self, texts: list[list[int]], gen: torch.Generator):
        cfg = self.cfg
        width = max(len(t) for t in texts) * cfg.glyph_width
        pixels = torch.zeros(len(texts), 1, cfg.glyph_height, width)
        pixel_mask = torch.zeros(len(texts), width // cfg.patch_width, dtype=torch.bool)
        labels = torch.full((len(texts), max(len(t) for t in texts) + 1), -100, dtype=torch.long)
        for i, text in enumerate(texts):
            line = torch.cat([self.glyphs[c] for c in text], dim=1)
            pixels[i, 0, :, : line.shape[1]] = line + 0.2 * torch.randn(line.shape, generator=gen)
            pixel_mask[i, : line.shape[1] // cfg.patch_width] = True
            labels[i, : len(text) + 1] = torch.tensor([FIRST_CHAR + c for c in text] + [EOS])
        return pixels, pixel_mask, labels


def edit_distance(a: list[int], b: list[int]) -> int:
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


def decode(ids: list[int]) -> list[int]:
    out = []
    for t in ids:
        if t == EOS:
            break
        out.append(t - FIRST_CHAR)
    return out


def main():
    torch.manual_seed(0)
    cfg = TrOCRConfig()
    model = VisionEncoderDecoderModel(cfg)
    renderer = LineRenderer(cfg)
    gen = torch.Generator().manual_seed(1)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for step in range(300):
        texts = [
            torch.randint(
                0, cfg.num_chars, (int(torch.randint(2, 9, (1,), generator=gen)),), generator=gen
            ).tolist()
            for _ in range(16)
        ]
        loss, _ = model(*renderer.batch(texts, gen))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0:
            print(f"step {step}: loss {loss.item():.3f}")
    model.eval()
    test_gen = torch.Generator().manual_seed(2)
    texts = [
        torch.randint(0, cfg.num_chars, (n,), generator=test_gen).tolist()
        for n in (2, 3, 5, 8, 4, 7, 6, 8)
    ]
    pixels, pixel_mask, labels = renderer.batch(texts, test_gen)
    preds = model.generate(pixels, pixel_mask)
    errors = sum(edit_distance(decode(p.tolist()), t) for p, t in zip(preds, texts))
    print(f"character error rate {errors / sum(len(t) for t in texts):.3f}")
    with torch.no_grad():
        _, batched = model(pixels, pixel_mask, labels)
        width = len(texts[0]) * cfg.glyph_width
        _, alone = model(
            pixels[:1, :, :, :width], pixel_mask[:1, : width // cfg.patch_width], labels[:1]
        )
    n = len(texts[0]) + 1
    gap = (batched[0, :n] - alone[0, :n]).abs().max().item()
    print(f"shortest line alone vs padded in the batch {gap:.2e}")


if __name__ == "__main__":
    main()
