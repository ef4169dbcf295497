"""NLVR2 with ViLT: does the sentence hold for the pair of images?

Single-stream vision-and-language transformer over word tokens and linear
patch embeddings of images of different sizes (padded, with a pixel mask).
The pair is read in two passes, one per image, and the two pooled features
are classified together, as in the ViLT ``nlvr2`` head.

Source: pytorch/pytorch#103963 (conventions.md §3 item 6), huggingface/transformers#32195 (item 25); conventions.md §2.9, §5 item 7.
"""
import torch
import torch.nn.functional as F
from torch import nn

_config = {
    "vocab_size": 400, "hidden_size": 48, "num_heads": 4, "num_layers": 2, "patch_size": 8,
    "max_text_len": 16, "max_image_len": 64, "drop_rate": 0.0,
}


class BertLikeTokenizer:
    def __call__(self, texts, padding="max_length", max_length=16, return_tensors="pt"):
        ids = torch.zeros(len(texts), max_length, dtype=torch.long)
        mask = torch.zeros(len(texts), max_length, dtype=torch.long)
        for i, t in enumerate(texts):
            toks = [101] + [103 + sum(map(ord, w)) % 290 for w in t.lower().split()][: max_length - 2] + [102]
            ids[i, : len(toks)] = torch.tensor(toks)
            mask[i, : len(toks)] = 1
        return {"input_ids": ids, "attention_mask": mask}


class Attention(nn.Module):
    def __init__(self, dim, num_heads, attn_drop=0.0):
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)
        self.attn_drop = attn_drop

    def forward(self, x, mask=None):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        x = F.scaled_dot_product_attention(
            q, k, v,
            attn_mask=mask[:, None, None, :].bool(),
            dropout_p=self.attn_drop if self.training else 0.0,
        )
        return self.proj(x.transpose(1, 2).reshape(B, N, C))


class Block(nn.Module):
    def __init__(self, dim, num_heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, dim * 4), nn.GELU(), nn.Linear(dim * 4, dim))

    def forward(self, x, mask=None):
        x = x + self.attn(self.norm1(x), mask=mask)
        return x + self.mlp(self.norm2(x))


class ViLTransformerSS(nn.Module):
    def __init__(self, config):
        super().__init__()
        h = config["hidden_size"]
        self.config = config
        self.word_embeddings = nn.Embedding(config["vocab_size"], h)
        self.text_position = nn.Embedding(config["max_text_len"], h)
        self.token_type_embeddings = nn.Embedding(3, h)
        self.patch_embed = nn.Conv2d(3, h, config["patch_size"], config["patch_size"])
        self.pos_embed = nn.Parameter(torch.randn(1, h, 8, 8) * 0.02)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, h))
        self.blocks = nn.ModuleList([Block(h, config["num_heads"]) for _ in range(config["num_layers"])])
        self.norm = nn.LayerNorm(h, eps=1e-6)
        self.pooler = nn.Sequential(nn.Linear(h, h), nn.Tanh())
        self.nlvr2_classifier = nn.Sequential(nn.Linear(h * 2, h * 2), nn.LayerNorm(h * 2), nn.GELU(), nn.Linear(h * 2, 2))

    def visual_embed(self, pixel_values, pixel_mask):
        x = self.patch_embed(pixel_values)
        ph, pw = x.shape[-2:]
        x_mask = F.interpolate(pixel_mask[:, None].float(), size=(ph, pw)).long()[:, 0]
        pos = F.interpolate(self.pos_embed, size=(ph, pw), mode="bilinear", align_corners=True)
        x = (x + pos).flatten(2).transpose(1, 2)
        x_mask = x_mask.flatten(1)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1)
        x_mask = torch.cat([torch.ones(x.shape[0], 1, dtype=x_mask.dtype), x_mask], dim=1)
        return x, x_mask

    def infer(self, batch, image_token_type_idx=1):
        text_ids, text_masks = batch["text_ids"], batch["text_masks"]
        positions = torch.arange(text_ids.shape[1])
        text_embeds = self.word_embeddings(text_ids) + self.text_position(positions)[None]
        image_embeds, image_masks = self.visual_embed(batch[f"image_{image_token_type_idx - 1}"], batch[f"pixel_mask_{image_token_type_idx - 1}"])
        text_embeds = text_embeds + self.token_type_embeddings(torch.zeros_like(text_masks))
        image_embeds = image_embeds + self.token_type_embeddings(torch.full_like(image_masks, image_token_type_idx))
        co_embeds = torch.cat([text_embeds, image_embeds], dim=1)
        co_masks = torch.cat([text_masks, image_masks], dim=1)
        x = co_embeds
        for blk in self.blocks:
            x = blk(x, mask=co_masks)
        x = self.norm(x)
        return {"cls_feats": self.pooler(x[:, 0]), "text_feats": x[:, : text_ids.shape[1]], "image_masks": image_masks}

    def forward(self, batch):
        infer1 = self.infer(batch, image_token_type_idx=1)
        infer2 = self.infer(batch, image_token_type_idx=2)
        cls_feats = torch.cat([infer1["cls_feats"], infer2["cls_feats"]], dim=-1)
        nlvr2_logits = self.nlvr2_classifier(cls_feats)
        loss = F.cross_entropy(nlvr2_logits, batch["answers"])
        acc = (nlvr2_logits.argmax(-1) == batch["answers"]).float().mean()
        return {"nlvr2_loss": loss, "nlvr2_logits": nlvr2_logits, "nlvr2_accuracy": acc}


def pad_images(images):
    max_h = max(img.shape[1] for img in images)
    max_w = max(img.shape[2] for img in images)
    out = torch.zeros(len(images), 3, max_h, max_w)
    pixel_mask = torch.zeros(len(images), max_h, max_w, dtype=torch.long)
    for i, img in enumerate(images):
        out[i, :, : img.shape[1], : img.shape[2]] = img
        pixel_mask[i, : img.shape[1], : img.shape[2]] = 1
    return out, pixel_mask


def collate(examples, tokenizer):
    enc = tokenizer([e["sentence"] for e in examples], max_length=_config["max_text_len"])
    batch = {"text_ids": enc["input_ids"], "text_masks": enc["attention_mask"], "answers": torch.tensor([e["label"] for e in examples])}
    for j in range(2):
        batch[f"image_{j}"], batch[f"pixel_mask_{j}"] = pad_images([e["images"][j] for e in examples])
    return batch


if __name__ == "__main__":
    torch.manual_seed(0)
    examples = [
        {"sentence": "the left image contains exactly two dogs", "images": [torch.randn(3, 32, 48), torch.randn(3, 40, 32)], "label": 1},
        {"sentence": "there are more birds in the right image than in the left image", "images": [torch.randn(3, 48, 48), torch.randn(3, 32, 32)], "label": 0},
        {"sentence": "one bottle is open", "images": [torch.randn(3, 40, 40), torch.randn(3, 48, 40)], "label": 1},
    ]
    batch = collate(examples, BertLikeTokenizer())
    model = ViLTransformerSS(_config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(3):
        out = model(batch)
        optimizer.zero_grad()
        out["nlvr2_loss"].backward()
        optimizer.step()
        print(f"step {step} loss {out['nlvr2_loss'].item():.4f} acc {out['nlvr2_accuracy'].item():.2f}")
