"""Hateful Memes classification with VisualBERT (MMF-style single-stream model).

The meme's overlaid text is tokenized BERT-style, the detector's region
features (up to ``MAX_BOXES`` per image) are projected into the same space
as visual tokens of type 1, and the two are read by one encoder. The
classifier sees the pooled [CLS] state and the mean of the text tokens.

Source: rasbt/LLMs-from-scratch#1061 (conventions.md §3 item 14); conventions.md §1 (direction cheat-sheet; SDPA row), §5 item 1.
"""

import torch
import torch.nn.functional as F
from torch import nn

MAX_BOXES = 8
config = dict(vocab_size=600, hidden_size=48, num_attention_heads=4, num_hidden_layers=2, visual_embedding_dim=64, max_position_embeddings=64)


class MemeTokenizer:
    cls_token_id, sep_token_id, pad_token_id = 101, 102, 0

    def __call__(self, texts, padding=True, max_length=20, return_tensors="pt"):
        encoded = [[self.cls_token_id] + [200 + sum(map(ord, w)) % 390 for w in t.lower().split()][: max_length - 2] + [self.sep_token_id] for t in texts]
        width = max(map(len, encoded))
        input_ids = torch.full((len(texts), width), self.pad_token_id)
        attention_mask = torch.zeros(len(texts), width, dtype=torch.long)
        for i, ids in enumerate(encoded):
            input_ids[i, : len(ids)] = torch.tensor(ids)
            attention_mask[i, : len(ids)] = 1
        return {"input_ids": input_ids, "token_type_ids": torch.zeros_like(input_ids), "attention_mask": attention_mask}


class VisualBertEmbeddings(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h = cfg["hidden_size"]
        self.word_embeddings = nn.Embedding(cfg["vocab_size"], h, padding_idx=0)
        self.position_embeddings = nn.Embedding(cfg["max_position_embeddings"], h)
        self.token_type_embeddings = nn.Embedding(2, h)
        self.visual_projection = nn.Linear(cfg["visual_embedding_dim"], h)
        self.visual_token_type_embeddings = nn.Embedding(2, h)
        self.visual_position_embeddings = nn.Embedding(cfg["max_position_embeddings"], h)
        self.LayerNorm = nn.LayerNorm(h, eps=1e-12)

    def forward(self, input_ids, token_type_ids, visual_embeds, visual_token_type_ids):
        positions = torch.arange(input_ids.size(1), device=input_ids.device)
        text = self.word_embeddings(input_ids) + self.position_embeddings(positions) + self.token_type_embeddings(token_type_ids)
        visual_positions = torch.zeros(visual_embeds.shape[:2], dtype=torch.long, device=visual_embeds.device)
        visual = self.visual_projection(visual_embeds) + self.visual_token_type_embeddings(visual_token_type_ids) + self.visual_position_embeddings(visual_positions)
        return self.LayerNorm(torch.cat([text, visual], dim=1))


class VisualBertLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h = cfg["hidden_size"]
        self.num_heads = cfg["num_attention_heads"]
        self.qkv = nn.Linear(h, 3 * h)
        self.attention_output = nn.Linear(h, h)
        self.attention_norm = nn.LayerNorm(h, eps=1e-12)
        self.intermediate = nn.Linear(h, 4 * h)
        self.output = nn.Linear(4 * h, h)
        self.output_norm = nn.LayerNorm(h, eps=1e-12)

    def forward(self, hidden_states, attention_mask):
        b, n, h = hidden_states.shape
        q, k, v = self.qkv(hidden_states).view(b, n, 3, self.num_heads, h // self.num_heads).permute(2, 0, 3, 1, 4)
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask)
        context = context.transpose(1, 2).reshape(b, n, h)
        hidden_states = self.attention_norm(hidden_states + self.attention_output(context))
        return self.output_norm(hidden_states + self.output(F.gelu(self.intermediate(hidden_states))))


class VisualBertForHatefulMemes(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h = cfg["hidden_size"]
        self.embeddings = VisualBertEmbeddings(cfg)
        self.encoder = nn.ModuleList([VisualBertLayer(cfg) for _ in range(cfg["num_hidden_layers"])])
        self.pooler = nn.Sequential(nn.Linear(h, h), nn.Tanh())
        self.classifier = nn.Sequential(nn.Dropout(0.1), nn.Linear(2 * h, h), nn.GELU(), nn.Linear(h, 2))

    def forward(self, input_ids, token_type_ids, attention_mask, visual_embeds, visual_attention_mask):
        visual_token_type_ids = torch.ones(visual_embeds.shape[:2], dtype=torch.long, device=visual_embeds.device)
        hidden = self.embeddings(input_ids, token_type_ids, visual_embeds, visual_token_type_ids)
        combined_attention_mask = torch.cat([attention_mask, visual_attention_mask], dim=-1)
        padding_mask = combined_attention_mask == 0
        extended_attention_mask = ~padding_mask[:, None, None, :]
        for layer in self.encoder:
            hidden = layer(hidden, extended_attention_mask)
        pooled = self.pooler(hidden[:, 0])
        text_len = input_ids.size(1)
        text_hidden = hidden[:, :text_len].masked_fill(padding_mask[:, :text_len, None], 0.0)
        text_mean = text_hidden.sum(1) / attention_mask.sum(1, keepdim=True)
        return self.classifier(torch.cat([pooled, text_mean], dim=-1))


def load_region_features(num_boxes_per_image, dim):
    feats = torch.zeros(len(num_boxes_per_image), MAX_BOXES, dim)
    visual_attention_mask = torch.zeros(len(num_boxes_per_image), MAX_BOXES, dtype=torch.long)
    for i, n in enumerate(num_boxes_per_image):
        feats[i, :n] = torch.randn(n, dim).relu()
        visual_attention_mask[i, :n] = 1
    return feats, visual_attention_mask


def roc_auc(scores, labels):
    pos, neg = scores[labels == 1], scores[labels == 0]
    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    return (pos[:, None] > neg[None, :]).float().mean().item()


if __name__ == "__main__":
    torch.manual_seed(0)
    tokenizer = MemeTokenizer()
    texts = ["when you finally get the weekend off", "look how many people love you", "them after the exam results come out", "that moment when the wifi comes back"]
    labels = torch.tensor([0, 1, 0, 1])
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    visual_embeds, visual_attention_mask = load_region_features([8, 5, 3, 8], config["visual_embedding_dim"])
    model = VisualBertForHatefulMemes(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(3):
        model.train()
        logits = model(**batch, visual_embeds=visual_embeds, visual_attention_mask=visual_attention_mask)
        loss = F.cross_entropy(logits, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        probs = model(**batch, visual_embeds=visual_embeds, visual_attention_mask=visual_attention_mask).softmax(-1)[:, 1]
    print("AUROC", roc_auc(probs, labels), "acc", ((probs > 0.5).long() == labels).float().mean().item())
