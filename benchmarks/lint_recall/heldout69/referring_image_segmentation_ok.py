"""LAVT-style referring image segmentation: language-aware visual encoding.

A small re-implementation of the pixel-word attention module (PWAM) and the
language pathway gate, on top of a two-stage patch encoder, for RefCOCO-style
referring expressions over images of different sizes.

Source: conventions.md section 1 (direction cheat-sheet; nn.MultiheadAttention and
Hugging Face attention_mask rows) and section 5 item 1; seed
self_attention_mask_guide.txt sections 2 and 7 (Q1).
"""
import re

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD, UNK, CLS = 0, 1, 2


class WordTokenizer:
    def __init__(self, max_length=20):
        self.vocab = {"[PAD]": PAD, "[UNK]": UNK, "[CLS]": CLS}
        self.max_length = max_length

    def _encode(self, text):
        ids = [CLS]
        for w in re.findall(r"[a-z]+", text.lower()):
            if w not in self.vocab:
                self.vocab[w] = len(self.vocab)
            ids.append(self.vocab[w])
        return ids[: self.max_length]

    def __call__(self, texts, padding=True, return_tensors="pt"):
        encoded = [self._encode(t) for t in texts]
        width = max(len(e) for e in encoded)
        input_ids = torch.full((len(texts), width), PAD, dtype=torch.long)
        attention_mask = torch.zeros((len(texts), width), dtype=torch.long)
        for i, e in enumerate(encoded):
            input_ids[i, : len(e)] = torch.tensor(e)
            attention_mask[i, : len(e)] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}


def nested_tensor_from_images(images, stride=16):
    h = max(im.shape[-2] for im in images)
    w = max(im.shape[-1] for im in images)
    h, w = -(-h // stride) * stride, -(-w // stride) * stride
    batch = images[0].new_zeros(len(images), images[0].shape[0], h, w)
    mask = torch.ones(len(images), h, w, dtype=torch.bool)
    for img, pad_img, m in zip(images, batch, mask):
        pad_img[:, : img.shape[1], : img.shape[2]].copy_(img)
        m[: img.shape[1], : img.shape[2]] = False
    return batch, mask


class LanguageEncoder(nn.Module):
    def __init__(self, vocab_size=512, dim=64, depth=2, heads=4):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=PAD)
        self.pos = nn.Parameter(torch.zeros(1, 32, dim))
        layer = nn.TransformerEncoderLayer(dim, heads, dim * 2, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)

    def forward(self, input_ids, attention_mask):
        x = self.embed(input_ids) + self.pos[:, : input_ids.shape[1]]
        return self.encoder(x, src_key_padding_mask=attention_mask == 0)


class PixelWordAttention(nn.Module):
    def __init__(self, vis_dim, lang_dim, heads=4):
        super().__init__()
        self.lang_proj = nn.Linear(lang_dim, vis_dim)
        self.attn = nn.MultiheadAttention(vis_dim, heads, batch_first=True)
        self.vis_proj = nn.Sequential(nn.Conv1d(vis_dim, vis_dim, 1), nn.GELU())
        self.mm = nn.Sequential(nn.Conv1d(vis_dim, vis_dim, 1), nn.GELU())

    def forward(self, vis, words, attention_mask):
        lang = self.lang_proj(words)
        ctx, _ = self.attn(vis, lang, lang, key_padding_mask=attention_mask == 0)
        vis_feat = self.vis_proj(vis.transpose(1, 2))
        fused = self.mm(vis_feat * ctx.transpose(1, 2))
        return fused.transpose(1, 2)


class LanguageGate(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.gate = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim), nn.Tanh())

    def forward(self, vis, fused):
        return vis + self.gate(fused) * fused


class Stage(nn.Module):
    def __init__(self, in_ch, dim, lang_dim, stride):
        super().__init__()
        self.down = nn.Conv2d(in_ch, dim, stride, stride)
        self.block = nn.Sequential(nn.Conv2d(dim, dim, 3, padding=1, groups=dim), nn.GroupNorm(1, dim), nn.GELU())
        self.pwam = PixelWordAttention(dim, lang_dim)
        self.gate = LanguageGate(dim)

    def forward(self, x, words, attention_mask):
        x = self.block(self.down(x))
        b, c, h, w = x.shape
        tokens = x.flatten(2).transpose(1, 2)
        tokens = self.gate(tokens, self.pwam(tokens, words, attention_mask))
        return tokens.transpose(1, 2).reshape(b, c, h, w)


class LAVT(nn.Module):
    def __init__(self, vocab_size=512, lang_dim=64, dims=(32, 64)):
        super().__init__()
        self.text = LanguageEncoder(vocab_size, lang_dim)
        self.stages = nn.ModuleList([
            Stage(3, dims[0], lang_dim, 4),
            Stage(dims[0], dims[1], lang_dim, 2),
        ])
        self.lateral = nn.Conv2d(dims[0], dims[1], 1)
        self.classifier = nn.Conv2d(dims[1], 1, 1)

    def forward(self, images, input_ids, attention_mask):
        words = self.text(input_ids, attention_mask)
        feats, x = [], images
        for stage in self.stages:
            x = stage(x, words, attention_mask)
            feats.append(x)
        top = F.interpolate(feats[1], size=feats[0].shape[-2:], mode="bilinear", align_corners=False)
        logits = self.classifier(top + self.lateral(feats[0]))
        return F.interpolate(logits, size=images.shape[-2:], mode="bilinear", align_corners=False)[:, 0]


def referring_loss(logits, target, pad_mask):
    valid = (~pad_mask).float()
    loss = F.binary_cross_entropy_with_logits(logits, target, reduction="none")
    return (loss * valid).sum() / valid.sum().clamp(min=1.0)


@torch.no_grad()
def mask_iou(logits, target, pad_mask):
    pred = (logits.sigmoid() > 0.5) & ~pad_mask
    gt = target.bool() & ~pad_mask
    inter = (pred & gt).flatten(1).sum(-1).float()
    union = (pred | gt).flatten(1).sum(-1).float().clamp(min=1.0)
    return inter / union


if __name__ == "__main__":
    torch.manual_seed(0)
    tok = WordTokenizer()
    expressions = ["the red mug left of the laptop", "man in a blue shirt"]
    enc = tok(expressions, padding=True, return_tensors="pt")
    images = [torch.randn(3, 64, 64), torch.randn(3, 48, 56)]
    pixels, pad_mask = nested_tensor_from_images(images)
    target = torch.zeros(2, *pixels.shape[-2:])
    target[0, 10:30, 5:25] = 1.0
    target[1, 20:40, 20:50] = 1.0
    model = LAVT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(3):
        logits = model(pixels, enc["input_ids"], enc["attention_mask"])
        loss = referring_loss(logits, target, pad_mask)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("loss", round(loss.item(), 4), "iou", mask_iou(logits, target, pad_mask).tolist())
