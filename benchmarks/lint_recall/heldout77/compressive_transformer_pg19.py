"""Compressive Transformer for book-level language modelling on PG-19.

FIFO memories, a strided-convolution compressed memory and the attention
reconstruction loss, after lucidrains/compressive-transformer-pytorch; books are
byte-tokenized, padded in a batch and cut into segments.

Source: conventions.md §1 (HF attention_mask row, cheat-sheet), §2.4, §5 item 7
"""
from collections import namedtuple

import torch
import torch.nn as nn
import torch.nn.functional as F

Memory = namedtuple("Memory", ["mem", "compressed_mem"])


def exists(val):
    return val is not None


def default(val, d):
    return val if exists(val) else d


def max_neg_value(tensor):
    return -torch.finfo(tensor.dtype).max


def queue_fifo(*args, length, dim=-2):
    queue = torch.cat(args, dim=dim)
    if length > 0:
        return split_at_index(dim, -length, queue)
    device = queue.device
    shape = list(queue.shape)
    shape[dim] = 0
    return queue, torch.empty(shape, device=device)


def split_at_index(dim, index, t):
    pre_slices = (slice(None),) * (dim % t.dim())
    l = (*pre_slices, slice(None, index))
    r = (*pre_slices, slice(index, None))
    return t[l], t[r]


