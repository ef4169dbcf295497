"""Prefix tuning of a frozen BERT-style encoder for sequence classification.

Written like PEFT's prompt-learning path: a ``PrefixTuningConfig`` (a ``PromptLearningConfig``)
sizes the virtual tokens, ``PrefixEncoder`` maps them (optionally through a two-layer MLP) to one
key/value prefix per layer, ``get_prompt`` reshapes that into ``past_key_values``, and
``PeftModelForSequenceClassification.forward`` prepends ones for the virtual tokens to the
``attention_mask`` before calling the frozen base model, whose self-attention concatenates the
prefix keys and values in front of its own.

Source: seed masked_fill_inplace.txt (作用), seed self_attention_mask_guide.txt §2, conventions.md §1 (HF 2-D attention_mask row, direction cheat-sheet)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class BertConfig:
    vocab_size: int = 30
    hidden_size: int = 64
    num_attention_heads: int = 4
    num_hidden_layers: int = 2
    max_position_embeddings: int = 64
    num_labels: int = 2
    pad_token_id: int = 0


@dataclass
class PromptLearningConfig:
    num_virtual_tokens: int = 8
    token_dim: int = 64
    num_transformer_submodules: int = 1
    num_attention_heads: int = 4
    num_layers: int = 2


@dataclass
class PrefixTuningConfig(PromptLearningConfig):
    encoder_hidden_size: int = 64
    prefix_projection: bool = True
    peft_type: str = field(default="PREFIX_TUNING")


class BertSelfAttention(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.num_attention_heads = cfg.num_attention_heads
        self.attention_head_size = cfg.hidden_size // cfg.num_attention_heads
        self.query = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.key = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.value = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def transpose_for_scores(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0], x.shape[1], self.num_attention_heads, self.attention_head_size).permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask=None, past_key_value=None):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        if past_key_value is not None:
            key_layer = torch.cat([past_key_value[0], key_layer], dim=2)
            value_layer = torch.cat([past_key_value[1], value_layer], dim=2)
        scores = query_layer @ key_layer.transpose(-1, -2) / math.sqrt(self.attention_head_size)
        if attention_mask is not None:
            scores = scores.masked_fill(attention_mask, torch.finfo(scores.dtype).min)  # expect: MC519 prefixtuning
        context = scores.softmax(dim=-1) @ value_layer
        return context.permute(0, 2, 1, 3).reshape(hidden_states.shape)


class BertLayer(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.attention = BertSelfAttention(cfg)
        self.attention_output = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.ln1, self.ln2 = nn.LayerNorm(cfg.hidden_size), nn.LayerNorm(cfg.hidden_size)
        self.intermediate = nn.Sequential(nn.Linear(cfg.hidden_size, 4 * cfg.hidden_size), nn.GELU(), nn.Linear(4 * cfg.hidden_size, cfg.hidden_size))

    def forward(self, hidden_states, attention_mask, past_key_value=None):
        attn = self.attention_output(self.attention(hidden_states, attention_mask=attention_mask, past_key_value=past_key_value))
        hidden_states = self.ln1(hidden_states + attn)
        return self.ln2(hidden_states + self.intermediate(hidden_states))


class BertForSequenceClassification(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.config = cfg
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size, padding_idx=cfg.pad_token_id)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.embeddings_ln = nn.LayerNorm(cfg.hidden_size)
        self.layer = nn.ModuleList(BertLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.pooler = nn.Sequential(nn.Linear(cfg.hidden_size, cfg.hidden_size), nn.Tanh())
        self.classifier = nn.Linear(cfg.hidden_size, cfg.num_labels)

    def forward(self, input_ids, attention_mask, labels=None, past_key_values=None):
        T = input_ids.shape[1]
        hidden_states = self.embeddings_ln(self.word_embeddings(input_ids) + self.position_embeddings(torch.arange(T)))
        keep = attention_mask[:, None, None, :].bool()
        for i, layer in enumerate(self.layer):
            hidden_states = layer(hidden_states, keep, None if past_key_values is None else past_key_values[i])
        logits = self.classifier(self.pooler(hidden_states[:, 0]))
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return {"loss": loss, "logits": logits}


class PrefixEncoder(nn.Module):
    def __init__(self, config: PrefixTuningConfig):
        super().__init__()
        self.prefix_projection = config.prefix_projection
        out_dim = config.num_layers * 2 * config.token_dim
        self.embedding = nn.Embedding(config.num_virtual_tokens, config.token_dim if config.prefix_projection else out_dim)
        if config.prefix_projection:
            self.transform = nn.Sequential(
                nn.Linear(config.token_dim, config.encoder_hidden_size), nn.Tanh(), nn.Linear(config.encoder_hidden_size, out_dim)
            )

    def forward(self, prefix: torch.Tensor) -> torch.Tensor:
        if self.prefix_projection:
            return self.transform(self.embedding(prefix))
        return self.embedding(prefix)


class PeftModelForSequenceClassification(nn.Module):
    def __init__(self, model: BertForSequenceClassification, peft_config: PrefixTuningConfig):
        super().__init__()
        self.base_model = model.requires_grad_(False)
        self.peft_config = peft_config
        self.prompt_encoder = PrefixEncoder(peft_config)
        self.modules_to_save = nn.ModuleDict({"classifier": model.classifier.requires_grad_(True)})
        self.register_buffer("prompt_tokens", torch.arange(peft_config.num_virtual_tokens).long(), persistent=False)

    def get_prompt(self, batch_size: int):
        cfg = self.peft_config
        prompt_tokens = self.prompt_tokens.unsqueeze(0).expand(batch_size, -1)
        past_key_values = self.prompt_encoder(prompt_tokens)
        past_key_values = past_key_values.view(
            batch_size, cfg.num_virtual_tokens, cfg.num_layers * 2, cfg.num_attention_heads, cfg.token_dim // cfg.num_attention_heads
        )
        return past_key_values.permute([2, 0, 3, 1, 4]).split(2)

    def forward(self, input_ids=None, attention_mask=None, labels=None, **kwargs):
        batch_size = input_ids.shape[0]
        prefix_attention_mask = torch.ones(batch_size, self.peft_config.num_virtual_tokens, dtype=attention_mask.dtype)
        attention_mask = torch.cat((prefix_attention_mask, attention_mask), dim=1)
        kwargs["past_key_values"] = self.get_prompt(batch_size)
        return self.base_model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, **kwargs)


def make_batch(n: int, cfg: BertConfig, g: torch.Generator) -> dict:
    lengths = torch.randint(4, 15, (n,), generator=g)
    input_ids = torch.zeros(n, int(lengths.max()), dtype=torch.long)
    labels = torch.randint(0, 2, (n,), generator=g)
    for i, L in enumerate(lengths.tolist()):
        body = torch.randint(3, cfg.vocab_size, (L - 1,), generator=g)
        body[body == 2] = 3
        if labels[i]:
            body[int(torch.randint(0, L - 1, (1,), generator=g))] = 2
        input_ids[i, 0] = 1
        input_ids[i, 1:L] = body
    return {"input_ids": input_ids, "attention_mask": (input_ids != cfg.pad_token_id).long(), "labels": labels}


def main() -> None:
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    cfg = BertConfig()
    base = BertForSequenceClassification(cfg)
    model = PeftModelForSequenceClassification(base, PrefixTuningConfig())
    trainable = [p for p in model.parameters() if p.requires_grad]
    print(f"trainable params: {sum(p.numel() for p in trainable)} of {sum(p.numel() for p in model.parameters())}")
    optimizer = torch.optim.AdamW(trainable, lr=5e-3)
    for step in range(150):
        out = model(**make_batch(32, cfg, g))
        optimizer.zero_grad()
        out["loss"].backward()
        optimizer.step()
        if step % 50 == 0 or step == 149:
            print(f"step {step:3d} loss {out['loss'].item():.4f}")

    model.eval()
    batch = make_batch(256, cfg, g)
    with torch.no_grad():
        accuracy = (model(**batch)["logits"].argmax(-1) == batch["labels"]).float().mean().item()
        n = int(batch["attention_mask"][0].sum())
        alone = model(input_ids=batch["input_ids"][:1, :n], attention_mask=batch["attention_mask"][:1, :n])["logits"]
        together = model(input_ids=batch["input_ids"][:1], attention_mask=batch["attention_mask"][:1])["logits"]
    print(f"eval accuracy {accuracy:.3f}; first example padded vs alone: {(alone - together).abs().max().item():.3g}")


if __name__ == "__main__":
    main()
