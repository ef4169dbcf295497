"""Crop pest identification with a CLIP fine-tuned on taxonomic names (BioCLIP style).

Imitates Imageomics/bioclip, which trains mlfoundations/open_clip on TreeOfLife images with
taxonomic captions: open_clip's `CLIP` with `encode_image` / `encode_text`, a
`VisionTransformer` (`conv1` patchify, `class_embedding`, `ln_pre`, `ln_post`, `proj`), a
`TextTransformer`-style text tower with a causal `attn_mask` buffer from `build_causal_mask`,
`ResidualAttentionBlock` with `ln_1` / `ln_2`, `nn.MultiheadAttention` over (L, N, D) and the
`c_fc` / `gelu` / `c_proj` MLP, EOT pooling by `argmax`, `ClipLoss`, and zero-shot
classification from a template over the full taxonomic string ("a photo of Animalia Arthropoda
Insecta Lepidoptera Noctuidae Helicoverpa armigera").
Synthetic data: 32 x 32 sticky-trap / leaf images of six IP102 pests, each with its own
colour and texture, fine-tuned and then evaluated zero-shot on held-out images.

Source: seed self_attention_mask_guide.txt §3 (generate_causal_mask), pytorch/pytorch#103749
(conventions.md §3 item 5), conventions.md §2.3 and §1 (nn.Transformer row).
"""

from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

PESTS = {
    "rice leaf roller": "Animalia Arthropoda Insecta Lepidoptera Crambidae Cnaphalocrocis medinalis",
    "brown plant hopper": "Animalia Arthropoda Insecta Hemiptera Delphacidae Nilaparvata lugens",
    "asiatic corn borer": "Animalia Arthropoda Insecta Lepidoptera Crambidae Ostrinia furnacalis",
    "cotton bollworm": "Animalia Arthropoda Insecta Lepidoptera Noctuidae Helicoverpa armigera",
    "cotton aphid": "Animalia Arthropoda Insecta Hemiptera Aphididae Aphis gossypii",
    "red spider mite": "Animalia Arthropoda Arachnida Trombidiformes Tetranychidae Tetranychus cinnabarinus",
}
TEMPLATE = "a photo of {}"


class SimpleTokenizer:
    def __init__(self, texts, context_length=16):
        words = sorted({w for t in texts for w in t.lower().split()})
        self.encoder = {w: i + 1 for i, w in enumerate(words)}
        self.sot_token = len(self.encoder) + 1
        self.eot_token = len(self.encoder) + 2
        self.vocab_size = len(self.encoder) + 3
        self.context_length = context_length

    def __call__(self, texts):
        result = torch.zeros(len(texts), self.context_length, dtype=torch.long)
        for i, text in enumerate(texts):
            tokens = [self.sot_token] + [self.encoder[w] for w in text.lower().split()]
            tokens = tokens[: self.context_length - 1] + [self.eot_token]
            result[i, : len(tokens)] = torch.tensor(tokens)
        return result


class ResidualAttentionBlock(nn.Module):
    def __init__(self, d_model, n_head, mlp_ratio=4.0, act_layer=nn.GELU):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = nn.MultiheadAttention(d_model, n_head)
        self.ln_2 = nn.LayerNorm(d_model)
        mlp_width = int(d_model * mlp_ratio)
        self.mlp = nn.Sequential(OrderedDict([
            ("c_fc", nn.Linear(d_model, mlp_width)),
            ("gelu", act_layer()),
            ("c_proj", nn.Linear(mlp_width, d_model)),
        ]))

    def attention(self, x, attn_mask=None):
        attn_mask = attn_mask.to(x.dtype) if attn_mask is not None else None
        return self.attn(x, x, x, need_weights=False, attn_mask=attn_mask)[0]

    def forward(self, x, attn_mask=None):
        x = x + self.attention(self.ln_1(x), attn_mask=attn_mask)
        x = x + self.mlp(self.ln_2(x))
        return x


class Transformer(nn.Module):
    def __init__(self, width, layers, heads, mlp_ratio=4.0):
        super().__init__()
        self.width = width
        self.layers = layers
        self.resblocks = nn.ModuleList(
            [ResidualAttentionBlock(width, heads, mlp_ratio) for _ in range(layers)])

    def forward(self, x, attn_mask=None):
        for r in self.resblocks:
            x = r(x, attn_mask=attn_mask)
        return x


class VisionTransformer(nn.Module):
    def __init__(self, image_size, patch_size, width, layers, heads, output_dim):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, kernel_size=patch_size, stride=patch_size, bias=False)
        scale = width ** -0.5
        grid = image_size // patch_size
        self.class_embedding = nn.Parameter(scale * torch.randn(width))
        self.positional_embedding = nn.Parameter(scale * torch.randn(grid * grid + 1, width))
        self.ln_pre = nn.LayerNorm(width)
        self.transformer = Transformer(width, layers, heads)
        self.ln_post = nn.LayerNorm(width)
        self.proj = nn.Parameter(scale * torch.randn(width, output_dim))

    def forward(self, x):
        x = self.conv1(x)
        x = x.reshape(x.shape[0], x.shape[1], -1).permute(0, 2, 1)
        cls = self.class_embedding.to(x.dtype) + torch.zeros(x.shape[0], 1, x.shape[-1], dtype=x.dtype)
        x = torch.cat([cls, x], dim=1)
        x = self.ln_pre(x + self.positional_embedding.to(x.dtype))
        x = self.transformer(x.permute(1, 0, 2)).permute(1, 0, 2)
        return self.ln_post(x[:, 0]) @ self.proj


