"""CodeGen-style causal language model for Python completion with left-padded batches.

Layout of Salesforce CodeGen (modeling_codegen.py: qkv_proj, rotate_every_two, parallel block).
Source: conventions.md §1 (SDPA is_causal row), §2.7 and §5 item 8, pytorch/pytorch PR #111007
(conventions.md §1).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel


@dataclass
class CodeGenConfig:
    vocab_size: int = 130
    n_positions: int = 128
    n_embd: int = 96
    n_layer: int = 3
    n_head: int = 4
    rotary_dim: int = 16
    eos_token_id: int = 128
    pad_token_id: int = 129


class ByteTokenizer:
    def __init__(self, cfg: CodeGenConfig, padding_side: str = "left") -> None:
        self.cfg, self.padding_side = cfg, padding_side

    def encode(self, text: str) -> list[int]:
        return [min(ord(c), 127) for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(i) for i in ids if i < 128)

    def __call__(self, texts: list[str]) -> dict[str, torch.Tensor]:
        rows = [self.encode(t) for t in texts]
        width = max(map(len, rows))
        input_ids = torch.full((len(rows), width), self.cfg.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            sl = slice(width - len(r), width) if self.padding_side == "left" else slice(0, len(r))
            input_ids[i, sl], attention_mask[i, sl] = torch.tensor(r), 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}


def fixed_pos_embedding(dim: int, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2) / dim))
    sinusoid_inp = torch.einsum("i , j -> i j", torch.arange(seq_len, dtype=torch.float), inv_freq)
    return torch.sin(sinusoid_inp), torch.cos(sinusoid_inp)


def rotate_every_two(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[:, :, :, ::2], x[:, :, :, 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def apply_rotary_pos_emb(x: torch.Tensor, sincos, position_ids: torch.Tensor) -> torch.Tensor:
    sin, cos = (t[position_ids].repeat_interleave(2, dim=-1)[:, :, None, :] for t in sincos)
    return (x * cos) + (rotate_every_two(x) * sin)


class CodeGenAttention(nn.Module):
    def __init__(self, cfg: CodeGenConfig) -> None:
        super().__init__()
        self.num_heads, self.head_dim = cfg.n_head, cfg.n_embd // cfg.n_head
        self.rotary_dim, self.max_positions = cfg.rotary_dim, cfg.n_positions
        causal = torch.tril(torch.ones((cfg.n_positions, cfg.n_positions), dtype=torch.bool))
        self.register_buffer(
            "causal_mask", causal.view(1, 1, cfg.n_positions, cfg.n_positions), persistent=False
        )
        self.qkv_proj = nn.Linear(cfg.n_embd, cfg.n_embd * 3, bias=False)
        self.out_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)

    def _attn(self, query, key, value, attention_mask):
        q_len, k_len = query.size(-2), key.size(-2)
        causal_mask = self.causal_mask[:, :, k_len - q_len : k_len, :k_len]
        attn_weights = (
            torch.matmul(query.float(), key.float().transpose(-1, -2)) / self.head_dim**0.5
        )
        keep = causal_mask if attention_mask is None else causal_mask & attention_mask
        attn_weights = attn_weights.masked_fill(~keep, torch.finfo(attn_weights.dtype).min)
        attn_weights = attn_weights.softmax(dim=-1).to(value.dtype)
        return torch.matmul(attn_weights, value), attn_weights

    def forward(self, hidden_states, position_ids, attention_mask=None, output_attentions=False):
        b, t, _ = hidden_states.shape
        qkv = self.qkv_proj(hidden_states).view(b, t, 3, self.num_heads, self.head_dim)
        query, key, value = qkv.unbind(dim=2)
        sincos = fixed_pos_embedding(self.rotary_dim, self.max_positions)
        q_rot = apply_rotary_pos_emb(query[..., : self.rotary_dim], sincos, position_ids)
        k_rot = apply_rotary_pos_emb(key[..., : self.rotary_dim], sincos, position_ids)
        query = torch.cat([q_rot, query[..., self.rotary_dim :]], dim=-1).transpose(1, 2)
        key = torch.cat([k_rot, key[..., self.rotary_dim :]], dim=-1).transpose(1, 2)
        value = value.transpose(1, 2)
        if output_attentions:
            attn_output, attn_weights = self._attn(query, key, value, attention_mask)
        else:
            attn_output = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, is_causal=True)  # expect: MC506 codegen
            attn_weights = None
        attn_output = attn_output.transpose(1, 2).reshape(b, t, -1)
        return self.out_proj(attn_output), attn_weights


class CodeGenBlock(nn.Module):
    def __init__(self, cfg: CodeGenConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd)
        self.attn = CodeGenAttention(cfg)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.n_embd, 4 * cfg.n_embd),
            nn.GELU(approximate="tanh"),
            nn.Linear(4 * cfg.n_embd, cfg.n_embd),
        )

    def forward(self, hidden_states, position_ids, attention_mask=None, output_attentions=False):
        residual = hidden_states
        hidden_states = self.ln_1(hidden_states)
        attn_output, attn_weights = self.attn(
            hidden_states, position_ids, attention_mask, output_attentions
        )
        return attn_output + self.mlp(hidden_states) + residual, attn_weights


class CodeGenForCausalLM(nn.Module):
    def __init__(self, cfg: CodeGenConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.h = nn.ModuleList(CodeGenBlock(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size)

    def forward(self, input_ids, attention_mask=None, labels=None, output_attentions=False):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        position_ids = attention_mask.long().cumsum(-1) - 1
        position_ids = position_ids.masked_fill(attention_mask == 0, 1)
        extended_attention_mask = attention_mask.bool()[:, None, None, :]
        hidden_states, all_attentions = self.wte(input_ids), []
        for block in self.h:
            hidden_states, attn = block(
                hidden_states, position_ids, extended_attention_mask, output_attentions
            )
            all_attentions.append(attn)
        logits = self.lm_head(self.ln_f(hidden_states))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(
                logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100
            )
        return {
            "loss": loss,
            "logits": logits,
            "attentions": all_attentions if output_attentions else None,
        }

    @torch.no_grad()
    def generate(self, input_ids, attention_mask, max_new_tokens: int = 24):
        for _ in range(max_new_tokens):
            logits = self(input_ids, attention_mask=attention_mask)["logits"][:, -1]
            next_tokens = logits.argmax(-1, keepdim=True)
            input_ids = torch.cat([input_ids, next_tokens], dim=-1)
            attention_mask = torch.cat([attention_mask, torch.ones_like(next_tokens)], dim=-1)
        return input_ids


OPS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "mod": "%", "pow": "**"}
ARGS = ["a, b", "x, y", "left, right", "n, k"]


def make_corpus(gen: torch.Generator, n: int) -> list[str]:
    corpus = []
    for _ in range(n):
        name = list(OPS)[int(torch.randint(0, len(OPS), (1,), generator=gen))]
        args = ARGS[int(torch.randint(0, len(ARGS), (1,), generator=gen))]
        x, y = args.split(", ")
        corpus.append(f"def {name}({args}):\n    return {x} {OPS[name]} {y}\n")
    return corpus


def collate(tokenizer: ByteTokenizer, texts: list[str]) -> dict[str, torch.Tensor]:
    batch = tokenizer([t + chr(0) for t in texts])
    batch["input_ids"][batch["input_ids"] == 0] = tokenizer.cfg.eos_token_id
    batch["labels"] = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    return batch


if __name__ == "__main__":
    torch.manual_seed(0)
    config = CodeGenConfig()
    tokenizer, model = ByteTokenizer(config), CodeGenForCausalLM(config)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    gen = torch.Generator().manual_seed(0)
    for step in range(150):
        out = model(**collate(tokenizer, make_corpus(gen, 16)))
        opt.zero_grad(set_to_none=True)
        out["loss"].backward()
        opt.step()
        if step % 50 == 0:
            print(f"step {step} loss {out['loss'].item():.3f}")
    model.eval()
    prompts = ["def mul(x, y):\n", "def pow(n, k):\n    return", "def sub("]
    batch = tokenizer(prompts)
    completions = model.generate(batch["input_ids"], batch["attention_mask"])
    for row in completions.tolist():
        print(repr(tokenizer.decode(row)))
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        heldout = collate(tokenizer, make_corpus(gen, 32))
        print("held-out loss (math kernel)", model(**heldout)["loss"].item())
