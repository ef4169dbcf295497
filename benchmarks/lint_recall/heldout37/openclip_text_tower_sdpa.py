"""CLIP contrastive pretraining and zero-shot classification (open_clip layout).

Source: rasbt/LLMs-from-scratch#1061 (conventions.md §3 item 14), pytorch/pytorch#29546
(conventions.md §3 item 9), conventions.md §1 (SDPA row, direction cheat-sheet).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class CLIPTextCfg:
    context_length: int = 16
    vocab_size: int = 128
    width: int = 64
    heads: int = 4
    layers: int = 2
    pad_id: int = 0
    sot_id: int = 126
    eot_id: int = 127


@dataclass
class CLIPVisionCfg:
    image_size: int = 16
    patch_size: int = 4
    width: int = 64
    heads: int = 4
    layers: int = 2


@dataclass
class CLIPConfig:
    embed_dim: int = 32
    text_cfg: CLIPTextCfg = field(default_factory=CLIPTextCfg)
    vision_cfg: CLIPVisionCfg = field(default_factory=CLIPVisionCfg)


def tokenize(texts: list[str], cfg: CLIPTextCfg) -> torch.Tensor:
    result = torch.full((len(texts), cfg.context_length), cfg.pad_id, dtype=torch.long)
    for i, text in enumerate(texts):
        words = [1 + (sum(map(ord, w)) * 31) % (cfg.vocab_size - 3) for w in text.lower().split()]
        tokens = [cfg.sot_id, *words[: cfg.context_length - 2], cfg.eot_id]
        result[i, : len(tokens)] = torch.tensor(tokens)
    return result


def build_causal_mask(num_pos: int) -> torch.Tensor:
    return torch.triu(torch.ones(num_pos, num_pos, dtype=torch.bool), diagonal=1)  # expect: MC521 clip


class Attention(nn.Module):
    def __init__(self, dim: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.in_proj = nn.Linear(dim, 3 * dim)
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        n, seq, c = x.shape
        q, k, v = self.in_proj(x).view(n, seq, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        x = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        return self.out_proj(x.transpose(1, 2).reshape(n, seq, c))


class ResidualAttentionBlock(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = Attention(width, heads)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), attn_mask=attn_mask)
        return x + self.mlp(self.ln_2(x))


class Transformer(nn.Module):
    def __init__(self, width: int, layers: int, heads: int) -> None:
        super().__init__()
        self.resblocks = nn.ModuleList(ResidualAttentionBlock(width, heads) for _ in range(layers))

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        for r in self.resblocks:
            x = r(x, attn_mask=attn_mask)
        return x


class VisionTransformer(nn.Module):
    def __init__(self, cfg: CLIPVisionCfg, output_dim: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, cfg.width, cfg.patch_size, stride=cfg.patch_size, bias=False)
        grid = cfg.image_size // cfg.patch_size
        self.class_embedding = nn.Parameter(torch.randn(cfg.width) * cfg.width**-0.5)
        self.positional_embedding = nn.Parameter(torch.randn(grid * grid + 1, cfg.width) * 0.02)
        self.ln_pre = nn.LayerNorm(cfg.width)
        self.transformer = Transformer(cfg.width, cfg.layers, cfg.heads)
        self.ln_post = nn.LayerNorm(cfg.width)
        self.proj = nn.Parameter(cfg.width**-0.5 * torch.randn(cfg.width, output_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv1(x).flatten(2).transpose(1, 2)
        cls = self.class_embedding.expand(x.shape[0], 1, -1)
        x = self.ln_pre(torch.cat([cls, x], dim=1) + self.positional_embedding)
        x = self.transformer(x)
        return self.ln_post(x[:, 0]) @ self.proj


class TextTransformer(nn.Module):
    def __init__(self, cfg: CLIPTextCfg, output_dim: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.token_embedding = nn.Embedding(cfg.vocab_size, cfg.width)
        self.positional_embedding = nn.Parameter(torch.randn(cfg.context_length, cfg.width) * 0.01)
        self.transformer = Transformer(cfg.width, cfg.layers, cfg.heads)
        self.ln_final = nn.LayerNorm(cfg.width)
        self.text_projection = nn.Parameter(cfg.width**-0.5 * torch.randn(cfg.width, output_dim))
        self.register_buffer("attn_mask", build_causal_mask(cfg.context_length), persistent=False)

    def forward(self, text: torch.Tensor) -> torch.Tensor:
        seq_len = text.shape[1]
        x = self.token_embedding(text) + self.positional_embedding[:seq_len]
        x = self.transformer(x, attn_mask=self.attn_mask[:seq_len, :seq_len])
        x = self.ln_final(x)
        pooled = x[torch.arange(x.shape[0]), text.argmax(dim=-1)]
        return pooled @ self.text_projection


class CLIP(nn.Module):
    def __init__(self, cfg: CLIPConfig) -> None:
        super().__init__()
        self.visual = VisionTransformer(cfg.vision_cfg, cfg.embed_dim)
        self.text = TextTransformer(cfg.text_cfg, cfg.embed_dim)
        self.logit_scale = nn.Parameter(torch.tensor(2.659))

    def encode_image(self, image: torch.Tensor, normalize: bool = False) -> torch.Tensor:
        features = self.visual(image)
        return F.normalize(features, dim=-1) if normalize else features

    def encode_text(self, text: torch.Tensor, normalize: bool = False) -> torch.Tensor:
        features = self.text(text)
        return F.normalize(features, dim=-1) if normalize else features

    def forward(self, image: torch.Tensor, text: torch.Tensor):
        return (
            self.encode_image(image, normalize=True),
            self.encode_text(text, normalize=True),
            self.logit_scale.exp(),
        )


class ClipLoss(nn.Module):
    def forward(self, image_features, text_features, logit_scale):
        logits_per_image = logit_scale * image_features @ text_features.T
        labels = torch.arange(logits_per_image.shape[0])
        return (
            F.cross_entropy(logits_per_image, labels) + F.cross_entropy(logits_per_image.T, labels)
        ) / 2


CLASSNAMES = ["red", "green", "blue", "white"]
TEMPLATES = ["a photo of a {} thing", "a {} square", "{}", "a blurry photo of something {}"]
COLORS = torch.tensor([[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0], [1.0, 1.0, 1.0]])


def synthetic_pairs(n: int, size: int, gen: torch.Generator):
    labels = torch.randint(0, len(CLASSNAMES), (n,), generator=gen)
    images = 0.3 * torch.randn(n, 3, size, size, generator=gen)
    images = images + COLORS[labels][:, :, None, None]
    captions = [TEMPLATES[i % len(TEMPLATES)].format(CLASSNAMES[c]) for i, c in enumerate(labels)]
    return images, captions, labels


@torch.no_grad()
def zero_shot_classifier(model: CLIP, cfg: CLIPTextCfg) -> torch.Tensor:
    weights = []
    for name in CLASSNAMES:
        texts = tokenize([t.format(name) for t in TEMPLATES], cfg)
        emb = model.encode_text(texts, normalize=True).mean(dim=0)
        weights.append(F.normalize(emb, dim=-1))
    return torch.stack(weights, dim=1)


def main() -> None:
    torch.manual_seed(0)
    cfg = CLIPConfig()
    model, loss_fn = CLIP(cfg), ClipLoss()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.1)
    gen = torch.Generator().manual_seed(1)
    for step in range(150):
        images, captions, _ = synthetic_pairs(32, cfg.vision_cfg.image_size, gen)
        text = tokenize(captions, cfg.text_cfg)
        loss = loss_fn(*model(images, text))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        with torch.no_grad():
            model.logit_scale.clamp_(0, 4.6052)
        if step % 50 == 0:
            print(f"step {step} contrastive loss {loss.item():.3f}")
    model.eval()
    classifier = zero_shot_classifier(model, cfg.text_cfg)
    images, _, labels = synthetic_pairs(256, cfg.vision_cfg.image_size, gen)
    with torch.no_grad():
        logits = 100.0 * model.encode_image(images, normalize=True) @ classifier
    print("zero-shot top-1", (logits.argmax(dim=-1) == labels).float().mean().item())
    single = tokenize(["a red square"], cfg.text_cfg)
    padded = torch.cat([single, tokenize(["a blurry photo of something white"], cfg.text_cfg)])
    with torch.no_grad():
        alone, batched = model.encode_text(single), model.encode_text(padded)[:1]
    print("text alone vs batched", (alone - batched).abs().max().item())


if __name__ == "__main__":
    main()
