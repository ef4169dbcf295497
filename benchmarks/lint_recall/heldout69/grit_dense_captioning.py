"""GRiT-style dense captioning: a generative region-to-text transformer.

Region proposals are pooled from a ViT feature map into a small grid of
object tokens; a text decoder (GIT-style, nn.TransformerDecoder) then writes a
free-form description of each region, trained with teacher forcing on
right-padded captions and decoded greedily.

Source: pytorch/pytorch#29546 and rasbt/LLMs-from-scratch#1061
(conventions.md section 3, items 9 and 14).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

PAD, BOS, EOS = 0, 1, 2
CAPTION_VOCAB = ["<pad>", "<s>", "</s>", "a", "man", "woman", "riding", "red", "white",
                 "bike", "dog", "on", "the", "street", "sitting", "bench", "wooden", "shirt"]
WORD_TO_ID = {w: i for i, w in enumerate(CAPTION_VOCAB)}


def encode_captions(captions, max_len=10):
    ids = [[BOS] + [WORD_TO_ID[w] for w in c.split()][: max_len - 2] + [EOS] for c in captions]
    width = max(len(i) for i in ids)
    return torch.tensor([i + [PAD] * (width - len(i)) for i in ids])


def roi_grid_pool(features, boxes, batch_idx, output_size=4):
    _, _, h, w = features.shape
    pooled = []
    for (x0, y0, x1, y1), b in zip(boxes.tolist(), batch_idx.tolist()):
        c0, c1 = int(x0 * w), max(int(x1 * w), int(x0 * w) + 1)
        r0, r1 = int(y0 * h), max(int(y1 * h), int(y0 * h) + 1)
        crop = features[b, :, r0:r1, c0:c1]
        pooled.append(F.adaptive_avg_pool2d(crop, output_size))
    return torch.stack(pooled).flatten(2).transpose(1, 2)


class ViTBackbone(nn.Module):
    def __init__(self, dim=64, patch=8, depth=2, heads=4):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        self.pos = nn.Parameter(torch.randn(1, dim, 8, 8) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)

    def forward(self, images):
        x = self.patch_embed(images)
        x = x + F.interpolate(self.pos, size=x.shape[-2:], mode="bilinear", align_corners=False)
        b, c, h, w = x.shape
        x = self.blocks(x.flatten(2).transpose(1, 2))
        return x.transpose(1, 2).reshape(b, c, h, w)


class TextDecoder(nn.Module):
    def __init__(self, vocab_size=len(CAPTION_VOCAB), dim=64, heads=4, layers=2, max_len=16):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, dim, padding_idx=PAD)
        self.positions = nn.Embedding(max_len, dim)
        self.object_proj = nn.Sequential(nn.Linear(dim, dim), nn.LayerNorm(dim))
        layer = nn.TransformerDecoderLayer(dim, heads, 4 * dim, dropout=0.1, batch_first=True, norm_first=True)
        self.transformer = nn.TransformerDecoder(layer, layers)
        self.output = nn.Linear(dim, vocab_size)

    def _generate_future_mask(self, size, device):
        return torch.tril(torch.ones(size, size, dtype=torch.bool, device=device), diagonal=-1)  # expect: MC521 future

    def forward(self, object_features, caption_tokens):
        t = caption_tokens.shape[1]
        x = self.embedding(caption_tokens) + self.positions(torch.arange(t, device=caption_tokens.device))
        memory = self.object_proj(object_features)
        hidden = self.transformer(
            x, memory,
            tgt_mask=self._generate_future_mask(t, x.device),
            tgt_key_padding_mask=caption_tokens == PAD,
        )
        return self.output(hidden)


class GRiT(nn.Module):
    def __init__(self, dim=64):
        super().__init__()
        self.backbone = ViTBackbone(dim)
        self.objectness = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, 1))
        self.text_decoder = TextDecoder(dim=dim)

    def forward(self, images, boxes, batch_idx, captions):
        feats = self.backbone(images)
        object_features = roi_grid_pool(feats, boxes, batch_idx)
        scores = self.objectness(object_features.mean(1)).squeeze(-1)
        logits = self.text_decoder(object_features, captions[:, :-1])
        return scores, logits

    @torch.no_grad()
    def describe(self, images, boxes, batch_idx, max_len=8):
        feats = self.backbone(images)
        object_features = roi_grid_pool(feats, boxes, batch_idx)
        tokens = torch.full((boxes.shape[0], 1), BOS)
        finished = torch.zeros(boxes.shape[0], dtype=torch.bool)
        for _ in range(max_len):
            logits = self.text_decoder(object_features, tokens)
            nxt = logits[:, -1].argmax(-1)
            nxt = torch.where(finished, torch.full_like(nxt, PAD), nxt)
            tokens = torch.cat([tokens, nxt[:, None]], dim=1)
            finished |= nxt == EOS
            if finished.all():
                break
        return [" ".join(CAPTION_VOCAB[i] for i in row[1:].tolist() if i > EOS) for row in tokens]


def caption_loss(logits, captions):
    target = captions[:, 1:]
    return F.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=PAD)


if __name__ == "__main__":
    torch.manual_seed(0)
    images = torch.randn(2, 3, 64, 64)
    boxes = torch.tensor([[0.1, 0.1, 0.6, 0.7], [0.5, 0.2, 0.9, 0.9], [0.0, 0.3, 0.5, 1.0]])
    batch_idx = torch.tensor([0, 0, 1])
    captions = encode_captions(["a man riding a red bike", "a white dog", "a wooden bench on the street"])
    model = GRiT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(5):
        scores, logits = model(images, boxes, batch_idx, captions)
        loss = caption_loss(logits, captions) + F.binary_cross_entropy_with_logits(scores, torch.ones_like(scores))
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    print("loss", round(loss.item(), 4), model.describe(images, boxes, batch_idx))
