"""CLIP fine-tuning on COCO-style data with several captions per image.

A small open_clip-like image/text model trained with a symmetric contrastive
loss; every caption of an image is a positive for it, and images may come with
fewer than five captions.

Source: seed masked_fill_inplace.txt (注意: 梯度计算风险), conventions.md §2.3.
"""
import sys
from collections import OrderedDict

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

CONTEXT_LENGTH = 16
VOCAB_SIZE = 512
CAPTIONS_PER_IMAGE = 5


def tokenize(texts, context_length=CONTEXT_LENGTH):
    sot_token, eot_token = VOCAB_SIZE - 2, VOCAB_SIZE - 1
    result = torch.zeros(len(texts), context_length, dtype=torch.long)
    for i, text in enumerate(texts):
        ids = [sum(map(ord, w)) % (VOCAB_SIZE - 3) + 1 for w in text.lower().split()]
        tokens = [sot_token] + ids[: context_length - 2] + [eot_token]
        result[i, : len(tokens)] = torch.tensor(tokens)
    return result


class ResidualAttentionBlock(nn.Module):
    def __init__(self, d_model, n_head, attn_mask=None):
        super().__init__()
        self.attn = nn.MultiheadAttention(d_model, n_head)
        self.ln_1 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(OrderedDict([
            ("c_fc", nn.Linear(d_model, d_model * 4)),
            ("gelu", nn.GELU()),
            ("c_proj", nn.Linear(d_model * 4, d_model)),
        ]))
        self.ln_2 = nn.LayerNorm(d_model)
        self.attn_mask = attn_mask

    def attention(self, x):
        mask = self.attn_mask.to(dtype=x.dtype, device=x.device) if self.attn_mask is not None else None
        return self.attn(x, x, x, need_weights=False, attn_mask=mask)[0]

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class Transformer(nn.Module):
    def __init__(self, width, layers, heads, attn_mask=None):
        super().__init__()
        self.resblocks = nn.Sequential(*[ResidualAttentionBlock(width, heads, attn_mask) for _ in range(layers)])

    def forward(self, x):
        return self.resblocks(x)


