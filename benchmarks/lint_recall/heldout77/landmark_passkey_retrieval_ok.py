"""Landmark attention for passkey retrieval over long filler prompts.

A landmark token closes every block of mem_freq tokens; attention is a grouped
softmax in which the landmarks of earlier blocks gate a within-block softmax
over those blocks' tokens, as in epfml/landmark-attention. The model is trained
to repeat a passkey hidden in filler text.

Source: seed self_attention_mask_guide.txt §3 (常见误区), §7 Q3
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, LANDMARK_ID, FILLER = 64, 63, (12, 13, 14, 15)


def add_landmarks(ids, mem_freq, landmark_id=LANDMARK_ID):
    b, n = ids.shape
    assert n % mem_freq == 0
    blocks = ids.view(b, n // mem_freq, mem_freq)
    marks = torch.full((b, n // mem_freq, 1), landmark_id, dtype=ids.dtype, device=ids.device)
    return torch.cat([blocks, marks], dim=-1).view(b, -1)


def landmark_masks(n, mem_freq, device=None):
    block = mem_freq + 1
    idx = torch.arange(n, device=device)
    block_id = idx // block
    is_mem = idx % block == mem_freq
    causal = idx[None, :] <= idx[:, None]
    same_block = block_id[:, None] == block_id[None, :]
    local_keep = causal & ((same_block & ~is_mem[None, :]) | (is_mem[None, :] & ~same_block))
    inner_keep = causal & ~same_block & ~is_mem[None, :]
    return local_keep, inner_keep, is_mem


class LandmarkAttention(nn.Module):
    def __init__(self, dim, n_heads, mem_freq):
        super().__init__()
        self.n_heads, self.head_dim, self.mem_freq = n_heads, dim // n_heads, mem_freq
        self.c_attn = nn.Linear(dim, 3 * dim, bias=False)
        self.c_proj = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        b, n, d = x.shape
        block = self.mem_freq + 1
        nb = n // block
        q, k, v = self.c_attn(x).split(d, dim=2)
        q, k, v = (t.view(b, n, self.n_heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
        local_keep, inner_keep, is_mem = landmark_masks(n, self.mem_freq, x.device)
        local_bias = torch.zeros(n, n, dtype=q.dtype, device=x.device).masked_fill(~local_keep, float("-inf"))

        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        p_local = F.softmax(scores + local_bias, dim=-1)

        inner = scores.masked_fill(~inner_keep, torch.finfo(scores.dtype).min)
        p_inner = F.softmax(inner.view(b, self.n_heads, n, nb, block), dim=-1)
        gate = p_local[..., is_mem]
        p_mem = (p_inner * gate[..., None]).view(b, self.n_heads, n, n).masked_fill(~inner_keep, 0.0)
        probs = p_local.masked_fill(is_mem, 0.0) + p_mem
        y = torch.matmul(probs, v).transpose(1, 2).reshape(b, n, d)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self, dim, n_heads, mem_freq):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim)
        self.attn = LandmarkAttention(dim, n_heads, mem_freq)
        self.ln_2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class LandmarkGPT(nn.Module):
    def __init__(self, vocab=VOCAB, dim=32, n_heads=4, n_layers=2, mem_freq=7, block_size=256):
        super().__init__()
        self.mem_freq = mem_freq
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(block_size, dim)
        self.blocks = nn.ModuleList([Block(dim, n_heads, mem_freq) for _ in range(n_layers)])
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx, targets=None):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.blocks:
            x = blk(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1)
        return logits, loss


def make_passkey_batch(batch_size, n_blocks, mem_freq, key_len=3, generator=None):
    n = n_blocks * mem_freq
    filler = torch.tensor(FILLER).repeat(n // len(FILLER) + 1)[:n]
    ids = filler.repeat(batch_size, 1)
    keys = torch.randint(0, 10, (batch_size, key_len), generator=generator)
    for i in range(batch_size):
        at = int(torch.randint(0, n - 2 * key_len - 2, (1,), generator=generator))
        ids[i, at:at + key_len] = keys[i]
    ids[:, -key_len - 1] = 11
    ids[:, -key_len:] = keys
    ids = add_landmarks(ids, mem_freq)
    targets = ids[:, 1:].clone()
    targets[targets == LANDMARK_ID] = -1
    targets[:, : -key_len] = -1
    return ids[:, :-1], targets


if __name__ == "__main__":
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    model = LandmarkGPT(mem_freq=7)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(3):
        x, y = make_passkey_batch(4, n_blocks=6, mem_freq=7, generator=g)
        x = F.pad(x, (0, 1), value=LANDMARK_ID)
        y = F.pad(y, (0, 1), value=-1)
        _, loss = model(x, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")
