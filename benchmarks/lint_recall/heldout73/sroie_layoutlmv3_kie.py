"""Key-information extraction from scanned receipts (SROIE fields), LayoutLMv3 layout.

OCR words with their boxes on a 0-1000 grid and the receipt's image patches
share one encoder with 1-D and 2-D relative position biases; a token
classification head tags company, date, address and total.

Source: pytorch/pytorch#103963 (conventions.md §3 item 6), conventions.md §2.9 (4-D bool mask in eager attention); seed self_attention_mask_guide.txt §3 (常见误区), §7 Q3.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

LABELS = ["O", "B-COMPANY", "I-COMPANY", "B-DATE", "I-DATE", "B-ADDRESS", "I-ADDRESS", "B-TOTAL", "I-TOTAL"]

config = {
    "vocab_size": 500, "hidden_size": 48, "num_attention_heads": 4, "num_hidden_layers": 2,
    "max_2d_position_embeddings": 1024, "rel_pos_bins": 32, "max_rel_pos": 128,
    "rel_2d_pos_bins": 64, "max_rel_2d_pos": 256, "input_size": 32, "patch_size": 8,
}


def relative_position_bucket(relative_position, num_buckets=32, max_distance=128):
    num_buckets //= 2
    ret = (relative_position > 0).long() * num_buckets
    n = torch.abs(relative_position)
    max_exact = num_buckets // 2
    is_small = n < max_exact
    val_if_large = max_exact + (
        torch.log(n.float().clamp(min=1) / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    ).to(torch.long)
    val_if_large = torch.min(val_if_large, torch.full_like(val_if_large, num_buckets - 1))
    return ret + torch.where(is_small, n, val_if_large)


class LayoutLMv3SelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.num_heads = cfg["num_attention_heads"]
        self.head_size = cfg["hidden_size"] // self.num_heads
        self.query = nn.Linear(cfg["hidden_size"], cfg["hidden_size"])
        self.key = nn.Linear(cfg["hidden_size"], cfg["hidden_size"])
        self.value = nn.Linear(cfg["hidden_size"], cfg["hidden_size"])
        self.output = nn.Linear(cfg["hidden_size"], cfg["hidden_size"])
        self.norm = nn.LayerNorm(cfg["hidden_size"])

    def transpose_for_scores(self, x):
        return x.view(x.shape[0], x.shape[1], self.num_heads, self.head_size).permute(0, 2, 1, 3)

    def cogview_attention(self, attention_scores, alpha=32):
        scaled = attention_scores / alpha
        max_value = scaled.amax(dim=-1, keepdim=True)
        return F.softmax((scaled - max_value) * alpha, dim=-1)

    def forward(self, hidden_states, padding, rel_pos, rel_2d_pos):
        q = self.transpose_for_scores(self.query(hidden_states))
        k = self.transpose_for_scores(self.key(hidden_states))
        v = self.transpose_for_scores(self.value(hidden_states))
        attention_scores = torch.matmul(q / math.sqrt(self.head_size), k.transpose(-1, -2))
        attention_scores = attention_scores + (rel_pos + rel_2d_pos) / math.sqrt(self.head_size)
        attention_scores = attention_scores + padding  # expect: MC509 added
        probs = self.cogview_attention(attention_scores)
        context = torch.matmul(probs, v).permute(0, 2, 1, 3).flatten(2)
        return self.norm(hidden_states + self.output(context))


class LayoutLMv3Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h = cfg["hidden_size"]
        self.cfg = cfg
        self.word_embeddings = nn.Embedding(cfg["vocab_size"], h, padding_idx=1)
        self.x_position_embeddings = nn.Embedding(cfg["max_2d_position_embeddings"], h)
        self.y_position_embeddings = nn.Embedding(cfg["max_2d_position_embeddings"], h)
        self.patch_embed = nn.Conv2d(3, h, cfg["patch_size"], cfg["patch_size"])
        self.cls_token = nn.Parameter(torch.zeros(1, 1, h))
        self.layers = nn.ModuleList([LayoutLMv3SelfAttention(cfg) for _ in range(cfg["num_hidden_layers"])])
        self.rel_pos_bias = nn.Linear(cfg["rel_pos_bins"], cfg["num_attention_heads"], bias=False)
        self.rel_pos_x_bias = nn.Linear(cfg["rel_2d_pos_bins"], cfg["num_attention_heads"], bias=False)
        self.rel_pos_y_bias = nn.Linear(cfg["rel_2d_pos_bins"], cfg["num_attention_heads"], bias=False)

    def visual_bbox(self):
        n = self.cfg["input_size"] // self.cfg["patch_size"]
        edges = torch.div(torch.arange(0, 1000 * (n + 1), 1000), n, rounding_mode="trunc")
        x0 = edges[:-1].repeat(n)
        y0 = edges[:-1].repeat_interleave(n)
        x1 = edges[1:].repeat(n)
        y1 = edges[1:].repeat_interleave(n)
        boxes = torch.stack([x0, y0, x1, y1], dim=-1)
        return torch.cat([torch.tensor([[1, 1, 1000, 1000]]), boxes], dim=0)

    def _cal_1d_pos_emb(self, position_ids):
        rel = position_ids.unsqueeze(-2) - position_ids.unsqueeze(-1)
        buckets = relative_position_bucket(rel, self.cfg["rel_pos_bins"], self.cfg["max_rel_pos"])
        return self.rel_pos_bias(F.one_hot(buckets, self.cfg["rel_pos_bins"]).float()).permute(0, 3, 1, 2)

    def _cal_2d_pos_emb(self, bbox):
        out = 0
        for coord, layer in ((bbox[:, :, 0], self.rel_pos_x_bias), (bbox[:, :, 3], self.rel_pos_y_bias)):
            rel = coord.unsqueeze(-2) - coord.unsqueeze(-1)
            buckets = relative_position_bucket(rel, self.cfg["rel_2d_pos_bins"], self.cfg["max_rel_2d_pos"])
            out = out + layer(F.one_hot(buckets, self.cfg["rel_2d_pos_bins"]).float()).permute(0, 3, 1, 2)
        return out

    def forward(self, input_ids, bbox, attention_mask, pixel_values):
        b, n_text = input_ids.shape
        text = self.word_embeddings(input_ids) + self.x_position_embeddings(bbox[..., 0]) + self.y_position_embeddings(bbox[..., 1])
        patches = self.patch_embed(pixel_values).flatten(2).transpose(1, 2)
        visual = torch.cat([self.cls_token.expand(b, -1, -1), patches], dim=1)
        vbox = self.visual_bbox().unsqueeze(0).expand(b, -1, -1)
        visual = visual + self.x_position_embeddings(vbox[..., 0]) + self.y_position_embeddings(vbox[..., 1])
        hidden = torch.cat([text, visual], dim=1)
        visual_attention_mask = torch.ones(b, visual.shape[1], dtype=attention_mask.dtype)
        keep = torch.cat([attention_mask, visual_attention_mask], dim=1).bool()
        padding = ~keep[:, None, None, :]
        text_pos = torch.arange(n_text).expand(b, -1)
        visual_pos = torch.arange(visual.shape[1]).expand(b, -1)
        position_ids = torch.cat([text_pos, visual_pos], dim=1)
        all_bbox = torch.cat([bbox, vbox], dim=1)
        rel_pos, rel_2d_pos = self._cal_1d_pos_emb(position_ids), self._cal_2d_pos_emb(all_bbox)
        for layer in self.layers:
            hidden = layer(hidden, padding, rel_pos, rel_2d_pos)
        return hidden[:, :n_text]


class LayoutLMv3ForTokenClassification(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.layoutlmv3 = LayoutLMv3Model(cfg)
        self.classifier = nn.Linear(cfg["hidden_size"], len(LABELS))

    def forward(self, input_ids, bbox, attention_mask, pixel_values, labels=None):
        logits = self.classifier(self.layoutlmv3(input_ids, bbox, attention_mask, pixel_values))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.view(-1, len(LABELS)), labels.view(-1), ignore_index=-100)
        return loss, logits


def encode_receipts(receipts, max_len=14):
    n = len(receipts)
    enc = {"input_ids": torch.ones(n, max_len, dtype=torch.long), "bbox": torch.zeros(n, max_len, 4, dtype=torch.long),
           "attention_mask": torch.zeros(n, max_len, dtype=torch.long), "labels": torch.full((n, max_len), -100)}
    for i, words in enumerate(receipts):
        for j, (word, box, tag) in enumerate(words[:max_len]):
            enc["input_ids"][i, j] = 3 + sum(map(ord, word)) % 490
            enc["bbox"][i, j] = torch.tensor(box)
            enc["attention_mask"][i, j] = 1
            enc["labels"][i, j] = LABELS.index(tag)
    return enc


if __name__ == "__main__":
    torch.manual_seed(0)
    receipts = [
        [("SYARIKAT", (40, 30, 300, 60), "B-COMPANY"), ("PERNIAGAAN", (310, 30, 600, 60), "I-COMPANY"),
         ("12/03/2018", (50, 200, 260, 230), "B-DATE"), ("TOTAL", (50, 800, 180, 830), "O"), ("RM9.00", (600, 800, 760, 830), "B-TOTAL")],
        [("KEDAI", (60, 40, 200, 70), "B-COMPANY"), ("JALAN", (60, 120, 220, 150), "B-ADDRESS"), ("IPOH", (230, 120, 330, 150), "I-ADDRESS"),
         ("01/01/2019", (60, 300, 280, 330), "B-DATE"), ("TOTAL:", (60, 850, 200, 880), "O"), ("12.50", (640, 850, 760, 880), "B-TOTAL"),
         ("THANK", (300, 950, 420, 980), "O"), ("YOU", (430, 950, 500, 980), "O")],
    ]
    enc = encode_receipts(receipts)
    pixel_values = torch.randn(2, 3, config["input_size"], config["input_size"])
    model = LayoutLMv3ForTokenClassification(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4)
    for step in range(3):
        loss, logits = model(enc["input_ids"], enc["bbox"], enc["attention_mask"], pixel_values, labels=enc["labels"])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")
    pred = logits.argmax(-1)[0, :5].tolist()
    print([LABELS[p] for p in pred])
