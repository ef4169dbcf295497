"""Premise selection for Lean 4 proofs: a dense retriever in the style of LeanDojo's ReProver.

A proof state (the goal after `⊢` and its hypotheses) and each premise of the library (a theorem
name with its statement) are encoded by one shared encoder with masked mean pooling; training is
in-batch contrastive, evaluation is recall@k of the ground-truth premise among the library.

Source: pytorch/pytorch#103963 (conventions.md §3 item 6), huggingface/transformers#32195 (item 25), §2.9.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol, TypedDict, overload

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn

TOKEN_RE = re.compile(r"[A-Za-z_][\w.']*|\d+|[^\s\w]")


class Encoding(TypedDict):
    input_ids: Int[Tensor, "b t"]
    attention_mask: Int[Tensor, "b t"]


class TextEncoder(Protocol):
    def __call__(self, enc: Encoding) -> Float[Tensor, "b d"]: ...


@dataclass
class LeanTokenizer:
    corpus: list[str]
    max_len: int = 48

    @cached_property
    def vocab(self) -> dict[str, int]:
        words = sorted({w for text in self.corpus for w in TOKEN_RE.findall(text)})
        return {"<pad>": 0, "<unk>": 1} | {w: i + 2 for i, w in enumerate(words)}

    @overload
    def __call__(self, texts: str) -> list[int]: ...
    @overload
    def __call__(self, texts: list[str]) -> Encoding: ...
    def __call__(self, texts: str | list[str]) -> list[int] | Encoding:
        if isinstance(texts, str):
            return [self.vocab.get(w, 1) for w in TOKEN_RE.findall(texts)][: self.max_len]
        rows = [self(t) for t in texts]
        width = max(map(len, rows))
        ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
        return Encoding(input_ids=ids, attention_mask=(ids != 0).long())


class EncoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x: Float[Tensor, "b t d"], attn_mask: Tensor) -> Float[Tensor, "b t d"]:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        x = x + self.proj(ctx.transpose(1, 2).reshape(b, t, d))
        return x + self.ff(self.ln2(x))


class PremiseEncoder(nn.Module):
    def __init__(self, vocab_size: int, dim: int = 64, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=0)
        self.pos = nn.Embedding(64, dim)
        self.layers = nn.ModuleList(EncoderLayer(dim, heads) for _ in range(layers))

    def forward(self, enc: Encoding) -> Float[Tensor, "b d"]:
        ids, keep = enc["input_ids"], enc["attention_mask"]
        x = self.embed(ids) + self.pos(torch.arange(ids.shape[1]))
        attn_mask = keep[:, None, None, :].bool()
        for layer in self.layers:
            x = layer(x, attn_mask)
        w = keep.unsqueeze(-1).to(x.dtype)
        return F.normalize((x * w).sum(1) / w.sum(1), dim=-1)


LEMMAS = {
    "Nat.add_comm": "theorem Nat.add_comm (n m : ℕ) : n + m = m + n",
    "Nat.mul_comm": "theorem Nat.mul_comm (n m : ℕ) : n * m = m * n",
    "Nat.add_zero": "theorem Nat.add_zero (n : ℕ) : n + 0 = n",
    "Nat.zero_add": "theorem Nat.zero_add (n : ℕ) : 0 + n = n",
    "Nat.mul_one": "theorem Nat.mul_one (n : ℕ) : n * 1 = n",
    "Nat.le_refl": "theorem Nat.le_refl (n : ℕ) : n ≤ n",
    "Nat.succ_le_succ": "theorem Nat.succ_le_succ {n m : ℕ} : n ≤ m → succ n ≤ succ m",
    "List.length_append": "theorem List.length_append (as bs : List α) : (as ++ bs).length = as.length + bs.length",
}
GOALS = {
    "Nat.add_comm": "{a} {b} : ℕ ⊢ {a} + {b} = {b} + {a}",
    "Nat.mul_comm": "{a} {b} : ℕ h : 0 < {a} ⊢ {a} * {b} = {b} * {a}",
    "Nat.add_zero": "{a} : ℕ ⊢ {a} + 0 = {a}",
    "Nat.zero_add": "{a} : ℕ hyp : {a} ≠ 0 ⊢ 0 + {a} = {a}",
    "Nat.mul_one": "{a} : ℕ ⊢ {a} * 1 = {a}",
    "Nat.le_refl": "{a} : ℕ ⊢ {a} ≤ {a}",
    "Nat.succ_le_succ": "{a} {b} : ℕ h : {a} ≤ {b} ⊢ succ {a} ≤ succ {b}",
    "List.length_append": "xs ys : List ℕ ⊢ (xs ++ ys).length = xs.length + ys.length",
}


def sample_states(n: int, gen: torch.Generator) -> tuple[list[str], list[int]]:
    names, states, targets = list(LEMMAS), [], []
    for _ in range(n):
        i = int(torch.randint(len(names), (1,), generator=gen))
        a, b = (["x", "y", "n", "m", "k", "p"][int(j)] for j in torch.randperm(6, generator=gen)[:2])
        states.append(GOALS[names[i]].format(a=a, b=b))
        targets.append(i)
    return states, targets


def recall_at(encoder: TextEncoder, tok: LeanTokenizer, k: int = 2, n: int = 200) -> float:
    states, targets = sample_states(n, torch.Generator().manual_seed(1))
    with torch.no_grad():
        sims = encoder(tok(states)) @ encoder(tok(list(LEMMAS.values()))).T
    hits = sims.topk(k, dim=-1).indices == torch.tensor(targets)[:, None]
    return hits.any(-1).float().mean().item()


def main(steps: int = 150) -> None:
    torch.manual_seed(0)
    tok = LeanTokenizer(list(LEMMAS.values()) + [g.format(a="x", b="y") for g in GOALS.values()] + ["n m k p"])
    model = PremiseEncoder(len(tok.vocab))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    premises = list(LEMMAS.values())
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        states, targets = sample_states(16, gen)
        logits = model(tok(states)) @ model(tok(premises)).T / 0.05
        loss = F.cross_entropy(logits, torch.tensor(targets))
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    print(f"loss {loss.item():.3f} recall@2 {recall_at(model, tok):.3f}")


if __name__ == "__main__":
    main()
