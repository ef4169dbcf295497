"""Bidirectional sequential recommender over very long user histories with Ulysses sequence parallelism.

A BERT4Rec-style model trained by masked item prediction on histories of thousands of
interactions. The sequence is sharded across ranks; around attention a DeepSpeed-Ulysses
all-to-all turns the sequence shards into head shards (every rank sees the full history for
heads/world_size heads) and back. In one process the all-to-all is the identity.

Source: pytorch/pytorch#103963 (conventions.md §3 item 6), huggingface/transformers#32195 (item 25), §2.9, §5 item 7
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

PAD_ITEM, MASK_ITEM = 0, 1


@dataclass
class RecConfig:
    num_items: int = 200
    dim: int = 32
    heads: int = 4
    layers: int = 2
    max_len: int = 64
    mask_prob: float = 0.2


def sp_world_size():
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def all_to_all_seq_to_heads(x):
    world = sp_world_size()
    if world == 1:
        return x
    b, h, s, d = x.shape
    send = list(x.reshape(b, world, h // world, s, d).unbind(1))
    recv = [torch.empty_like(t) for t in send]
    dist.all_to_all(recv, [t.contiguous() for t in send])
    return torch.cat(recv, dim=2)


def all_to_all_heads_to_seq(x):
    world = sp_world_size()
    if world == 1:
        return x
    send = [t.contiguous() for t in x.chunk(world, dim=2)]
    recv = [torch.empty_like(t) for t in send]
    dist.all_to_all(recv, send)
    return torch.cat(recv, dim=1)


def gather_full_sequence(t):
    world = sp_world_size()
    if world == 1:
        return t
    parts = [torch.empty_like(t) for _ in range(world)]
    dist.all_gather(parts, t.contiguous())
    return torch.cat(parts, dim=1)


class UlyssesAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.heads, self.head_dim = cfg.heads, cfg.dim // cfg.heads
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.out = nn.Linear(cfg.dim, cfg.dim)

    def forward(self, x, history_keep):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = (all_to_all_seq_to_heads(t) for t in (q, k, v))
        attn_mask = history_keep[:, None, None, :]
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        y = all_to_all_heads_to_seq(y)
        return self.out(y.transpose(1, 2).reshape(b, s, d))


class Layer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attn = UlyssesAttention(cfg)
        self.ln1, self.ln2 = nn.LayerNorm(cfg.dim), nn.LayerNorm(cfg.dim)
        self.ffn = nn.Sequential(nn.Linear(cfg.dim, 4 * cfg.dim), nn.GELU(), nn.Linear(4 * cfg.dim, cfg.dim))

    def forward(self, x, history_keep):
        x = self.ln1(x + self.attn(x, history_keep))
        return self.ln2(x + self.ffn(x))


class LongHistoryRec(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.item_emb = nn.Embedding(cfg.num_items, cfg.dim, padding_idx=PAD_ITEM)
        self.pos_emb = nn.Embedding(cfg.max_len, cfg.dim)
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.layers))

    def forward(self, items, positions):
        keep_local = items != PAD_ITEM
        history_keep = gather_full_sequence(keep_local)
        x = self.item_emb(items) + self.pos_emb(positions)
        for layer in self.layers:
            x = layer(x, history_keep)
        return x @ self.item_emb.weight.t()


def left_pad_histories(histories, max_len):
    items = torch.full((len(histories), max_len), PAD_ITEM, dtype=torch.long)
    for i, h in enumerate(histories):
        h = h[-max_len:]
        items[i, max_len - len(h):] = torch.tensor(h)
    return {"items": items, "positions": torch.arange(max_len).expand(len(histories), -1)}


def cloze(batch, cfg, generator):
    items = batch["items"].clone()
    chosen = (torch.rand(items.shape, generator=generator) < cfg.mask_prob) & (items != PAD_ITEM)
    chosen[:, -1] = True
    labels = torch.where(chosen, items, torch.full_like(items, -100))
    items[chosen] = MASK_ITEM
    return {"items": items, "positions": batch["positions"], "labels": labels}


def synthetic_histories(n, cfg, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        length = int(torch.randint(8, cfg.max_len, (1,), generator=g))
        start, step = torch.randint(2, cfg.num_items, (2,), generator=g).tolist()
        out.append([(start + i * (step % 7 + 1)) % (cfg.num_items - 2) + 2 for i in range(length)])
    return out


def train(cfg=RecConfig(), steps=150, seed=0):
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    model = LongHistoryRec(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    data = synthetic_histories(512, cfg, seed)
    for step in range(steps):
        batch = cloze(left_pad_histories(data[(step * 32) % 512:][:32], cfg.max_len), cfg, g)
        logits = model(batch["items"], batch["positions"])
        loss = F.cross_entropy(logits.reshape(-1, cfg.num_items), batch["labels"].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    test = synthetic_histories(128, cfg, seed + 1)
    batch = left_pad_histories([h[:-1] + [MASK_ITEM] for h in test], cfg.max_len)
    with torch.no_grad():
        top10 = model(batch["items"], batch["positions"])[:, -1].topk(10).indices
    hit = (top10 == torch.tensor([h[-1] for h in test])[:, None]).any(-1).float().mean()
    return loss.item(), hit.item()


if __name__ == "__main__":
    print("loss %.3f  HR@10 %.3f" % train())