class CLIP(nn.Module):
    def __init__(self, embed_dim, vision_cfg, text_cfg):
        super().__init__()
        self.visual = VisionTransformer(output_dim=embed_dim, **vision_cfg)
        self.context_length = text_cfg["context_length"]
        self.vocab_size = text_cfg["vocab_size"]
        width = text_cfg["width"]
        self.token_embedding = nn.Embedding(self.vocab_size, width)
        self.positional_embedding = nn.Parameter(torch.empty(self.context_length, width))
        self.transformer = Transformer(width, text_cfg["layers"], text_cfg["heads"])
        self.ln_final = nn.LayerNorm(width)
        self.text_projection = nn.Parameter(torch.empty(width, embed_dim))
        self.logit_scale = nn.Parameter(torch.ones([]) * np.log(1 / 0.07))
        self.register_buffer("attn_mask", self.build_attention_mask(), persistent=False)
        nn.init.normal_(self.token_embedding.weight, std=0.02)
        nn.init.normal_(self.positional_embedding, std=0.01)
        nn.init.normal_(self.text_projection, std=width ** -0.5)

    def build_attention_mask(self):
        mask = torch.empty(self.context_length, self.context_length)
        mask.fill_(float("-inf"))
        mask.triu_()  # expect: MC503 method
        return mask

    def encode_image(self, image, normalize=False):
        features = self.visual(image)
        return F.normalize(features, dim=-1) if normalize else features

    def encode_text(self, text, normalize=False):
        seq_len = text.shape[1]
        x = self.token_embedding(text)
        x = x + self.positional_embedding[:seq_len]
        x = x.permute(1, 0, 2)
        x = self.transformer(x, attn_mask=self.attn_mask[:seq_len, :seq_len])
        x = x.permute(1, 0, 2)
        x = self.ln_final(x)
        x = x[torch.arange(x.shape[0]), text.argmax(dim=-1)] @ self.text_projection
        return F.normalize(x, dim=-1) if normalize else x

    def forward(self, image, text):
        image_features = self.encode_image(image, normalize=True)
        text_features = self.encode_text(text, normalize=True)
        return image_features, text_features, self.logit_scale.exp()


class ClipLoss(nn.Module):
    def forward(self, image_features, text_features, logit_scale):
        logits_per_image = logit_scale * image_features @ text_features.T
        logits_per_text = logits_per_image.T
        labels = torch.arange(image_features.shape[0])
        return (F.cross_entropy(logits_per_image, labels) + F.cross_entropy(logits_per_text, labels)) / 2


def make_trap_images(n, rng):
    names = list(PESTS)
    species_rng = np.random.default_rng(102)
    colours = species_rng.uniform(0.2, 1.0, size=(len(names), 3))
    freqs = species_rng.uniform(0.2, 0.9, size=(len(names), 2))
    yy, xx = np.mgrid[0:32, 0:32]
    images, labels = [], []
    for _ in range(n):
        c = int(rng.integers(len(names)))
        texture = np.sin(freqs[c, 0] * xx + rng.uniform(0, 6)) * np.cos(freqs[c, 1] * yy)
        img = colours[c][:, None, None] * (0.6 + 0.4 * texture)[None]
        img = img + rng.normal(0, 0.15, size=img.shape)
        images.append(img.astype(np.float32))
        labels.append(c)
    return torch.from_numpy(np.stack(images)), torch.tensor(labels)


@torch.no_grad()
def zero_shot_classifier(model, tokenizer):
    texts = tokenizer([TEMPLATE.format(PESTS[name]) for name in PESTS])
    return model.encode_text(texts, normalize=True)


def main():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    captions = [TEMPLATE.format(v) for v in PESTS.values()]
    tokenizer = SimpleTokenizer(captions, context_length=16)
    model = CLIP(embed_dim=32,
                 vision_cfg=dict(image_size=32, patch_size=8, width=48, layers=2, heads=4),
                 text_cfg=dict(context_length=16, vocab_size=tokenizer.vocab_size, width=48,
                               layers=2, heads=4))
    train_x, train_y = make_trap_images(384, rng)
    val_x, val_y = make_trap_images(120, rng)
    names = list(PESTS)
    loss_fn = ClipLoss()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    for epoch in range(5):
        model.train()
        perm = torch.randperm(len(train_x))
        total = 0.0
        for start in range(0, len(perm), 32):
            idx = perm[start:start + 32]
            text = tokenizer([TEMPLATE.format(PESTS[names[int(c)]]) for c in train_y[idx]])
            image_features, text_features, logit_scale = model(train_x[idx], text)
            loss = loss_fn(image_features, text_features, logit_scale)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
        print(f"epoch {epoch} loss {total / (len(perm) // 32):.3f}")
    model.eval()
    classifier = zero_shot_classifier(model, tokenizer)
    with torch.no_grad():
        pred = (model.encode_image(val_x, normalize=True) @ classifier.T).argmax(dim=-1)
    print(f"zero-shot top-1 on held-out traps: {(pred == val_y).float().mean().item():.3f}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
