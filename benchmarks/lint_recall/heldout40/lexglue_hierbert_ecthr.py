"""Hierarchical BERT for ECtHR violation prediction (multi-label, LexGLUE task A style).

A case is a list of fact paragraphs; each paragraph is encoded by a small BERT and read at
``[CLS]``, the paragraph vectors get segment position embeddings and a two-layer segment encoder,
and the case vector is an attention pooling over the paragraphs, after coastalcph/lex-glue's
``models/hierbert.py`` (``HierarchicalBert`` with ``max_segments``, ``max_segment_length``,
``seg_pos_embeddings`` and ``seg_encoder``). Labels are the violated articles; training uses
``BCEWithLogitsLoss`` and evaluation micro- and macro-F1 as in LexGLUE.

Source: seed self_attention_mask_guide.txt §3 (常见误区) and §7 Q3, pytorch/pytorch#103963
(conventions.md §3 item 6), conventions.md §1 (direction cheat-sheet)
"""

import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

ARTICLES = ["2", "3", "5", "6", "8", "9", "10", "11", "14", "P1-1"]
PAD_ID, CLS_ID = 0, 1


@dataclass
class HierBertConfig:
    vocab_size: int = 160
    hidden_size: int = 64
    num_heads: int = 4
    max_segments: int = 6
    max_segment_length: int = 16
    num_labels: int = len(ARTICLES)


class BertSelfAttention(nn.Module):
    def __init__(self, hidden_size, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(hidden_size, 3 * hidden_size)
        self.out = nn.Linear(hidden_size, hidden_size)

    def forward(self, hidden_states, extended_attention_mask):
        B, T, C = hidden_states.shape
        q, k, v = self.qkv(hidden_states).view(B, T, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / (C // self.num_heads) ** 0.5
        probs = (scores + extended_attention_mask).softmax(dim=-1)
        return self.out((probs @ v).transpose(1, 2).reshape(B, T, C))


class BertLayer(nn.Module):
    def __init__(self, hidden_size, num_heads):
        super().__init__()
        self.attention = BertSelfAttention(hidden_size, num_heads)
        self.ln1 = nn.LayerNorm(hidden_size)
        self.ffn = nn.Sequential(
            nn.Linear(hidden_size, 4 * hidden_size),
            nn.GELU(),
            nn.Linear(4 * hidden_size, hidden_size),
        )
        self.ln2 = nn.LayerNorm(hidden_size)

    def forward(self, hidden_states, extended_attention_mask):
        hidden_states = self.ln1(
            hidden_states + self.attention(hidden_states, extended_attention_mask)
        )
        return self.ln2(hidden_states + self.ffn(hidden_states))


class BertModel(nn.Module):
    def __init__(self, config: HierBertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = nn.Embedding(config.max_segment_length, config.hidden_size)
        self.embeddings_ln = nn.LayerNorm(config.hidden_size)
        self.layers = nn.ModuleList(
            [BertLayer(config.hidden_size, config.num_heads) for _ in range(2)]
        )

    def forward(self, input_ids, attention_mask):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        hidden_states = self.embeddings_ln(
            self.word_embeddings(input_ids) + self.position_embeddings(positions)
        )
        dtype = hidden_states.dtype
        extended_attention_mask = (1.0 - attention_mask[:, None, None, :].to(dtype)) * torch.finfo(
            dtype
        ).min
        for layer in self.layers:
            hidden_states = layer(hidden_states, extended_attention_mask)
        return hidden_states


class AttentionPooling(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.proj = nn.Linear(hidden_size, hidden_size)
        self.context = nn.Linear(hidden_size, 1, bias=False)

    def forward(self, segment_outputs, segment_mask):
        scores = self.context(torch.tanh(self.proj(segment_outputs))).squeeze(-1)
        scores = scores * segment_mask  # expect: MC520 lexglue
        weights = torch.softmax(scores, dim=-1)
        return torch.einsum("bs,bsh->bh", weights, segment_outputs)


class HierarchicalBert(nn.Module):
    def __init__(self, config: HierBertConfig):
        super().__init__()
        self.config = config
        self.encoder = BertModel(config)
        self.seg_pos_embeddings = nn.Embedding(
            config.max_segments + 1, config.hidden_size, padding_idx=0
        )
        layer = nn.TransformerEncoderLayer(
            config.hidden_size, config.num_heads, 4 * config.hidden_size, batch_first=True
        )
        self.seg_encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.pooler = AttentionPooling(config.hidden_size)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, input_ids, attention_mask, labels=None):
        B, S, L = input_ids.shape
        encoder_outputs = self.encoder(input_ids.view(B * S, L), attention_mask.view(B * S, L))
        segment_outputs = encoder_outputs[:, 0].view(B, S, -1)
        segment_mask = (attention_mask.sum(dim=-1) > 0).float()
        seg_positions = torch.arange(1, S + 1, device=input_ids.device)[None] * segment_mask.long()
        segment_outputs = segment_outputs + self.seg_pos_embeddings(seg_positions)
        segment_outputs = self.seg_encoder(segment_outputs, src_key_padding_mask=segment_mask == 0)
        logits = self.classifier(self.pooler(segment_outputs, segment_mask))
        loss = None if labels is None else F.binary_cross_entropy_with_logits(logits, labels)
        return loss, logits


def make_cases(n, config, rng):
    triggers = {a: list(range(10 + 4 * i, 14 + 4 * i)) for i, a in enumerate(ARTICLES)}
    input_ids = torch.zeros(n, config.max_segments, config.max_segment_length, dtype=torch.long)
    labels = torch.zeros(n, config.num_labels)
    for i in range(n):
        violated = rng.sample(range(config.num_labels), rng.randint(1, 2))
        num_paragraphs = rng.randint(2, config.max_segments)
        for s in range(num_paragraphs):
            length = rng.randint(6, config.max_segment_length - 1)
            words = [rng.randint(60, config.vocab_size - 1) for _ in range(length)]
            input_ids[i, s, : length + 1] = torch.tensor([CLS_ID, *words])
        for a in violated:
            s = rng.randrange(num_paragraphs)
            for pos in rng.sample(range(1, 6), 3):
                input_ids[i, s, pos] = rng.choice(triggers[ARTICLES[a]])
            labels[i, a] = 1.0
    return input_ids, (input_ids != PAD_ID).long(), labels


def f1_scores(pred, gold):
    tp, fp, fn = (pred * gold).sum(0), (pred * (1 - gold)).sum(0), ((1 - pred) * gold).sum(0)
    micro = 2 * tp.sum() / (2 * tp.sum() + fp.sum() + fn.sum()).clamp(min=1)
    macro = (2 * tp / (2 * tp + fp + fn).clamp(min=1)).mean()
    return micro.item(), macro.item()


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = random.Random(0)
    config = HierBertConfig()
    train_ids, train_mask, train_labels = make_cases(512, config, rng)
    test_ids, test_mask, test_labels = make_cases(128, config, rng)
    model = HierarchicalBert(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for epoch in range(8):
        for start in range(0, 512, 32):
            sl = slice(start, start + 32)
            loss, _ = model(train_ids[sl], train_mask[sl], train_labels[sl])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        _, logits = model(test_ids, test_mask)
        n = int(test_mask[0].any(dim=-1).sum())
        _, trimmed = model(test_ids[:1, :n], test_mask[:1, :n])
    micro, macro = f1_scores((logits > 0).float(), test_labels)
    print(f"micro-F1 {micro:.3f} macro-F1 {macro:.3f}")
    print(f"first case without its empty paragraph slots: {(trimmed - logits[:1]).abs().max():.2e}")
