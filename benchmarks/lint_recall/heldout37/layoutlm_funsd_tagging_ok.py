"""LayoutLM token classification on FUNSD-style forms: words, 2-D boxes and BIO entity tags.

Layout of microsoft/unilm layoutlm (LayoutLMEmbeddings, LayoutLMForTokenClassification).
Source: rasbt/LLMs-from-scratch#1061 (conventions.md §3 item 14), conventions.md §1 (SDPA row,
direction cheat-sheet) and §5 item 1, seed self_attention_mask_guide.txt §2.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

LABELS = ["O", "B-HEADER", "I-HEADER", "B-QUESTION", "I-QUESTION", "B-ANSWER", "I-ANSWER"]


@dataclass
class LayoutLMConfig:
    vocab_size: int = 300
    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    intermediate_size: int = 128
    max_position_embeddings: int = 128
    max_2d_position_embeddings: int = 1024
    hidden_dropout_prob: float = 0.1
    num_labels: int = len(LABELS)
    pad_token_id: int = 0
    cls_token_id: int = 1
    sep_token_id: int = 2


class FormTokenizer:
    def __init__(self, cfg: LayoutLMConfig) -> None:
        self.cfg = cfg

    def wordpieces(self, word: str) -> list[int]:
        pieces = [word[i : i + 4] for i in range(0, len(word), 4)]
        return [3 + sum(map(ord, p)) % (self.cfg.vocab_size - 3) for p in pieces]

    def __call__(self, pages: list[dict]) -> dict[str, torch.Tensor]:
        rows = []
        for page in pages:
            ids, boxes, labels = [self.cfg.cls_token_id], [[0, 0, 0, 0]], [-100]
            for word, box, tag in zip(page["words"], page["boxes"], page["tags"], strict=True):
                for j, piece in enumerate(self.wordpieces(word)):
                    (
                        ids.append(piece),
                        boxes.append(box),
                        labels.append(LABELS.index(tag) if j == 0 else -100),
                    )
            (
                ids.append(self.cfg.sep_token_id),
                boxes.append([1000, 1000, 1000, 1000]),
                labels.append(-100),
            )
            rows.append((ids, boxes, labels))
        width = max(len(r[0]) for r in rows)
        out = {
            "input_ids": torch.full((len(rows), width), self.cfg.pad_token_id, dtype=torch.long),
            "bbox": torch.zeros((len(rows), width, 4), dtype=torch.long),
            "attention_mask": torch.zeros((len(rows), width), dtype=torch.long),
            "labels": torch.full((len(rows), width), -100, dtype=torch.long),
        }
        for i, (ids, boxes, labels) in enumerate(rows):
            n = len(ids)
            out["input_ids"][i, :n], out["bbox"][i, :n] = torch.tensor(ids), torch.tensor(boxes)
            out["attention_mask"][i, :n], out["labels"][i, :n] = 1, torch.tensor(labels)
        return out


class LayoutLMEmbeddings(nn.Module):
    def __init__(self, cfg: LayoutLMConfig) -> None:
        super().__init__()
        h, m = cfg.hidden_size, cfg.max_2d_position_embeddings
        self.word_embeddings = nn.Embedding(cfg.vocab_size, h, padding_idx=cfg.pad_token_id)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, h)
        self.x_position_embeddings, self.y_position_embeddings = (
            nn.Embedding(m, h),
            nn.Embedding(m, h),
        )
        self.h_position_embeddings, self.w_position_embeddings = (
            nn.Embedding(m, h),
            nn.Embedding(m, h),
        )
        self.token_type_embeddings = nn.Embedding(2, h)
        self.LayerNorm = nn.LayerNorm(h, eps=1e-12)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor, bbox: torch.Tensor) -> torch.Tensor:
        position_ids = torch.arange(input_ids.shape[1], device=input_ids.device)[None]
        embeddings = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(position_ids)
            + self.x_position_embeddings(bbox[:, :, 0])
            + self.y_position_embeddings(bbox[:, :, 1])
            + self.x_position_embeddings(bbox[:, :, 2])
            + self.y_position_embeddings(bbox[:, :, 3])
            + self.h_position_embeddings(bbox[:, :, 3] - bbox[:, :, 1])
            + self.w_position_embeddings(bbox[:, :, 2] - bbox[:, :, 0])
            + self.token_type_embeddings(torch.zeros_like(input_ids))
        )
        return self.dropout(self.LayerNorm(embeddings))


class LayoutLMSelfAttention(nn.Module):
    def __init__(self, cfg: LayoutLMConfig) -> None:
        super().__init__()
        self.num_heads = cfg.num_attention_heads
        self.head_size = cfg.hidden_size // cfg.num_attention_heads
        self.query = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.key = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.value = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.dropout_prob = cfg.hidden_dropout_prob

    def transpose_for_scores(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0], x.shape[1], self.num_heads, self.head_size).transpose(1, 2)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        q = self.transpose_for_scores(self.query(hidden_states))
        k = self.transpose_for_scores(self.key(hidden_states))
        v = self.transpose_for_scores(self.value(hidden_states))
        context = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attention_mask, dropout_p=self.dropout_prob if self.training else 0.0
        )
        return context.transpose(1, 2).flatten(2)


class LayoutLMLayer(nn.Module):
    def __init__(self, cfg: LayoutLMConfig) -> None:
        super().__init__()
        h = cfg.hidden_size
        self.attention = LayoutLMSelfAttention(cfg)
        self.attention_output = nn.Linear(h, h)
        self.attention_norm = nn.LayerNorm(h, eps=1e-12)
        self.intermediate = nn.Linear(h, cfg.intermediate_size)
        self.output = nn.Linear(cfg.intermediate_size, h)
        self.output_norm = nn.LayerNorm(h, eps=1e-12)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        attn = self.dropout(self.attention_output(self.attention(hidden_states, attention_mask)))
        hidden_states = self.attention_norm(hidden_states + attn)
        ffn = self.dropout(self.output(F.gelu(self.intermediate(hidden_states))))
        return self.output_norm(hidden_states + ffn)


class LayoutLMEncoder(nn.Module):
    def __init__(self, cfg: LayoutLMConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(LayoutLMLayer(cfg) for _ in range(cfg.num_hidden_layers))

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states, attention_mask)
        return hidden_states


class LayoutLMModel(nn.Module):
    def __init__(self, cfg: LayoutLMConfig) -> None:
        super().__init__()
        self.embeddings = LayoutLMEmbeddings(cfg)
        self.encoder = LayoutLMEncoder(cfg)

    def forward(self, input_ids, bbox, attention_mask=None):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        padding_mask = ~attention_mask.bool()
        embedding_output = self.embeddings(input_ids, bbox)
        sequence_output = self.encoder(embedding_output, attention_mask=~padding_mask[:, None, None, :])
        return sequence_output.masked_fill(padding_mask[..., None], 0.0)


class LayoutLMForTokenClassification(nn.Module):
    def __init__(self, cfg: LayoutLMConfig) -> None:
        super().__init__()
        self.layoutlm = LayoutLMModel(cfg)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
        self.classifier = nn.Linear(cfg.hidden_size, cfg.num_labels)

    def forward(self, input_ids, bbox, attention_mask=None, labels=None):
        sequence_output = self.layoutlm(input_ids, bbox, attention_mask=attention_mask)
        logits = self.classifier(self.dropout(sequence_output))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(
                logits.view(-1, logits.shape[-1]), labels.view(-1), ignore_index=-100
            )
        return loss, logits


FIELDS = ["name", "date", "phone", "company", "signature", "address"]


def synthetic_page(gen: torch.Generator) -> dict:
    words, boxes, tags = (
        ["REGISTRATION", "FORM"],
        [[380, 40, 520, 70], [530, 40, 600, 70]],
        ["B-HEADER", "I-HEADER"],
    )
    n_fields = int(torch.randint(1, 5, (1,), generator=gen))
    for row, f in enumerate(torch.randperm(len(FIELDS), generator=gen)[:n_fields].tolist()):
        y = 120 + 60 * row
        words += [FIELDS[f].capitalize() + ":"]
        boxes.append([60, y, 200, y + 25])
        tags.append("B-QUESTION")
        value = [
            f"{FIELDS[f][:3]}{int(torch.randint(0, 99, (1,), generator=gen))}"
            for _ in range(1 + f % 3)
        ]
        for j, v in enumerate(value):
            words.append(v)
            boxes.append([260 + 90 * j, y, 340 + 90 * j, y + 25])
            tags.append("B-ANSWER" if j == 0 else "I-ANSWER")
    return {"words": words, "boxes": boxes, "tags": tags}


def entity_f1(pred: torch.Tensor, gold: torch.Tensor) -> float:
    keep = gold != -100
    p, g = pred[keep], gold[keep]
    tp = ((p == g) & (g != 0)).sum().item()
    return 2 * tp / max(1, (p != 0).sum().item() + (g != 0).sum().item())


if __name__ == "__main__":
    torch.manual_seed(0)
    config = LayoutLMConfig()
    tokenizer, model = FormTokenizer(config), LayoutLMForTokenClassification(config)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    for step in range(100):
        batch = tokenizer([synthetic_page(gen) for _ in range(16)])
        loss, _ = model(**batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 25 == 0:
            print(f"step {step} loss {loss.item():.3f}")
    model.eval()
    batch = tokenizer([synthetic_page(gen) for _ in range(32)])
    with torch.no_grad():
        _, logits = model(**batch)
    print(f"tag F1 {entity_f1(logits.argmax(-1), batch['labels']):.3f}")
    lengths = batch["attention_mask"].sum(1)
    i = int(lengths.argmin())
    single = {k: v[i : i + 1, : lengths[i]] for k, v in batch.items()}
    with torch.no_grad():
        _, alone = model(**single)
    print("alone vs batched", (alone[0] - logits[i, : lengths[i]]).abs().max().item())
