"""Supervised fine-tuning of a small causal LM with LoRA adapters and sequence packing.

Laid out like a PEFT fine-tuning script: a ``LoraConfig`` names the projections that receive
low-rank adapters, ``inject_adapters`` swaps them in and freezes everything else, and a packing
collator concatenates tokenized examples into rows of ``max_length`` tokens with per-document
position ids, labels that never cross a document boundary, and the document lengths of each row.

Source: seed self_attention_mask_guide.txt §6 (create_block_mask), conventions.md §1 (varlen_attn and xformers BlockDiagonalMask rows)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class LoraConfig:
    r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.0
    target_modules: tuple[str, ...] = ("q_proj", "v_proj", "o_proj")

    @property
    def scaling(self) -> float:
        return self.lora_alpha / self.r


@dataclass
class ModelConfig:
    vocab_size: int = 40
    hidden_size: int = 64
    num_heads: int = 4
    num_layers: int = 2
    max_position_embeddings: int = 64


@dataclass
class PackingConfig:
    max_length: int = 48
    eos_token_id: int = 1
    pad_token_id: int = 0
    label_pad_token_id: int = -100


class LoraLinear(nn.Module):
    def __init__(self, base: nn.Linear, cfg: LoraConfig):
        super().__init__()
        self.base = base
        self.lora_A = nn.Linear(base.in_features, cfg.r, bias=False)
        self.lora_B = nn.Linear(cfg.r, base.out_features, bias=False)
        self.lora_dropout = nn.Dropout(cfg.lora_dropout)
        self.scaling = cfg.scaling
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.lora_B(self.lora_A(self.lora_dropout(x))) * self.scaling


def inject_adapters(model: nn.Module, cfg: LoraConfig) -> nn.Module:
    for _, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if child_name in cfg.target_modules and isinstance(child, nn.Linear):
                setattr(module, child_name, LoraLinear(child, cfg))
    for name, param in model.named_parameters():
        param.requires_grad = "lora_" in name
    return model


def packed_attention_bias(seq_lens: list[int], total: int, dtype: torch.dtype) -> torch.Tensor:
    bias = torch.zeros(total, total, dtype=dtype)
    doc = torch.full((total,), -1, dtype=torch.long)
    start = 0
    for i, n in enumerate(seq_lens):
        bias[start:start + n, start:start + n] = 0.0
        doc[start:start + n] = i
        start += n
    bias[doc[:, None] != doc[None, :]] = float("-inf")
    future = torch.ones(total, total, dtype=torch.bool).triu(1)
    return bias.masked_fill(future, float("-inf"))


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.num_heads = cfg.num_heads
        self.head_dim = cfg.hidden_size // cfg.num_heads
        self.q_proj = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.k_proj = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.v_proj = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.o_proj = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def _shape(self, x: torch.Tensor, B: int, T: int) -> torch.Tensor:
        return x.view(B, T, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, hidden_states: torch.Tensor, attention_bias: torch.Tensor) -> torch.Tensor:
        B, T, C = hidden_states.shape
        q = self._shape(self.q_proj(hidden_states), B, T)
        k = self._shape(self.k_proj(hidden_states), B, T)
        v = self._shape(self.v_proj(hidden_states), B, T)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        scores = scores + attention_bias
        probs = scores.softmax(dim=-1)
        return self.o_proj((probs @ v).transpose(1, 2).reshape(B, T, C))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.input_layernorm = nn.LayerNorm(cfg.hidden_size)
        self.self_attn = CausalSelfAttention(cfg)
        self.post_attention_layernorm = nn.LayerNorm(cfg.hidden_size)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.hidden_size, 4 * cfg.hidden_size), nn.GELU(), nn.Linear(4 * cfg.hidden_size, cfg.hidden_size)
        )

    def forward(self, hidden_states: torch.Tensor, attention_bias: torch.Tensor) -> torch.Tensor:
        hidden_states = hidden_states + self.self_attn(self.input_layernorm(hidden_states), attention_bias)
        return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))


class TinyCausalLM(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.embed_positions = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = nn.LayerNorm(cfg.hidden_size)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def forward(self, input_ids, position_ids, seq_lens, labels=None):
        B, T = input_ids.shape
        hidden_states = self.embed_tokens(input_ids) + self.embed_positions(position_ids)
        attention_bias = torch.stack(
            [packed_attention_bias(lens, T, hidden_states.dtype) for lens in seq_lens]
        )[:, None]
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_bias=attention_bias)
        logits = self.lm_head(self.norm(hidden_states))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(
                logits[:, :-1].reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1), ignore_index=-100
            )
        return {"loss": loss, "logits": logits}


class DataCollatorForPacking:
    def __init__(self, cfg: PackingConfig):
        self.cfg = cfg

    def _flush(self, docs: list[list[int]]) -> dict:
        cfg = self.cfg
        ids, labels, positions = [], [], []
        for doc in docs:
            ids += doc
            labels += [cfg.label_pad_token_id] + doc[1:]
            positions += list(range(len(doc)))
        pad = cfg.max_length - len(ids)
        return {
            "input_ids": ids + [cfg.pad_token_id] * pad,
            "labels": labels + [cfg.label_pad_token_id] * pad,
            "position_ids": positions + list(range(pad)),
            "seq_lens": [len(d) for d in docs],
        }

    def __call__(self, examples: list[list[int]]) -> dict:
        rows, current, used = [], [], 0
        for example in examples:
            doc = example[: self.cfg.max_length - 1] + [self.cfg.eos_token_id]
            if used + len(doc) > self.cfg.max_length:
                rows.append(self._flush(current))
                current, used = [], 0
            current.append(doc)
            used += len(doc)
        if current:
            rows.append(self._flush(current))
        return {
            "input_ids": torch.tensor([r["input_ids"] for r in rows]),
            "labels": torch.tensor([r["labels"] for r in rows]),
            "position_ids": torch.tensor([r["position_ids"] for r in rows]),
            "seq_lens": [r["seq_lens"] for r in rows],
        }


def make_examples(n: int, generator: torch.Generator) -> list[list[int]]:
    examples = []
    for _ in range(n):
        half = int(torch.randint(3, 9, (1,), generator=generator))
        prompt = torch.randint(2, 40, (half,), generator=generator).tolist()
        examples.append(prompt + prompt[::-1])
    return examples


def main() -> None:
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    model = inject_adapters(TinyCausalLM(ModelConfig()), LoraConfig())
    collator = DataCollatorForPacking(PackingConfig())
    trainable = [p for p in model.parameters() if p.requires_grad]
    print(f"trainable params: {sum(p.numel() for p in trainable)}")
    optimizer = torch.optim.AdamW(trainable, lr=3e-3)
    for step in range(30):
        batch = collator(make_examples(12, g))
        loss = model(**batch)["loss"]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 10 == 0 or step == 29:
            print(f"step {step:2d} loss {loss.item():.4f} rows {batch['input_ids'].shape[0]}")

    model.eval()
    docs = make_examples(4, g)
    packed = collator(docs)
    first = packed["seq_lens"][0][0]
    alone = collator([docs[0]])
    with torch.no_grad():
        packed_logits = model(**packed)["logits"][0, :first]
        alone_logits = model(**alone)["logits"][0, :first]
    print(f"first document packed vs alone: {(packed_logits - alone_logits).abs().max().item():.3g}")


if __name__ == "__main__":
    main()
