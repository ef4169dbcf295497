"""Lyrics generator: a small decoder-only LM over section-tagged song lyrics, trained with Accelerate.

Each song is rendered as ``<style> [verse] line / line / [chorus] line ...`` and tokenised by a
character-piece tokenizer. The model is conditioned on a style id (genre / artist cluster) through
a learned prefix embedding. Training follows the usual Accelerate loop: ``accelerator.prepare``,
``accelerator.autocast()``, ``accelerator.backward``, fp16 mixed precision when a GPU is present.

Source: NVIDIA/apex#1052, NVIDIA/apex#1105, facebookresearch/fairseq#3575, huggingface/lerobot PR #710 (conventions.md section 3 items 18-19, section 2.3)
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    from accelerate import Accelerator
except ImportError:
    class Accelerator:
        def __init__(self, mixed_precision: str = "no", gradient_accumulation_steps: int = 1):
            self.mixed_precision = mixed_precision
            self.device = torch.device("cpu")
            self.is_main_process = True

        def prepare(self, *objects):
            return objects if len(objects) > 1 else objects[0]

        def autocast(self):
            return contextlib.nullcontext()

        def backward(self, loss):
            loss.backward()

        def print(self, *args):
            print(*args)


@dataclass
class LyricsConfig:
    vocab_size: int = 96
    n_styles: int = 12
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    max_len: int = 128
    pad_id: int = 0
    bos_id: int = 1
    dropout: float = 0.1
    lr: float = 3e-4


class LyricsTokenizer:
    def __init__(self, vocab_size: int, pad_id: int = 0, bos_id: int = 1):
        self.vocab_size = vocab_size
        self.pad_id = pad_id
        self.bos_id = bos_id

    def encode(self, text: str) -> list[int]:
        return [self.bos_id] + [3 + (ord(ch) % (self.vocab_size - 3)) for ch in text]

    def __call__(self, texts: list[str], max_len: int) -> dict[str, torch.Tensor]:
        rows = [self.encode(t)[:max_len] for t in texts]
        width = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            input_ids[i, : len(r)] = torch.tensor(r)
            attention_mask[i, : len(r)] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: LyricsConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.attn_drop = nn.Dropout(cfg.dropout)
        tril = torch.tril(torch.ones(cfg.max_len + 1, cfg.max_len + 1, dtype=torch.bool))
        self.register_buffer("tril", tril, persistent=False)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, c // self.n_heads).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
        allowed = self.tril[:t, :t] & attention_mask[:, None, None, :].bool()
        scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
        att = self.attn_drop(scores.softmax(dim=-1))
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, cfg: LyricsConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.GELU(), nn.Linear(4 * cfg.d_model, cfg.d_model)
        )

    def forward(self, x, attention_mask):
        x = x + self.attn(self.ln1(x), attention_mask)
        return x + self.mlp(self.ln2(x))


class LyricsLM(nn.Module):
    def __init__(self, cfg: LyricsConfig):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
        self.pos = nn.Embedding(cfg.max_len + 1, cfg.d_model)
        self.style = nn.Embedding(cfg.n_styles, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, input_ids, attention_mask, style_ids):
        b, t = input_ids.shape
        prefix = self.style(style_ids)[:, None, :]
        x = torch.cat([prefix, self.tok(input_ids)], dim=1)
        x = x + self.pos(torch.arange(t + 1, device=input_ids.device))
        mask = torch.cat([attention_mask.new_ones(b, 1), attention_mask], dim=1)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln_f(x))[:, 1:]

    @torch.no_grad()
    def generate(self, input_ids, style_ids, max_new_tokens=16, temperature=0.9):
        for _ in range(max_new_tokens):
            ids = input_ids[:, -(self.cfg.max_len - 1):]
            logits = self(ids, torch.ones_like(ids), style_ids)[:, -1] / temperature
            nxt = torch.multinomial(F.softmax(logits, dim=-1), 1)
            input_ids = torch.cat([input_ids, nxt], dim=1)
        return input_ids


def lm_loss(logits, input_ids, attention_mask, pad_id):
    targets = input_ids[:, 1:].masked_fill(attention_mask[:, 1:] == 0, -100)
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-100)


def train(cfg: LyricsConfig, songs: list[str], styles: list[int], steps: int = 3):
    accelerator = Accelerator(mixed_precision="fp16" if torch.cuda.is_available() else "no")
    tokenizer = LyricsTokenizer(cfg.vocab_size, cfg.pad_id, cfg.bos_id)
    model = LyricsLM(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    enc = tokenizer(songs, cfg.max_len)
    style_ids = torch.tensor(styles)
    losses = []
    for step in range(steps):
        model.train()
        with accelerator.autocast():
            logits = model(enc["input_ids"], enc["attention_mask"], style_ids)
            loss = lm_loss(logits, enc["input_ids"], enc["attention_mask"], cfg.pad_id)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        accelerator.print(f"step {step} loss {loss.item():.4f}")
    return model, tokenizer, losses


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = LyricsConfig()
    songs = [
        "[verse] neon rain on an empty street / [chorus] hold on hold on",
        "[verse] dust on the dashboard / we drive",
        "[chorus] la la la",
    ]
    model, tokenizer, losses = train(cfg, songs, styles=[3, 7, 3])
    model.eval()
    prompt = tokenizer(["[chorus] "], cfg.max_len)["input_ids"]
    out = model.generate(prompt, torch.tensor([3]), max_new_tokens=8)
    print("generated ids:", out.tolist())
    assert all(math.isfinite(x) for x in losses)
