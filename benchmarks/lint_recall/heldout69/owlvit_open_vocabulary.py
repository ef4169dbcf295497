"""OWL-ViT open-vocabulary object detection.

A CLIP-style text tower embeds free-text queries, a ViT image tower yields one
embedding per patch token; each patch predicts a box and is classified by its
similarity to the text queries of its image. Images carry different numbers
of queries, padded with empty strings and a query mask.

Source: conventions.md section 1 (direction cheat-sheet), section 4.1 and
section 5 item 1; rasbt/LLMs-from-scratch#1061 (conventions.md section 3,
item 14).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

SOT, EOT, PAD = 1, 511, 0


class ClipTokenizer:
    def __init__(self, vocab_size=512, context_length=16):
        self.vocab_size, self.context_length = vocab_size, context_length

    def __call__(self, text, padding="max_length", return_tensors="pt"):
        rows = []
        for t in text:
            ids = [2 + (sum(map(ord, w)) % (self.vocab_size - 3)) for w in t.lower().split()]
            rows.append([SOT] + ids[: self.context_length - 2] + [EOT])
        width = self.context_length if padding == "max_length" else max(map(len, rows))
        input_ids = torch.full((len(rows), width), PAD, dtype=torch.long)
        attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            input_ids[i, : len(r)] = torch.tensor(r)
            attention_mask[i, : len(r)] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}


class EncoderLayer(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out_proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, attn_mask=None):
        b, n, d = x.shape
        q, k, v = self.qkv(self.ln_1(x)).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        x = x + self.out_proj(y.transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.ln_2(x))


class TextTower(nn.Module):
    def __init__(self, vocab_size=512, dim=64, depth=2, heads=4, context_length=16, proj_dim=48):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, dim)
        self.positional_embedding = nn.Parameter(torch.randn(context_length, dim) * 0.01)
        self.layers = nn.ModuleList([EncoderLayer(dim, heads) for _ in range(depth)])
        self.ln_final = nn.LayerNorm(dim)
        self.text_projection = nn.Linear(dim, proj_dim, bias=False)

    def forward(self, input_ids, attention_mask):
        n = input_ids.shape[1]
        x = self.token_embedding(input_ids) + self.positional_embedding[:n]
        causal = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()
        pad = attention_mask == 0
        mask = causal & pad[:, None, None, :]  # expect: MC511 text
        for layer in self.layers:
            x = layer(x, mask)
        x = self.ln_final(x)
        eot = x[torch.arange(x.shape[0]), input_ids.argmax(dim=-1)]
        return self.text_projection(eot)


class VisionTower(nn.Module):
    def __init__(self, image_size=64, patch=8, dim=64, depth=2, heads=4):
        super().__init__()
        self.grid = image_size // patch
        self.patch_embed = nn.Conv2d(3, dim, patch, patch, bias=False)
        self.class_embedding = nn.Parameter(torch.randn(dim) * 0.02)
        self.positional_embedding = nn.Parameter(torch.randn(self.grid ** 2 + 1, dim) * 0.02)
        self.pre_ln, self.post_ln = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.layers = nn.ModuleList([EncoderLayer(dim, heads) for _ in range(depth)])

    def forward(self, pixel_values):
        x = self.patch_embed(pixel_values).flatten(2).transpose(1, 2)
        cls = self.class_embedding.expand(x.shape[0], 1, -1)
        x = self.pre_ln(torch.cat([cls, x], dim=1) + self.positional_embedding)
        for layer in self.layers:
            x = layer(x)
        x = self.post_ln(x)
        return x[:, 1:] * x[:, :1]


class OwlViT(nn.Module):
    def __init__(self, dim=64, proj_dim=48):
        super().__init__()
        self.text_model = TextTower(dim=dim, proj_dim=proj_dim)
        self.vision_model = VisionTower(dim=dim)
        self.class_head = nn.Linear(dim, proj_dim)
        self.logit_shift, self.logit_scale = nn.Linear(dim, 1), nn.Linear(dim, 1)
        self.box_head = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, 4))
        grid = self.vision_model.grid
        ys, xs = torch.meshgrid(torch.arange(grid), torch.arange(grid), indexing="ij")
        centers = (torch.stack([xs, ys], -1).flatten(0, 1).float() + 0.5) / grid
        centers = centers.clamp(1e-4, 1 - 1e-4)
        size = torch.full_like(centers, 1.0 / grid)
        self.register_buffer("box_bias", torch.logit(torch.cat([centers, size], -1)), persistent=False)

    def forward(self, pixel_values, text_inputs, query_mask):
        b, max_q = query_mask.shape
        query_embeds = self.text_model(**text_inputs).view(b, max_q, -1)
        image_embeds = self.vision_model(pixel_values)
        pred_boxes = (self.box_head(image_embeds) + self.box_bias).sigmoid()
        class_embeds = F.normalize(self.class_head(image_embeds), dim=-1)
        query_embeds = F.normalize(query_embeds, dim=-1)
        logits = torch.einsum("bpd,bqd->bpq", class_embeds, query_embeds)
        logits = (logits + self.logit_shift(image_embeds)) * (F.elu(self.logit_scale(image_embeds)) + 1)
        logits = torch.where(query_mask[:, None, :], logits, torch.finfo(logits.dtype).min)
        return {"logits": logits, "pred_boxes": pred_boxes}


def encode_queries(tokenizer, queries_per_image):
    max_q = max(len(q) for q in queries_per_image)
    flat, query_mask = [], torch.zeros(len(queries_per_image), max_q, dtype=torch.bool)
    for i, queries in enumerate(queries_per_image):
        flat += queries + [""] * (max_q - len(queries))
        query_mask[i, : len(queries)] = True
    return tokenizer(flat, padding="max_length", return_tensors="pt"), query_mask


@torch.no_grad()
def detect(model, pixel_values, text_inputs, query_mask, threshold=0.1):
    out = model(pixel_values, text_inputs, query_mask)
    scores, labels = out["logits"].sigmoid().max(dim=-1)
    return [(s[s > threshold], l[s > threshold], bx[s > threshold])
            for s, l, bx in zip(scores, labels, out["pred_boxes"])]


if __name__ == "__main__":
    torch.manual_seed(0)
    tokenizer = ClipTokenizer()
    queries = [["a photo of a cat", "a photo of a remote control"], ["a photo of a dog"]]
    text_inputs, query_mask = encode_queries(tokenizer, queries)
    model = OwlViT().eval()
    pixel_values = torch.randn(2, 3, 64, 64)
    results = detect(model, pixel_values, text_inputs, query_mask)
    print("queries", tuple(query_mask.shape), "detections", [len(r[0]) for r in results])
