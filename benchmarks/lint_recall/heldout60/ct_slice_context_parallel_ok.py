"""Slice-sequence transformer for intracranial hemorrhage detection on head CT, context parallel over slices.

A 2-D encoder embeds every axial slice; a transformer over the stack of slices labels each one
(any hemorrhage). Studies have different slice counts and are padded to a multiple of the
context-parallel size. Each rank keeps a contiguous block of slices as queries and attends to
the keys and values of the whole stack (all-gathered); ranks are simulated in a loop when
torch.distributed is not initialised. Slice blocks are recomputed in the backward pass
(activation checkpointing) to fit long thin-slice studies.

Source: conventions.md §2.6, §1 (SDPA row), §5 item 6
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def cp_ranks(simulated):
    if dist.is_available() and dist.is_initialized():
        return [dist.get_rank()], dist.get_world_size()
    return list(range(simulated)), simulated


def all_gather_slices(x):
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts, dim=1)


class SliceAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x_block, x_stack, slice_keep):
        b, n, d = x_block.shape
        q = self.q(x_block).view(b, n, self.heads, -1).transpose(1, 2)
        k, v = self.kv(x_stack).view(b, x_stack.shape[1], 2, self.heads, -1).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=slice_keep[:, None, None, :])
        return self.out(y.transpose(1, 2).reshape(b, n, d))


class SliceBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln_q, self.ln_kv, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = SliceAttention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x_block, x_stack, slice_keep):
        h = x_block + self.attn(self.ln_q(x_block), self.ln_kv(x_stack), slice_keep)
        return h + self.mlp(self.ln2(h))


class HemorrhageStackModel(nn.Module):
    def __init__(self, slice_dim=64, dim=32, heads=4, depth=2, max_slices=64, cp=2):
        super().__init__()
        self.cp = cp
        self.slice_encoder = nn.Sequential(nn.Linear(slice_dim, dim), nn.GELU())
        self.z_embed = nn.Embedding(max_slices, dim)
        self.blocks = nn.ModuleList(SliceBlock(dim, heads) for _ in range(depth))
        self.head = nn.Linear(dim, 1)

    def forward(self, slices, num_slices):
        b, s, _ = slices.shape
        slice_keep = torch.arange(s, device=slices.device)[None, :] < num_slices[:, None]
        ranks, world = cp_ranks(self.cp)
        x = self.slice_encoder(slices) + self.z_embed(torch.arange(s, device=slices.device))
        for block in self.blocks:
            stack = all_gather_slices(x) if len(ranks) == 1 and world > 1 else x
            blocks = [stack.chunk(world, dim=1)[r] for r in ranks]
            if self.training:
                x = torch.cat([checkpoint(block, xb, stack, slice_keep, use_reentrant=False) for xb in blocks], 1)
            else:
                x = torch.cat([block(xb, stack, slice_keep) for xb in blocks], 1)
        return self.head(x).squeeze(-1)


def pad_studies(studies, multiple):
    s = max(len(x) for x, _ in studies)
    s = -(-s // multiple) * multiple
    slices = torch.zeros(len(studies), s, studies[0][0].shape[1])
    labels = torch.zeros(len(studies), s)
    for i, (x, y) in enumerate(studies):
        slices[i, : len(x)], labels[i, : len(x)] = x, y
    return {"slices": slices, "labels": labels, "num_slices": torch.tensor([len(x) for x, _ in studies])}


def synthetic_studies(n, slice_dim=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        count = int(torch.randint(12, 40, (1,), generator=g))
        x = torch.randn(count, slice_dim, generator=g)
        y = torch.zeros(count)
        if torch.rand(1, generator=g) < 0.5:
            start = int(torch.randint(0, count - 6, (1,), generator=g))
            y[start: start + 6] = 1
            x[start: start + 6, :4] += 1.5
        out.append((x, y))
    return out


def train(steps=80, batch_size=8, seed=0):
    torch.manual_seed(seed)
    model = HemorrhageStackModel()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    data = synthetic_studies(256, seed=seed)
    for step in range(steps):
        batch = pad_studies(data[(step * batch_size) % 256:][:batch_size], model.cp)
        logits = model(batch["slices"], batch["num_slices"])
        real = torch.arange(logits.shape[1])[None] < batch["num_slices"][:, None]
        loss = F.binary_cross_entropy_with_logits(logits[real], batch["labels"][real])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss.item()


if __name__ == "__main__":
    print("loss %.3f" % train())
