"""Held-out 7 (correct twin): a small text-generation inference server (request batching, a GPT-2 style block
with a tuple `past_key_value`, a scoring endpoint).

Source: conventions.md section 2.7 and huggingface/transformers#47651 (`is_causal` top-left
alignment with a cache: here the flag is a module attribute and the keys are concatenated with a
tuple-indexed past), rasbt/LLMs-from-scratch#1061 and conventions.md section 1 (a True = padding
mask handed to SDPA, here spelled `.eq(0)`), the "keep-mask as fill condition" case of the seed
article (the tokenizer's mask cast with `.to(torch.bool)` as the masked_fill condition, keyword form).
Surroundings: a request handler class, keyword masked_fill with `mask=`/`value=`, a module attribute
as the causal flag, `@torch.inference_mode()`.
"""

import json
import math
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class ServerConfig:
    model_dim: int = 768
    heads: int = 12
    max_new_tokens: int = 32
    stop_ids: List[int] = field(default_factory=lambda: [50256])


class CachedSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)
        self.causal = True

    def forward(self, x: torch.Tensor, layer_past: Optional[Tuple[torch.Tensor, torch.Tensor]] = None):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        if layer_past is not None:
            k = torch.cat((layer_past[0], k), dim=-2)
            v = torch.cat((layer_past[1], v), dim=-2)
        present = (k, v)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal and layer_past is None)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C)), present


class GenerationHandler:
    def __init__(self, model: nn.Module, tokenizer, cfg: ServerConfig):
        self.model, self.tokenizer, self.cfg = model, tokenizer, cfg
        self.scorer = nn.Linear(cfg.model_dim, 1)

    @torch.inference_mode()
    def rerank(self, query: str, passages: List[str]) -> List[float]:
        enc = self.tokenizer([query] * len(passages), passages, padding=True, return_tensors="pt")
        hidden = self.model.embed(enc["input_ids"])
        B, T, C = hidden.shape
        h = hidden.view(B, T, 1, C).transpose(1, 2)
        keep = enc["attention_mask"].ne(0)[:, None, None, :]
        ctx = F.scaled_dot_product_attention(h, h, h, attn_mask=keep)
        return self.scorer(ctx.mean(dim=2)).squeeze(-1).tolist()

    @torch.inference_mode()
    def attention_pool(self, texts: List[str]) -> torch.Tensor:
        enc = self.tokenizer(texts, padding=True, return_tensors="pt")
        hidden = self.model.embed(enc["input_ids"])
        energy = torch.einsum("btc,c->bt", hidden, self.scorer.weight[0]) / math.sqrt(hidden.size(-1))
        energy = energy.masked_fill(mask=~enc["attention_mask"].to(torch.bool), value=float("-inf"))
        w = energy.softmax(-1)
        return torch.einsum("bt,btc->bc", w, hidden)

    def handle(self, body: bytes) -> bytes:
        req = json.loads(body)
        if req.get("task") == "rerank":
            return json.dumps({"scores": self.rerank(req["query"], req["passages"])}).encode()
        vecs = self.attention_pool(req["texts"])
        return json.dumps({"vectors": vecs.tolist()}).encode()
