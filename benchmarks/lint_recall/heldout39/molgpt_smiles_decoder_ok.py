"""MolGPT-style property-conditioned SMILES generation with a minGPT decoder.

Laid out after devalab/molgpt, itself built on karpathy/minGPT: the SMILES regex tokenizer,
``GPTConfig`` with ``block_size`` and ``num_props``, ``CausalSelfAttention``, ``Block``, ``GPT``
with the property token prepended and a type embedding, ``configure_optimizers``-style AdamW,
``sample`` with top-k from a ``C`` context, and a validity check of branches and ring closures
on molecules drawn from a small chain / branch / ring grammar.

Source: pytorch/pytorch#29546 (conventions.md §3 item 9), rasbt/LLMs-from-scratch#1061
(conventions.md §3 item 14), conventions.md §1 (direction cheat-sheet).
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

SMI_REGEX = re.compile(
    r"(\[[^\]]+]|<|Br?|Cl?|N|O|S|P|F|I|b|c|n|o|s|p|\(|\)|\.|=|#|-|\+|\\|\/|:|~|@|\?|>|\*|\$|\%[0-9]{2}|[0-9])"
)


@dataclass
class GPTConfig:
    vocab_size: int = 0
    block_size: int = 40
    num_props: int = 1
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    attn_pdrop: float = 0.1
    resid_pdrop: float = 0.1


def causal_keep(size: int, device=None) -> torch.Tensor:
    return torch.tril(torch.ones(size, size, dtype=torch.bool, device=device))


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.n_head = config.n_head
        self.key, self.query = (
            nn.Linear(config.n_embd, config.n_embd),
            nn.Linear(config.n_embd, config.n_embd),
        )
        self.value, self.proj = (
            nn.Linear(config.n_embd, config.n_embd),
            nn.Linear(config.n_embd, config.n_embd),
        )
        self.attn_drop, self.resid_drop = (
            nn.Dropout(config.attn_pdrop),
            nn.Dropout(config.resid_pdrop),
        )

    def forward(self, x: torch.Tensor, causal: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        k = self.key(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = self.query(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = self.value(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(~causal[:T, :T], float("-inf"))
        att = self.attn_drop(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_drop(self.proj(y))


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(config.n_embd), nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.mlp = nn.Sequential(
            nn.Linear(config.n_embd, 4 * config.n_embd),
            nn.GELU(),
            nn.Linear(4 * config.n_embd, config.n_embd),
            nn.Dropout(config.resid_pdrop),
        )

    def forward(self, x: torch.Tensor, causal: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), causal)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.n_embd)
        self.type_emb = nn.Embedding(2, config.n_embd)
        self.prop_nn = nn.Linear(config.num_props, config.n_embd)
        self.pos_emb = nn.Parameter(torch.zeros(1, config.block_size, config.n_embd))
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.head = nn.Linear(config.n_embd, config.vocab_size, bias=False)

    def forward(self, idx: torch.Tensor, prop: torch.Tensor, targets: torch.Tensor | None = None):
        b, t = idx.size()
        token_embeddings = self.tok_emb(idx) + self.pos_emb[:, :t, :]
        token_embeddings = token_embeddings + self.type_emb(torch.ones_like(idx))
        prop_embeddings = self.prop_nn(prop.unsqueeze(1)) + self.type_emb(
            torch.zeros(b, 1, dtype=torch.long)
        )
        x = torch.cat([prop_embeddings, token_embeddings], dim=1)
        causal = causal_keep(x.shape[1], x.device)
        for block in self.blocks:
            x = block(x, causal)
        logits = self.head(self.ln_f(x))[:, 1:]
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss


class SmilesTokenizer:
    def __init__(self, smiles: list[str]):
        tokens = sorted({t for s in smiles for t in SMI_REGEX.findall(s)})
        self.stoi = {t: i for i, t in enumerate(["<", *tokens])}
        self.itos = {i: t for t, i in self.stoi.items()}

    def encode(self, smiles: str, length: int) -> list[int]:
        ids = [self.stoi[t] for t in SMI_REGEX.findall(smiles)]
        return ids + [0] * (length - len(ids))

    def decode(self, ids: list[int]) -> str:
        return "".join(self.itos[i] for i in ids).split("<")[0]


def random_smiles(rng: random.Random, depth: int = 0) -> str:
    out, ring = [], None
    for _ in range(rng.randint(2, 6)):
        out.append(rng.choice(["C", "C", "C", "N", "O", "c"]) if out else "C")
        if ring is None and depth == 0 and rng.random() < 0.2:
            ring = str(rng.randint(1, 2))
            out.append(ring)
        elif depth < 1 and rng.random() < 0.2:
            out.append(f"({random_smiles(rng, depth + 1)})")
    if ring is not None:
        out += ["C", "C", ring]
    return "".join(out)


def is_valid(smiles: str) -> bool:
    depth, rings = 0, set()
    for tok in SMI_REGEX.findall(smiles):
        depth += (tok == "(") - (tok == ")")
        if depth < 0:
            return False
        if tok.isdigit():
            rings ^= {tok}
    return bool(smiles) and depth == 0 and not rings and not smiles.startswith("(")


def carbon_fraction(smiles: str) -> float:
    atoms = [t for t in SMI_REGEX.findall(smiles) if t.isalpha()]
    return sum(a == "C" for a in atoms) / max(len(atoms), 1)


@torch.no_grad()
def sample(
    model: GPT, x: torch.Tensor, steps: int, prop: torch.Tensor, top_k: int = 5
) -> torch.Tensor:
    for _ in range(steps):
        logits, _ = model(x[:, -model.config.block_size + 1 :], prop)
        logits = logits[:, -1]
        v, _ = torch.topk(logits, top_k)
        logits[logits < v[:, [-1]]] = -float("inf")
        x = torch.cat([x, torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)], dim=1)
    return x


def main() -> None:
    torch.manual_seed(0)
    rng = random.Random(0)
    data = [s for s in (random_smiles(rng) for _ in range(4000)) if len(SMI_REGEX.findall(s)) < 38]
    tokenizer = SmilesTokenizer(data)
    config = GPTConfig(vocab_size=len(tokenizer.stoi))
    model = GPT(config)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, betas=(0.9, 0.95), weight_decay=0.1)
    for epoch in range(3):
        rng.shuffle(data)
        for start in range(0, len(data), 64):
            chunk = data[start : start + 64]
            ids = torch.tensor([tokenizer.encode(s, config.block_size) for s in chunk])
            prop = torch.tensor([[carbon_fraction(s)] for s in chunk])
            _, loss = model(ids[:, :-1], prop, targets=ids[:, 1:])
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")
    model.eval()
    context = torch.full((64, 1), tokenizer.stoi["C"])
    out = sample(model, context, steps=24, prop=torch.full((64, config.num_props), 0.8))
    finished = [tokenizer.decode(row.tolist()) for row in out if 0 in row.tolist()]
    valid = [s for s in finished if is_valid(s)]
    rates = f"finished {len(finished) / len(out):.3f}, valid {len(valid) / len(out):.3f}"
    print(f"{rates}, unique {len(set(valid))}")
    print(f"e.g. {[tokenizer.decode(row.tolist()) for row in out[:3]]}")


if __name__ == "__main__":
    main()
