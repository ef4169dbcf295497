"""Web agents: ranking the DOM elements of a page for the next action, after Mind2Web's candidate generation.

A page is a pruned DOM: each node is its tag, its depth and a bag of hashed text tokens. Pages have
different numbers of nodes and are padded; a node encoder attends over the page's nodes and each
node is scored against the task description (bag of hashed words). The target is the element the
demonstrator clicked; recall@k over the page is reported.

Source: conventions.md §2.6, §1 (SDPA row), §5 item 6.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Iterator, NamedTuple

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn
from torch.nn.functional import scaled_dot_product_attention as sdpa

TAGS = ["<pad>", "html", "body", "div", "form", "a", "button", "input", "select", "span", "li"]
BUCKETS = 512


@dataclass(slots=True, frozen=True)
class RankerConfig:
    dim: int = 64
    heads: int = 4
    layers: int = 2
    max_depth: int = 16


class PageBatch(NamedTuple):
    tags: Int[Tensor, "b n"]
    depth: Int[Tensor, "b n"]
    text: Float[Tensor, "b n h"]
    task: Float[Tensor, "b h"]
    target: Int[Tensor, "b"]


def hash_bag(words: list[str]) -> Float[Tensor, "h"]:
    bag = torch.zeros(BUCKETS)
    for w in words:
        bag[zlib.crc32(w.encode()) % BUCKETS] += 1.0
    return bag


class NodeAttention(nn.Module):
    def __init__(self, cfg: RankerConfig) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.proj = nn.Linear(cfg.dim, cfg.dim)
        self.norm = nn.LayerNorm(cfg.dim)

    def forward(self, x: Float[Tensor, "b n d"], node_keep: Bool[Tensor, "b n"]) -> Float[Tensor, "b n d"]:
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        ctx = sdpa(q, k, v, node_keep[:, None, None, :])
        return x + self.proj(ctx.transpose(1, 2).reshape(b, n, d))


class ElementRanker(nn.Module):
    def __init__(self, cfg: RankerConfig) -> None:
        super().__init__()
        self.tag = nn.Embedding(len(TAGS), cfg.dim, padding_idx=0)
        self.depth = nn.Embedding(cfg.max_depth, cfg.dim)
        self.text = nn.Linear(BUCKETS, cfg.dim)
        self.task = nn.Linear(BUCKETS, cfg.dim)
        self.layers = nn.ModuleList(NodeAttention(cfg) for _ in range(cfg.layers))

    def forward(self, page: PageBatch) -> Float[Tensor, "b n"]:
        node_keep = page.tags != 0
        x = self.tag(page.tags) + self.depth(page.depth) + self.text(page.text)
        for layer in self.layers:
            x = layer(x, node_keep)
        scores = torch.einsum("bnd,bd->bn", x, self.task(page.task))
        return scores.masked_fill(~node_keep, torch.finfo(scores.dtype).min)


VERBS = {"button": "click", "a": "open", "input": "type", "select": "choose"}
NOUNS = ["flight", "hotel", "cart", "checkout", "newsletter", "login", "coupon", "size", "color", "date"]


def synth_page(gen: torch.Generator) -> tuple[list[str], list[int], list[list[str]], list[str], int]:
    tags, depth, texts = ["html", "body"], [0, 1], [[], []]
    for _ in range(int(torch.randint(4, 20, (1,), generator=gen))):
        tag = TAGS[int(torch.randint(3, len(TAGS), (1,), generator=gen))]
        tags.append(tag)
        depth.append(int(torch.randint(2, 8, (1,), generator=gen)))
        texts.append([NOUNS[int(torch.randint(len(NOUNS), (1,), generator=gen))]])
    actionable = [i for i, t in enumerate(tags) if t in VERBS]
    if not actionable:
        tags[-1], actionable = "button", [len(tags) - 1]
    target = actionable[int(torch.randint(len(actionable), (1,), generator=gen))]
    return tags, depth, texts, [VERBS[tags[target]], *texts[target]], target


def batches(size: int, gen: torch.Generator) -> Iterator[PageBatch]:
    while True:
        pages = [synth_page(gen) for _ in range(size)]
        n = max(len(p[0]) for p in pages)
        tags, depth, text = torch.zeros(size, n, dtype=torch.long), torch.zeros(size, n, dtype=torch.long), torch.zeros(size, n, BUCKETS)
        for i, (tg, dp, tx, _, _) in enumerate(pages):
            tags[i, : len(tg)] = torch.tensor([TAGS.index(t) for t in tg])
            depth[i, : len(dp)] = torch.tensor(dp)
            text[i, : len(tx)] = torch.stack([hash_bag(words) for words in tx])
        task = torch.stack([hash_bag(p[3]) for p in pages])
        yield PageBatch(tags, depth, text, task, torch.tensor([p[4] for p in pages]))


def recall_at(model: ElementRanker, page: PageBatch, k: int = 3) -> float:
    with torch.no_grad():
        top = model(page).topk(k, dim=-1).indices
    return (top == page.target[:, None]).any(-1).float().mean().item()


if __name__ == "__main__":
    torch.manual_seed(0)
    model = ElementRanker(RankerConfig())
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for step, page in zip(range(150), batches(16, torch.Generator().manual_seed(0))):
        loss = F.cross_entropy(model(page), page.target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"loss {loss.item():.3f} recall@3 {recall_at(model, next(batches(200, torch.Generator().manual_seed(1)))):.3f}")
