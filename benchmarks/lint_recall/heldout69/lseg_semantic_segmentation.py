"""LSeg: language-driven semantic segmentation.

Label names are encoded by a small text transformer; a DPT-like image encoder
gives one embedding per pixel, and each pixel is classified by its similarity
to the label embeddings, so the label set can change at test time.

Source: hyunwoongko/transformer PR #40 and bentrevett/pytorch-seq2seq#96
(conventions.md section 3, item 21).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD_IDX = 0
IGNORE_INDEX = 255
ADE_LABELS = ["wall", "building", "sky", "floor", "tree", "person", "potted plant", "traffic light"]


def tokenize_labels(labels, prompt="a photo of a {}"):
    words = [prompt.format(l).split() for l in labels]
    vocab = {}
    ids = [[vocab.setdefault(w, len(vocab) + 1) for w in ws] for ws in words]
    width = max(len(i) for i in ids)
    return torch.tensor([i + [PAD_IDX] * (width - len(i)) for i in ids])


class TextSelfAttention(nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.n_head = n_head
        self.w_q, self.w_k, self.w_v = (nn.Linear(d_model, d_model) for _ in range(3))
        self.w_concat = nn.Linear(d_model, d_model)

    def split(self, t):
        b, n, d = t.shape
        return t.view(b, n, self.n_head, d // self.n_head).transpose(1, 2)

    def forward(self, x, mask):
        q, k, v = self.split(self.w_q(x)), self.split(self.w_k(x)), self.split(self.w_v(x))
        score = q @ k.transpose(2, 3) / math.sqrt(q.shape[-1])
        score = score.masked_fill(mask == 0, -10000.0)
        out = score.softmax(dim=-1) @ v
        b, h, n, d = out.shape
        return self.w_concat(out.transpose(1, 2).reshape(b, n, h * d))


class TextEncoder(nn.Module):
    def __init__(self, vocab_size=64, d_model=64, n_head=4, n_layers=2, out_dim=32):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, d_model, padding_idx=PAD_IDX)
        self.pos = nn.Parameter(torch.randn(1, 16, d_model) * 0.02)
        self.attn = nn.ModuleList([TextSelfAttention(d_model, n_head) for _ in range(n_layers)])
        self.ffn = nn.ModuleList([
            nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.ReLU(), nn.Linear(2 * d_model, d_model))
            for _ in range(n_layers)
        ])
        self.norms = nn.ModuleList([nn.LayerNorm(d_model) for _ in range(2 * n_layers)])
        self.proj = nn.Linear(d_model, out_dim)

    def make_src_mask(self, src):
        return (src != PAD_IDX).unsqueeze(1).unsqueeze(3)  # expect: MC514 labels

    def forward(self, src):
        src_mask = self.make_src_mask(src)
        x = self.emb(src) + self.pos[:, : src.shape[1]]
        for i, (attn, ffn) in enumerate(zip(self.attn, self.ffn)):
            x = self.norms[2 * i](x + attn(x, src_mask))
            x = self.norms[2 * i + 1](x + ffn(x))
        keep = (src != PAD_IDX).unsqueeze(-1).float()
        pooled = (x * keep).sum(1) / keep.sum(1)
        return F.normalize(self.proj(pooled), dim=-1)


class ImageEncoder(nn.Module):
    def __init__(self, dim=64, out_dim=32, patch=8, depth=2, heads=4):
        super().__init__()
        self.patch = patch
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True, norm_first=True)
        self.vit = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.reassemble = nn.Sequential(nn.Conv2d(dim, dim, 3, padding=1), nn.ReLU())
        self.head = nn.Sequential(
            nn.Upsample(scale_factor=4, mode="bilinear", align_corners=False),
            nn.Conv2d(dim, out_dim, 3, padding=1), nn.ReLU(), nn.Conv2d(out_dim, out_dim, 1),
        )

    def forward(self, images, pad_mask):
        x = self.patch_embed(images)
        b, c, h, w = x.shape
        patch_pad = F.interpolate(pad_mask[:, None].float(), size=(h, w), mode="area")[:, 0] >= 1.0
        tokens = self.vit(x.flatten(2).transpose(1, 2), src_key_padding_mask=patch_pad.flatten(1))
        x = self.reassemble(tokens.transpose(1, 2).reshape(b, c, h, w))
        x = F.interpolate(self.head(x), size=images.shape[-2:], mode="bilinear", align_corners=False)
        return F.normalize(x, dim=1)


class LSeg(nn.Module):
    def __init__(self, out_dim=32):
        super().__init__()
        self.text_encoder = TextEncoder(out_dim=out_dim)
        self.image_encoder = ImageEncoder(out_dim=out_dim)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))

    def forward(self, images, pad_mask, label_ids):
        pixel_embeds = self.image_encoder(images, pad_mask)
        text_embeds = self.text_encoder(label_ids)
        return self.logit_scale.exp() * torch.einsum("bchw,kc->bkhw", pixel_embeds, text_embeds)


def pad_images(images, targets):
    h = max(i.shape[1] for i in images)
    w = max(i.shape[2] for i in images)
    h, w = -(-h // 8) * 8, -(-w // 8) * 8
    batch = torch.zeros(len(images), 3, h, w)
    labels = torch.full((len(images), h, w), IGNORE_INDEX, dtype=torch.long)
    pad_mask = torch.ones(len(images), h, w, dtype=torch.bool)
    for i, (img, tgt) in enumerate(zip(images, targets)):
        batch[i, :, : img.shape[1], : img.shape[2]] = img
        labels[i, : tgt.shape[0], : tgt.shape[1]] = tgt
        pad_mask[i, : img.shape[1], : img.shape[2]] = False
    return batch, labels, pad_mask


if __name__ == "__main__":
    torch.manual_seed(0)
    label_ids = tokenize_labels(ADE_LABELS)
    images = [torch.randn(3, 64, 64), torch.randn(3, 40, 56)]
    targets = [torch.randint(0, len(ADE_LABELS), (64, 64)), torch.randint(0, len(ADE_LABELS), (40, 56))]
    batch, labels, pad_mask = pad_images(images, targets)
    model = LSeg()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(3):
        logits = model(batch, pad_mask, label_ids)
        loss = F.cross_entropy(logits, labels, ignore_index=IGNORE_INDEX)
        opt.zero_grad()
        loss.backward()
        opt.step()
    pred = logits.argmax(1)
    acc = ((pred == labels) & ~pad_mask).sum() / (~pad_mask).sum()
    print("loss", round(loss.item(), 4), "pixel acc", round(acc.item(), 4))
