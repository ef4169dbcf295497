"""Subscriber churn prediction from account event logs, written in the transformers 4.3x layout.

``ChurnConfig``, ``ChurnEmbeddings`` over event type and days-before-snapshot, an encoder over the
account token and the events, and a ``ChurnQueryPooler`` whose learned query reads the recent
events with eager attention; the 4-D masks are made the way ``modeling_llama``'s
``_expand_mask`` / ``_prepare_decoder_attention_mask`` made them. Synthetic prepaid / postpaid
subscribers, some of them with no event in the log.

Source: huggingface/transformers PR #27114 and NVIDIA-NeMo/Automodel PR #2658 (conventions.md
section 3 items 15 and 16); conventions.md section 2.3 and section 5 item 4.
"""

import math
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

EVENTS = ["[PAD]", "call_drop", "complaint", "data_heavy", "topup", "roaming", "downgrade", "late_payment", "upgrade"]


@dataclass
class ChurnConfig:
    num_event_types: int = len(EVENTS)
    num_plans: int = 2
    hidden_size: int = 48
    num_attention_heads: int = 4
    num_hidden_layers: int = 2
    max_events: int = 24
    recency_window: int = 90
    snapshot_day: int = 365


def simulate_subscriber(rng, cfg):
    plan = rng.randrange(cfg.num_plans)
    n = 0 if rng.random() < 0.06 else rng.randint(1, cfg.max_events)
    events = sorted(((rng.randrange(cfg.snapshot_day), rng.randrange(1, len(EVENTS))) for _ in range(n)))
    risk = -1.2 + 0.6 * plan
    for day, etype in events:
        if cfg.snapshot_day - day <= cfg.recency_window:
            risk += {1: 0.5, 2: 0.9, 6: 1.2, 7: 0.7, 8: -1.0, 4: -0.4}.get(etype, 0.0)
    if not any(cfg.snapshot_day - d <= cfg.recency_window for d, _ in events):
        risk += 1.5
    return plan, events, int(rng.random() < 1 / (1 + math.exp(-risk)))


def collate(samples, cfg):
    b = len(samples)
    event_ids = torch.zeros(b, cfg.max_events, dtype=torch.long)
    event_days = torch.zeros(b, cfg.max_events, dtype=torch.long)
    event_mask = torch.zeros(b, cfg.max_events, dtype=torch.long)
    for i, (_, events, _) in enumerate(samples):
        for j, (day, etype) in enumerate(events):
            event_ids[i, j], event_days[i, j], event_mask[i, j] = etype, day, 1
    return {
        "plan": torch.tensor([p for p, _, _ in samples]),
        "event_ids": event_ids,
        "event_days": event_days,
        "event_mask": event_mask,
        "labels": torch.tensor([y for _, _, y in samples], dtype=torch.float),
    }


def _expand_mask(mask, dtype, tgt_len=None):
    bsz, src_len = mask.size()
    tgt_len = tgt_len if tgt_len is not None else src_len
    expanded_mask = mask[:, None, None, :].expand(bsz, 1, tgt_len, src_len).to(dtype)
    inverted_mask = 1.0 - expanded_mask
    return inverted_mask.masked_fill(inverted_mask.to(torch.bool), torch.finfo(dtype).min)


def _make_recency_mask(days_before, window, dtype, tgt_len):
    stale = days_before > window
    mask = torch.zeros(stale.shape, dtype=dtype).masked_fill(stale, torch.finfo(dtype).min)
    return mask[:, None, None, :].expand(-1, 1, tgt_len, -1)


class ChurnEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.event_embeddings = nn.Embedding(config.num_event_types, config.hidden_size, padding_idx=0)
        self.plan_embeddings = nn.Embedding(config.num_plans, config.hidden_size)
        self.age_proj = nn.Linear(1, config.hidden_size)
        self.norm = nn.LayerNorm(config.hidden_size)

    def forward(self, plan, event_ids, days_before):
        events = self.event_embeddings(event_ids) + self.age_proj(days_before.unsqueeze(-1).float() / 365.0)
        return self.norm(torch.cat([self.plan_embeddings(plan).unsqueeze(1), events], 1))


class ChurnQueryPooler(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.query = nn.Parameter(torch.randn(1, 1, config.hidden_size) * 0.02)
        self.k_proj = nn.Linear(config.hidden_size, config.hidden_size)
        self.v_proj = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden_states, attention_mask):
        bsz, src_len, _ = hidden_states.shape
        q = self.query.expand(bsz, -1, -1).view(bsz, 1, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(hidden_states).view(bsz, src_len, self.num_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(hidden_states).view(bsz, src_len, self.num_heads, self.head_dim).transpose(1, 2)
        attn_weights = q @ k.transpose(2, 3) / math.sqrt(self.head_dim)
        attn_weights = attn_weights + attention_mask
        attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(q.dtype)
        return (attn_weights @ v).transpose(1, 2).reshape(bsz, -1)


class ChurnModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embeddings = ChurnEmbeddings(config)
        layer = nn.TransformerEncoderLayer(config.hidden_size, config.num_attention_heads, 2 * config.hidden_size,
                                           dropout=0.1, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, config.num_hidden_layers, enable_nested_tensor=False)
        self.pooler = ChurnQueryPooler(config)
        self.classifier = nn.Linear(2 * config.hidden_size, 1)

    def _prepare_pooler_attention_mask(self, event_mask, days_before, dtype):
        combined_attention_mask = _make_recency_mask(days_before, self.config.recency_window, dtype, tgt_len=1)
        expanded_attn_mask = _expand_mask(event_mask, dtype, tgt_len=1)
        return expanded_attn_mask.masked_fill(combined_attention_mask.bool(), torch.finfo(dtype).min)

    def forward(self, plan, event_ids, event_days, event_mask, labels=None):
        days_before = self.config.snapshot_day - event_days
        hidden = self.embeddings(plan, event_ids, days_before)
        account_keep = torch.ones_like(event_mask[:, :1])
        key_padding_mask = torch.cat([account_keep, event_mask], 1) == 0
        hidden = self.encoder(hidden, src_key_padding_mask=key_padding_mask)
        pooler_mask = self._prepare_pooler_attention_mask(event_mask, days_before, hidden.dtype)
        pooled = self.pooler(hidden[:, 1:], attention_mask=pooler_mask)
        logits = self.classifier(torch.cat([hidden[:, 0], pooled], -1)).squeeze(-1)
        loss = F.binary_cross_entropy_with_logits(logits, labels) if labels is not None else None
        return {"loss": loss, "logits": logits}


def auc(scores, labels):
    pos, neg = scores[labels == 1], scores[labels == 0]
    return (pos[:, None] > neg[None, :]).float().mean().item()


def main():
    torch.manual_seed(0)
    rng = random.Random(0)
    cfg = ChurnConfig()
    train = [simulate_subscriber(rng, cfg) for _ in range(3000)]
    test = [simulate_subscriber(rng, cfg) for _ in range(1000)]
    model = ChurnModel(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(5):
        model.train()
        rng.shuffle(train)
        total = 0.0
        for s in range(0, len(train), 64):
            loss = model(**collate(train[s : s + 64], cfg))["loss"]
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            total += loss.item()
        model.eval()
        with torch.no_grad():
            batch = collate(test, cfg)
            logits = model(**batch)["logits"]
        print(f"epoch {epoch} loss {total / math.ceil(len(train) / 64):.4f} test AUC {auc(logits, batch['labels']):.3f}")


if __name__ == "__main__":
    main()