class ByteTokenizer:
    pad_token_id = 0

    def __call__(self, texts, return_tensors="pt", padding=True, pad_to_multiple_of=None):
        ids = [[b + 1 for b in text.encode("utf-8")] for text in texts]
        n = max(len(row) for row in ids)
        if pad_to_multiple_of:
            n = -(-n // pad_to_multiple_of) * pad_to_multiple_of
        input_ids = torch.full((len(ids), n), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros(len(ids), n, dtype=torch.long)
        for i, row in enumerate(ids):
            input_ids[i, : len(row)] = torch.tensor(row)
            attention_mask[i, : len(row)] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}


class ConvCompress(nn.Module):
    def __init__(self, dim, ratio=4):
        super().__init__()
        self.conv = nn.Conv1d(dim, dim, ratio, stride=ratio)

    def forward(self, mem):
        return self.conv(mem.transpose(1, 2)).transpose(1, 2)


class SelfAttention(nn.Module):
    def __init__(self, dim, mem_len, cmem_len, cmem_ratio=4, heads=4):
        super().__init__()
        self.heads, self.dim_head = heads, dim // heads
        self.mem_len, self.cmem_len, self.cmem_ratio = mem_len, cmem_len, cmem_ratio
        self.scale = self.dim_head ** -0.5
        self.compress_mem_fn = ConvCompress(dim, cmem_ratio)
        self.to_q = nn.Linear(dim, dim, bias=False)
        self.to_kv = nn.Linear(dim, dim * 2, bias=False)
        self.to_out = nn.Linear(dim, dim)

    def attend(self, q, k, v, pad_mask=None, mem_len=0):
        dots = torch.einsum("bhid,bhjd->bhij", q, k) * self.scale
        mask_value = max_neg_value(dots)
        if exists(pad_mask):
            key_pad = F.pad(pad_mask, (mem_len, 0), value=False)
            dots.masked_fill_(key_pad[:, None, None, :], mask_value)
        t = q.shape[-2]
        causal = torch.ones(t, t + mem_len, device=q.device).triu_(diagonal=1 + mem_len).bool()
        dots.masked_fill_(causal[None, None], mask_value)
        return dots.softmax(dim=-1) @ v

    def forward(self, x, memories=None, pad_mask=None):
        b, t, e, h = *x.shape, self.heads
        mem, cmem = default(memories, (None, None))
        mem = default(mem, x.new_empty(b, 0, e))
        cmem = default(cmem, x.new_empty(b, 0, e))
        total_mem_len = mem.shape[1] + cmem.shape[1]

        split_heads = lambda z: z.view(b, -1, h, self.dim_head).transpose(1, 2)
        q = split_heads(self.to_q(x))
        k, v = map(split_heads, self.to_kv(torch.cat((cmem, mem, x), dim=1)).chunk(2, dim=-1))
        out = self.attend(q, k, v, pad_mask, total_mem_len)
        logits = self.to_out(out.transpose(1, 2).reshape(b, t, e))

        aux_loss = x.new_zeros(())
        old_mem, new_mem = queue_fifo(mem, x, length=self.mem_len, dim=1)
        if old_mem.shape[1] % self.cmem_ratio != 0:
            old_mem = F.pad(old_mem, (0, 0, self.cmem_ratio - old_mem.shape[1] % self.cmem_ratio, 0), value=0.0)
        if old_mem.shape[1] == 0 or self.cmem_len <= 0:
            return logits, Memory(new_mem.detach(), cmem), aux_loss
        compressed_mem = self.compress_mem_fn(old_mem.detach())
        _, new_cmem = split_at_index(1, -self.cmem_len, torch.cat((cmem, compressed_mem), dim=1))
        if self.training:
            rq = split_heads(self.to_q(x.detach()))
            okv = self.to_kv(old_mem.detach()).chunk(2, dim=-1)
            ckv = self.to_kv(compressed_mem).chunk(2, dim=-1)
            full = F.scaled_dot_product_attention(rq, *map(split_heads, okv))
            comp = F.scaled_dot_product_attention(rq, *map(split_heads, ckv))
            aux_loss = F.mse_loss(comp, full.detach())
        return logits, Memory(new_mem.detach(), new_cmem.detach()), aux_loss


class CompressiveTransformer(nn.Module):
    def __init__(self, num_tokens=257, dim=32, depth=2, seq_len=16, mem_len=16, cmem_len=4, cmem_ratio=4):
        super().__init__()
        self.token_emb = nn.Embedding(num_tokens, dim)
        self.pos_emb = nn.Parameter(torch.randn(seq_len, dim) * 0.02)
        self.attn = nn.ModuleList([SelfAttention(dim, mem_len, cmem_len, cmem_ratio) for _ in range(depth)])
        self.ff = nn.ModuleList([nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)) for _ in range(depth)])
        self.to_logits = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, num_tokens))

    def forward(self, x, memories=None, pad_mask=None):
        if exists(pad_mask):
            pad_mask = pad_mask.to(torch.bool)
        h = self.token_emb(x) + self.pos_emb[: x.shape[1]]
        memories = default(memories, [None] * len(self.attn))
        next_memories, aux = [], 0.0
        for attn, ff, mem in zip(self.attn, self.ff, memories):
            out, new_mem, aux_loss = attn(h, memories=mem, pad_mask=pad_mask)
            h = h + out
            h = h + ff(h)
            next_memories.append(new_mem)
            aux = aux + aux_loss
        return self.to_logits(h), next_memories, aux


def collate_books(tokenizer, books, seg_len):
    enc = tokenizer(books, return_tensors="pt", padding=True, pad_to_multiple_of=seg_len)
    return {
        "segments": enc["input_ids"].split(seg_len, dim=1),
        "pad_masks": (~enc["attention_mask"]).split(seg_len, dim=1),  # expect: MC518 invert
    }


if __name__ == "__main__":
    torch.manual_seed(0)
    books = ["It was the best of times, it was the worst of times.", "Call me Ishmael. Some years ago."]
    batch = collate_books(ByteTokenizer(), books, seg_len=16)
    model = CompressiveTransformer()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)
    memories = None
    for seg, pad in zip(batch["segments"], batch["pad_masks"]):
        logits, memories, aux = model(seg[:, :-1], memories=memories, pad_mask=pad[:, :-1])
        target = seg[:, 1:].masked_fill(pad[:, 1:].bool(), -100)
        loss = F.cross_entropy(logits.transpose(1, 2), target, ignore_index=-100) + aux
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"loss {loss.item():.4f}")
