"""LayoutLMv2-style key information extraction on synthetic CORD-like receipts (text + layout).

Laid out after microsoft/unilm's layoutlmv2 and transformers' ``modeling_layoutlmv2.py``
without the visual backbone: a ``ReceiptTokenizer`` returning ``input_ids``, ``bbox`` on the
0-1000 grid and ``attention_mask``, ``LayoutLMv2Embeddings`` (1-D position plus the left / upper
/ right / lower / height / width spatial embeddings), ``relative_position_bucket`` for the 1-D
and 2-D relative attention biases, ``LayoutLMv2SelfAttention``, ``LayoutLMv2Layer``,
``LayoutLMv2Encoder`` and ``LayoutLMv2ForTokenClassification``.

Source: conventions.md §1 (HF 2-D attention_mask row) and §5 item 7.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

LABELS = ["O", "B-MENU.CNT", "B-MENU.NM", "I-MENU.NM", "B-MENU.PRICE", "B-TOTAL.TOTAL_PRICE"]
DISHES = ["nasi goreng", "es teh", "ayam bakar", "mie ayam", "kopi susu", "roti bakar", "sate"]
PRICES = [f"{d}.{c}00" for d in range(5, 60) for c in range(10)]


@dataclass
class LayoutLMv2Config:
    hidden_size: int = 96
    num_attention_heads: int = 4
    num_hidden_layers: int = 2
    intermediate_size: int = 192
    max_position_embeddings: int = 64
    max_2d_position_embeddings: int = 1024
    coordinate_size: int = 16
    shape_size: int = 16
    rel_pos_bins: int = 32
    max_rel_pos: int = 64
    rel_2d_pos_bins: int = 32
    max_rel_2d_pos: int = 256
    num_labels: int = len(LABELS)


def relative_position_bucket(
    relative_position, bidirectional=True, num_buckets=32, max_distance=128
):
    ret = 0
    if bidirectional:
        num_buckets //= 2
        ret += (relative_position > 0).long() * num_buckets
        n = torch.abs(relative_position)
    else:
        n = torch.max(-relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = n < max_exact
    scale = (num_buckets - max_exact) / math.log(max_distance / max_exact)
    val_if_large = max_exact + (torch.log(n.float() / max_exact) * scale).to(torch.long)
    val_if_large = torch.min(val_if_large, torch.full_like(val_if_large, num_buckets - 1))
    return ret + torch.where(is_small, n, val_if_large)


class ReceiptTokenizer:
    def __init__(self):
        words = {w for d in DISHES for w in d.split()} | set(PRICES) | {"total", "warung", "makan"}
        self.vocab = {
            w: i
            for i, w in enumerate(["[PAD]", "[CLS]", "[SEP]", "1x", "2x", "3x", *sorted(words)])
        }

    def __call__(self, receipts: list[list[tuple[str, list[int], int]]]) -> dict[str, torch.Tensor]:
        width = max(len(r) for r in receipts) + 2
        input_ids = torch.zeros(len(receipts), width, dtype=torch.long)
        bbox = torch.zeros(len(receipts), width, 4, dtype=torch.long)
        labels = torch.full((len(receipts), width), -100)
        for i, words in enumerate(receipts):
            n = len(words)
            input_ids[i, : n + 2] = torch.tensor([1, *(self.vocab[w] for w, _, _ in words), 2])
            bbox[i, 1 : n + 1] = torch.tensor([box for _, box, _ in words])
            bbox[i, n + 1] = torch.tensor([1000, 1000, 1000, 1000])
            labels[i, 1 : n + 1] = torch.tensor([lab for _, _, lab in words])
        attention_mask = (input_ids != 0).long()
        return {
            "input_ids": input_ids,
            "bbox": bbox,
            "attention_mask": attention_mask,
            "labels": labels,
        }


class LayoutLMv2Embeddings(nn.Module):
    def __init__(self, config: LayoutLMv2Config, vocab_size: int):
        super().__init__()
        grid, hidden = config.max_2d_position_embeddings, config.hidden_size
        self.word_embeddings = nn.Embedding(vocab_size, hidden, padding_idx=0)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, hidden)
        self.x_position_embeddings = nn.Embedding(grid, config.coordinate_size)
        self.y_position_embeddings = nn.Embedding(grid, config.coordinate_size)
        self.h_position_embeddings = nn.Embedding(grid, config.shape_size)
        self.w_position_embeddings = nn.Embedding(grid, config.shape_size)
        self.LayerNorm = nn.LayerNorm(hidden)

    def forward(self, input_ids: torch.Tensor, bbox: torch.Tensor, position_ids: torch.Tensor):
        left, upper = (
            self.x_position_embeddings(bbox[:, :, 0]),
            self.y_position_embeddings(bbox[:, :, 1]),
        )
        right, lower = (
            self.x_position_embeddings(bbox[:, :, 2]),
            self.y_position_embeddings(bbox[:, :, 3]),
        )
        h = self.h_position_embeddings(bbox[:, :, 3] - bbox[:, :, 1])
        w = self.w_position_embeddings(bbox[:, :, 2] - bbox[:, :, 0])
        spatial = torch.cat([left, upper, right, lower, h, w], dim=-1)
        embeddings = self.word_embeddings(input_ids) + self.position_embeddings(position_ids)
        return self.LayerNorm(embeddings + spatial)


class LayoutLMv2SelfAttention(nn.Module):
    def __init__(self, config: LayoutLMv2Config):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.qkv_linear = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=False)
        self.q_bias = nn.Parameter(torch.zeros(1, 1, config.hidden_size))
        self.v_bias = nn.Parameter(torch.zeros(1, 1, config.hidden_size))

    def transpose_for_scores(self, x: torch.Tensor) -> torch.Tensor:
        x = x.view(*x.shape[:-1], self.num_attention_heads, self.attention_head_size)
        return x.permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask, rel_pos=None, rel_2d_pos=None):
        q, k, v = self.qkv_linear(hidden_states).chunk(3, dim=-1)
        q = self.transpose_for_scores(q + self.q_bias) / math.sqrt(self.attention_head_size)
        k, v = self.transpose_for_scores(k), self.transpose_for_scores(v + self.v_bias)
        attention_scores = torch.matmul(q, k.transpose(-1, -2)) + rel_pos + rel_2d_pos
        min_value = torch.finfo(attention_scores.dtype).min
        attention_scores = attention_scores.masked_fill(attention_mask.to(torch.bool), min_value)
        attention_probs = F.softmax(attention_scores, dim=-1, dtype=torch.float32).type_as(v)
        context = torch.matmul(attention_probs, v).permute(0, 2, 1, 3)
        return context.reshape(*hidden_states.shape)


class LayoutLMv2Layer(nn.Module):
    def __init__(self, config: LayoutLMv2Config):
        super().__init__()
        self.attention = LayoutLMv2SelfAttention(config)
        self.attention_output = nn.Linear(config.hidden_size, config.hidden_size)
        self.attention_norm = nn.LayerNorm(config.hidden_size)
        self.intermediate = nn.Linear(config.hidden_size, config.intermediate_size)
        self.output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.output_norm = nn.LayerNorm(config.hidden_size)

    def forward(self, hidden_states, attention_mask, rel_pos, rel_2d_pos):
        attn = self.attention(hidden_states, attention_mask, rel_pos=rel_pos, rel_2d_pos=rel_2d_pos)
        hidden_states = self.attention_norm(hidden_states + self.attention_output(attn))
        ffn = self.output(F.gelu(self.intermediate(hidden_states)))
        return self.output_norm(hidden_states + ffn)


class LayoutLMv2Encoder(nn.Module):
    def __init__(self, config: LayoutLMv2Config):
        super().__init__()
        self.config, heads = config, config.num_attention_heads
        self.layer = nn.ModuleList(LayoutLMv2Layer(config) for _ in range(config.num_hidden_layers))
        self.rel_pos_bias = nn.Linear(config.rel_pos_bins, heads, bias=False)
        self.rel_pos_x_bias = nn.Linear(config.rel_2d_pos_bins, heads, bias=False)
        self.rel_pos_y_bias = nn.Linear(config.rel_2d_pos_bins, heads, bias=False)

    @staticmethod
    def _bias(coords: torch.Tensor, table: nn.Linear, bins: int, max_distance: int):
        relative = coords.unsqueeze(-2) - coords.unsqueeze(-1)
        rel = relative_position_bucket(relative, num_buckets=bins, max_distance=max_distance)
        return table.weight.t()[rel].permute(0, 3, 1, 2).contiguous()

    def forward(self, hidden_states, attention_mask, bbox, position_ids):
        cfg = self.config
        rel_pos = self._bias(position_ids, self.rel_pos_bias, cfg.rel_pos_bins, cfg.max_rel_pos)
        bins, max_rel = cfg.rel_2d_pos_bins, cfg.max_rel_2d_pos
        rel_2d_pos = self._bias(bbox[:, :, 0], self.rel_pos_x_bias, bins, max_rel)
        rel_2d_pos = rel_2d_pos + self._bias(bbox[:, :, 3], self.rel_pos_y_bias, bins, max_rel)
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states, attention_mask, rel_pos, rel_2d_pos)
        return hidden_states


class LayoutLMv2ForTokenClassification(nn.Module):
    def __init__(self, config: LayoutLMv2Config, vocab_size: int):
        super().__init__()
        self.embeddings = LayoutLMv2Embeddings(config, vocab_size)
        self.encoder = LayoutLMv2Encoder(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, input_ids, bbox, attention_mask, labels=None):
        position_ids = torch.arange(input_ids.shape[1]).expand_as(input_ids)
        extended_attention_mask = attention_mask[:, None, None, :] == 0
        embedding_output = self.embeddings(input_ids, bbox, position_ids)
        hidden = self.encoder(embedding_output, extended_attention_mask, bbox, position_ids)
        logits = self.classifier(hidden)
        if labels is None:
            return None, logits
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten()), logits


def synthetic_receipt(rng: random.Random):
    words, y = [("warung", [350, 20, 500, 50], 0), ("makan", [510, 20, 650, 50], 0)], 80
    for _ in range(rng.randint(1, 6)):
        dish, price = rng.choice(DISHES).split(), rng.choice(PRICES)
        words.append((f"{rng.randint(1, 3)}x", [40, y, 90, y + 30], 1))
        words += [
            (w, [110 + 130 * j, y, 230 + 130 * j, y + 30], 3 if j else 2)
            for j, w in enumerate(dish)
        ]
        words.append((price, [780, y, 960, y + 30], 4))
        y += 50
    total = [
        ("total", [40, y + 20, 200, y + 50], 0),
        (rng.choice(PRICES), [780, y + 20, 960, y + 50], 5),
    ]
    return words + total


def main() -> None:
    torch.manual_seed(0)
    rng, config, tokenizer = random.Random(0), LayoutLMv2Config(), ReceiptTokenizer()
    model = LayoutLMv2ForTokenClassification(config, len(tokenizer.vocab))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(150):
        loss, _ = model(**tokenizer([synthetic_receipt(rng) for _ in range(16)]))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.3f}")
    model.eval()
    receipts = [synthetic_receipt(rng) for _ in range(64)]
    with torch.no_grad():
        batch = tokenizer(receipts)
        _, logits = model(**batch)
        _, alone = model(**tokenizer(receipts[:1]))
    correct = (logits.argmax(-1) == batch["labels"])[batch["labels"] != -100]
    print(f"token accuracy {correct.float().mean().item():.3f}")
    gap = (alone[0] - logits[0, : alone.shape[1]]).abs().max().item()
    print(f"first receipt alone vs batched: {gap:.2e}")


if __name__ == "__main__":
    main()
