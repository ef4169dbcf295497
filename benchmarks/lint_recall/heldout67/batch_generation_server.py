"""A minimal batch generation server.

Requests are queued, and each scheduler tick takes up to `max_batch`
of them, left-pads their prompts into one batch, prefills it and decodes
with a per-layer key/value cache until every request has hit EOS or its own
token budget.  Finished rows keep decoding padding so the batch stays
rectangular.

Source: conventions.md section 1 (SDPA is_causal row), section 2.7, section 5 item 8; pytorch/pytorch PR #111007.
"""
import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Deque, List

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD_ID, BOS_ID, EOS_ID = 0, 1, 2


@dataclass
class Request:
    prompt: List[int]
    max_new_tokens: int = 16
    temperature: float = 0.0
    rid: int = field(default_factory=itertools.count().__next__)
    output: List[int] = field(default_factory=list)


class SelfAttention(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)

    def forward(self, x, key_keep, past=None):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        if past is None:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=key_keep[:, None, None, :], is_causal=True)  # expect: MC506 prefill
        else:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=key_keep[:, None, None, :])
        return self.out(y.transpose(1, 2).reshape(b, t, d)), (k, v)


class DecoderLM(nn.Module):
    def __init__(self, vocab=100, dim=64, n_heads=4, n_layers=2, max_pos=256):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_pos, dim)
        self.attn = nn.ModuleList(SelfAttention(dim, n_heads) for _ in range(n_layers))
        self.ffn = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
            for _ in range(n_layers)
        )
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(n_layers))
        self.final_norm = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, input_ids, key_keep, position_ids, past=None):
        h = self.embed(input_ids) + self.pos(position_ids)
        presents = []
        for i, (attn, ffn, norm) in enumerate(zip(self.attn, self.ffn, self.norms)):
            a, kv = attn(norm(h), key_keep, None if past is None else past[i])
            h = h + a
            h = h + ffn(h)
            presents.append(kv)
        return self.lm_head(self.final_norm(h)), presents


def collate_left(requests):
    width = max(len(r.prompt) for r in requests)
    ids = torch.full((len(requests), width), PAD_ID, dtype=torch.long)
    keep = torch.zeros(len(requests), width, dtype=torch.bool)
    for i, r in enumerate(requests):
        ids[i, width - len(r.prompt):] = torch.tensor(r.prompt)
        keep[i, width - len(r.prompt):] = True
    return ids, keep


def pick(logits, temperatures):
    greedy = logits.argmax(-1)
    t = temperatures.clamp(min=1e-5)[:, None]
    sampled = torch.multinomial(F.softmax(logits / t, dim=-1), 1).squeeze(-1)
    return torch.where(temperatures > 0, sampled, greedy)


class BatchServer:
    def __init__(self, model, max_batch=4):
        self.model = model.eval()
        self.max_batch = max_batch
        self.queue: Deque[Request] = deque()

    def submit(self, prompt, **kwargs):
        req = Request(prompt=prompt, **kwargs)
        self.queue.append(req)
        return req

    @torch.no_grad()
    def tick(self):
        batch = [self.queue.popleft() for _ in range(min(self.max_batch, len(self.queue)))]
        if not batch:
            return []
        ids, keep = collate_left(batch)
        budget = torch.tensor([r.max_new_tokens for r in batch])
        temps = torch.tensor([r.temperature for r in batch])
        position_ids = (keep.long().cumsum(-1) - 1).clamp(min=0)
        logits, past = self.model(ids, keep, position_ids)
        finished = torch.zeros(len(batch), dtype=torch.bool)
        for step in range(int(budget.max())):
            nxt = pick(logits[:, -1], temps).masked_fill(finished, PAD_ID)
            for r, tok, done in zip(batch, nxt.tolist(), finished.tolist()):
                if not done:
                    r.output.append(tok)
            finished = finished | (nxt == EOS_ID) | (budget <= step + 1)
            if bool(finished.all()):
                break
            keep = torch.cat([keep, ~finished[:, None]], dim=1)
            position_ids = position_ids[:, -1:] + 1
            logits, past = self.model(nxt[:, None], keep, position_ids, past)
        return batch

    def run(self):
        done = []
        while self.queue:
            done.extend(self.tick())
        return done


if __name__ == "__main__":
    torch.manual_seed(0)
    server = BatchServer(DecoderLM(), max_batch=3)
    prompts = [[BOS_ID, 5, 17, 42], [BOS_ID, 9, 9], [BOS_ID, 33, 21, 8, 61, 4, 7], [BOS_ID, 77], [BOS_ID, 12, 13]]
    for i, p in enumerate(prompts):
        server.submit(p, max_new_tokens=6 + i, temperature=0.0 if i % 2 == 0 else 0.7)
    for req in sorted(server.run(), key=lambda r: r.rid):
        print(req.rid, req.prompt, "->", req.output)