class VisionTransformer(nn.Module):
    def __init__(self, image_size, patch_size, width, layers, heads, output_dim):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, kernel_size=patch_size, stride=patch_size, bias=False)
        scale = width ** -0.5
        self.class_embedding = nn.Parameter(scale * torch.randn(width))
        self.positional_embedding = nn.Parameter(scale * torch.randn((image_size // patch_size) ** 2 + 1, width))
        self.ln_pre = nn.LayerNorm(width)
        self.transformer = Transformer(width, layers, heads)
        self.ln_post = nn.LayerNorm(width)
        self.proj = nn.Parameter(scale * torch.randn(width, output_dim))

    def forward(self, x):
        x = self.conv1(x).flatten(2).permute(0, 2, 1)
        cls = self.class_embedding.to(x.dtype) + torch.zeros(x.shape[0], 1, x.shape[-1], dtype=x.dtype)
        x = torch.cat([cls, x], dim=1) + self.positional_embedding
        x = self.ln_pre(x).permute(1, 0, 2)
        x = self.transformer(x).permute(1, 0, 2)
        return self.ln_post(x[:, 0, :]) @ self.proj


class CLIP(nn.Module):
    def __init__(self, embed_dim=32, image_size=32, width=48, layers=2, heads=4):
        super().__init__()
        self.visual = VisionTransformer(image_size, 8, width, layers, heads, embed_dim)
        self.transformer = Transformer(width, layers, heads, attn_mask=self.build_attention_mask())
        self.token_embedding = nn.Embedding(VOCAB_SIZE, width)
        self.positional_embedding = nn.Parameter(torch.empty(CONTEXT_LENGTH, width).normal_(std=0.01))
        self.ln_final = nn.LayerNorm(width)
        self.text_projection = nn.Parameter(torch.empty(width, embed_dim).normal_(std=width ** -0.5))
        self.logit_scale = nn.Parameter(torch.ones([]) * np.log(1 / 0.07))

    def build_attention_mask(self):
        mask = torch.empty(CONTEXT_LENGTH, CONTEXT_LENGTH)
        mask.fill_(float("-inf"))
        mask.triu_(1)
        return mask

    def encode_image(self, image):
        return self.visual(image)

    def encode_text(self, text):
        x = self.token_embedding(text) + self.positional_embedding
        x = self.transformer(x.permute(1, 0, 2)).permute(1, 0, 2)
        x = self.ln_final(x)
        return x[torch.arange(x.shape[0]), text.argmax(dim=-1)] @ self.text_projection

    def forward(self, image, text):
        image_features = F.normalize(self.encode_image(image), dim=-1)
        text_features = F.normalize(self.encode_text(text), dim=-1)
        return image_features, text_features, self.logit_scale.exp()


class MultiPositiveClipLoss(nn.Module):
    def forward(self, image_features, text_features, logit_scale, caption_owner, caption_valid):
        logits_per_image = logit_scale * image_features @ text_features.t()
        logits_per_text = logits_per_image.t()[caption_valid]
        loss_t = F.cross_entropy(logits_per_text, caption_owner[caption_valid])
        positive = caption_owner[None, :] == torch.arange(image_features.shape[0])[:, None]
        positive = positive & caption_valid[None, :]
        logits_per_image = logits_per_image.masked_fill(~caption_valid[None, :], float("-inf"))
        log_probs = logits_per_image.log_softmax(dim=-1)
        log_probs.masked_fill_(~positive, 0.0)  # expect: MC505 inplace
        loss_i = -(log_probs.sum(dim=-1) / positive.sum(dim=-1).clamp(min=1))
        return (loss_i.mean() + loss_t) / 2


def collate(samples):
    images, captions, owner, valid = [], [], [], []
    for idx, (image, caps) in enumerate(samples):
        images.append(image)
        caps = caps[:CAPTIONS_PER_IMAGE]
        padded = caps + [""] * (CAPTIONS_PER_IMAGE - len(caps))
        captions.extend(padded)
        owner.extend([idx] * CAPTIONS_PER_IMAGE)
        valid.extend([True] * len(caps) + [False] * (CAPTIONS_PER_IMAGE - len(caps)))
    return {
        "image": torch.stack(images),
        "text": tokenize(captions),
        "caption_owner": torch.tensor(owner),
        "caption_valid": torch.tensor(valid),
    }


def train_step(model, loss_fn, optimizer, batch):
    model.train()
    image_features, text_features, scale = model(batch["image"], batch["text"])
    loss = loss_fn(image_features, text_features, scale, batch["caption_owner"], batch["caption_valid"])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    with torch.no_grad():
        model.logit_scale.clamp_(0, np.log(100))
    return loss.item()


@torch.no_grad()
def evaluate(model, loss_fn, batch):
    model.eval()
    image_features, text_features, scale = model(batch["image"], batch["text"])
    loss = loss_fn(image_features, text_features, scale, batch["caption_owner"], batch["caption_valid"])
    sims = image_features @ text_features.t()
    top1 = batch["caption_owner"][sims.argmax(dim=-1)] == torch.arange(sims.shape[0])
    return loss.item(), top1.float().mean().item()


if __name__ == "__main__":
    torch.manual_seed(0)
    samples = [
        (torch.randn(3, 32, 32), ["a cat on a sofa", "a sleeping cat", "cat and cushions"]),
        (torch.randn(3, 32, 32), ["two dogs run", "dogs in a park", "a park with dogs", "running dogs", "dog race"]),
        (torch.randn(3, 32, 32), ["a red bus", "bus on the street"]),
    ]
    batch = collate(samples)
    model = CLIP()
    loss_fn = MultiPositiveClipLoss()
    loss, acc = evaluate(model, loss_fn, batch)
    print(f"val loss {loss:.4f} image->text R@1 {acc:.2f}")
    if "--train" in sys.argv:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for step in range(3):
            print(f"step {step} loss {train_step(model, loss_fn, optimizer, batch):.4f}")
