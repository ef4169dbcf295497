"""Grounding DINO feature enhancer and language-guided query selection.

The caption "cat . remote control . dog ." is tokenized once per image; the
text self-attention is restricted to each category phrase (sub-sentence
masks), image and text features exchange information through cross-attention
in both directions, and the top-k image tokens by text similarity initialise
the decoder queries, which are classified against the text tokens.

Source: conventions.md section 1 (Hugging Face attention_mask row and direction
cheat-sheet); seed masked_fill_inplace.txt (作用); seed
self_attention_mask_guide.txt section 7 (Q1).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

CLS_ID, SEP_ID, DOT_ID, PAD_ID = 101, 102, 1012, 0
SPECIAL_TOKENS = (CLS_ID, SEP_ID, DOT_ID)


class BertLikeTokenizer:
    def __init__(self, vocab_size=2048):
        self.vocab_size = vocab_size

    def __call__(self, captions, padding="longest", return_tensors="pt"):
        rows = []
        for cap in captions:
            ids = [CLS_ID]
            for w in cap.replace(".", " . ").split():
                ids.append(DOT_ID if w == "." else 2000 + (sum(map(ord, w)) % 40))
            rows.append(ids + [SEP_ID])
        width = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), width), PAD_ID)
        attention_mask = torch.zeros(len(rows), width, dtype=torch.long)
        for i, r in enumerate(rows):
            input_ids[i, : len(r)], attention_mask[i, : len(r)] = torch.tensor(r), 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}


def generate_masks_with_special_tokens(input_ids):
    b, n = input_ids.shape
    special = torch.zeros_like(input_ids, dtype=torch.bool)
    for tok in SPECIAL_TOKENS:
        special |= input_ids == tok
    masks = torch.eye(n, dtype=torch.bool).repeat(b, 1, 1)
    position_ids = torch.zeros(b, n, dtype=torch.long)
    for row, col in special.nonzero().tolist():
        prev = special[row, :col].nonzero()
        start = int(prev[-1]) + 1 if len(prev) else 0
        if col > start:
            masks[row, start:col, start:col] = True
            position_ids[row, start:col] = torch.arange(col - start)
    return masks, position_ids


class TextToImageCrossAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.v_proj, self.l_proj = nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.values_l, self.out_v = nn.Linear(dim, dim), nn.Linear(dim, dim)

    def forward(self, v, l, attention_mask):
        b, nv, d = v.shape
        q = self.v_proj(v).view(b, nv, self.heads, -1).transpose(1, 2)
        k = self.l_proj(l).view(b, l.shape[1], self.heads, -1).transpose(1, 2)
        val = self.values_l(l).view(b, l.shape[1], self.heads, -1).transpose(1, 2)
        scores = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
        scores = scores.masked_fill(attention_mask[:, None, None, :].bool(), float("-inf"))  # expect: MC519 caption
        out = (scores.softmax(dim=-1) @ val).transpose(1, 2).reshape(b, nv, d)
        return self.out_v(out)


class EnhancerLayer(nn.Module):
    def __init__(self, dim=64, heads=4):
        super().__init__()
        self.heads = heads
        self.fusion = TextToImageCrossAttention(dim, heads)
        self.image_to_text = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.image_self = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.text_self = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norms = nn.ModuleList([nn.LayerNorm(dim) for _ in range(4)])

    def forward(self, image, image_pad, text, attention_mask, text_self_attention_masks):
        image = self.norms[0](image + self.fusion(image, text, attention_mask))
        text = self.norms[1](text + self.image_to_text(text, image, image, key_padding_mask=image_pad)[0])
        image = self.norms[2](image + self.image_self(image, image, image, key_padding_mask=image_pad)[0])
        blocked = ~text_self_attention_masks.repeat_interleave(self.heads, dim=0)
        text = self.norms[3](text + self.text_self(text, text, text, attn_mask=blocked)[0])
        return image, text


class GroundingDINOHead(nn.Module):
    def __init__(self, dim=64, heads=4, num_layers=2, num_queries=9):
        super().__init__()
        self.num_queries = num_queries
        self.backbone = nn.Sequential(nn.Conv2d(3, dim, 8, 8), nn.GELU())
        self.word_embeddings = nn.Embedding(2048, dim)
        self.position_embeddings = nn.Embedding(32, dim)
        self.layers = nn.ModuleList([EnhancerLayer(dim, heads) for _ in range(num_layers)])
        self.decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(dim, heads, 2 * dim, 0.0, batch_first=True), 2)
        self.bbox_head = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, 4))

    def contrastive_logits(self, queries, text, text_token_mask):
        logits = queries @ text.transpose(-1, -2) / queries.shape[-1] ** 0.5
        return logits.masked_fill(~text_token_mask[:, None, :], float("-inf"))

    def forward(self, images, pixel_mask, input_ids, attention_mask):
        feats = self.backbone(images)
        image = feats.flatten(2).transpose(1, 2)
        image_pad = F.interpolate(pixel_mask[:, None].float(), size=feats.shape[-2:])[:, 0].bool().flatten(1)
        text_masks, position_ids = generate_masks_with_special_tokens(input_ids)
        text = self.word_embeddings(input_ids) + self.position_embeddings(position_ids)
        for layer in self.layers:
            image, text = layer(image, image_pad, text, attention_mask, text_masks)
        text_token_mask = attention_mask.bool()
        sim = self.contrastive_logits(image, text, text_token_mask).max(-1).values
        topk = sim.masked_fill(image_pad, float("-inf")).topk(self.num_queries, dim=1).indices
        queries = torch.gather(image, 1, topk[..., None].expand(-1, -1, image.shape[-1]))
        hs = self.decoder(queries, image, memory_key_padding_mask=image_pad)
        return {
            "pred_logits": self.contrastive_logits(hs, text, text_token_mask),
            "pred_boxes": self.bbox_head(hs).sigmoid(),
        }


if __name__ == "__main__":
    torch.manual_seed(0)
    tokenizer = BertLikeTokenizer()
    captions = ["cat . remote control . dog .", "person . bicycle ."]
    text_inputs = tokenizer(captions, padding="longest", return_tensors="pt")
    images = torch.zeros(2, 3, 64, 64)
    pixel_mask = torch.ones(2, 64, 64, dtype=torch.bool)
    images[0], pixel_mask[0] = torch.randn(3, 64, 64), False
    images[1, :, :48, :56], pixel_mask[1, :48, :56] = torch.randn(3, 48, 56), False
    model = GroundingDINOHead()
    out = model(images, pixel_mask, **text_inputs)
    target = torch.zeros_like(out["pred_logits"])
    target[:, :, 1] = 1.0
    valid = text_inputs["attention_mask"].bool()[:, None, :].expand_as(target)
    loss = F.binary_cross_entropy_with_logits(out["pred_logits"][valid], target[valid])
    loss.backward()
    print("logits", tuple(out["pred_logits"].shape), "loss", round(loss.item(), 4))
