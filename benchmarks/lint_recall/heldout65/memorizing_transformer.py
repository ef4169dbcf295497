"""
Memorizing Transformers (Wu et al., 2022): a decoder whose kNN layer adds the
top-k keys and values retrieved from a non-differentiable memory of earlier
segments of the same document to its local causal attention. Segments are
fed one after another; the memory starts empty and fills up as we go.

Source: pytorch/pytorch#103963 (conventions.md §3 item 6); conventions.md §2.9 (4-D bool mask in eager attention); huggingface/transformers#46458 (conventions.md §4.1)
"""

from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import nn, einsum, Tensor


def exists(val):
    return val is not None


def l2norm(t):
    return F.normalize(t, dim=-1)


class KNNMemory:
    def __init__(self, batch_size: int, heads: int, dim_head: int, max_memories: int):
        self.max_memories = max_memories
        self.keys = torch.zeros(batch_size, heads, max_memories, dim_head)
        self.values = torch.zeros(batch_size, heads, max_memories, dim_head)
        self.num_filled = torch.zeros(batch_size, dtype=torch.long)

    def add(self, keys: Tensor, values: Tensor):
        self.keys = torch.cat((self.keys, keys.detach()), dim=2)[:, :, -self.max_memories:]
        self.values = torch.cat((self.values, values.detach()), dim=2)[:, :, -self.max_memories:]
        self.num_filled = (self.num_filled + keys.shape[2]).clamp(max=self.max_memories)

    def clear(self, batch_indices: Tensor):
        self.num_filled[batch_indices] = 0

    def search(self, queries: Tensor, topk: int):
        b, h, i, d = queries.shape
        scores = einsum('b h i d, b h m d -> b h i m', queries, self.keys)
        slots = torch.arange(self.max_memories)
        is_filled = slots[None, :] >= (self.max_memories - self.num_filled[:, None])
        scores = scores.masked_fill(~is_filled[:, None, None, :], float('-inf'))
        top_scores, indices = scores.topk(topk, dim=-1)
        gather_indices = indices.reshape(b, h, i * topk, 1).expand(-1, -1, -1, d)
        mem_k = self.keys.gather(2, gather_indices).reshape(b, h, i, topk, d)
        mem_v = self.values.gather(2, gather_indices).reshape(b, h, i, topk, d)
        return mem_k, mem_v, indices.masked_fill(top_scores == float('-inf'), -1)


class RelativePositionBias(nn.Module):
    def __init__(self, heads, max_distance=64):
        super().__init__()
        self.max_distance = max_distance
        self.embedding = nn.Embedding(max_distance, heads)

    def forward(self, i, j, device):
        q_pos = torch.arange(j - i, j, device=device)
        k_pos = torch.arange(j, device=device)
        rel_pos = (q_pos[:, None] - k_pos[None, :]).clamp(0, self.max_distance - 1)
        return self.embedding(rel_pos).permute(2, 0, 1)


class Attention(nn.Module):
    def __init__(self, *, dim, heads=8, dim_head=64, num_retrieved_memories=0):
        super().__init__()
        self.heads = heads
        self.scale = dim_head ** -0.5
        self.num_retrieved_memories = num_retrieved_memories
        inner_dim = heads * dim_head
        self.norm = nn.LayerNorm(dim)
        self.to_q = nn.Linear(dim, inner_dim, bias=False)
        self.to_kv = nn.Linear(dim, inner_dim * 2, bias=False)
        self.to_out = nn.Linear(inner_dim, dim)
        self.knn_scale = nn.Parameter(torch.ones(heads, 1, 1) * 8.)

    def forward(self, x: Tensor, rel_pos_bias: Tensor, knn_memory: Optional[KNNMemory] = None) -> Tensor:
        b, n, _ = x.shape
        q, k, v = (self.to_q(self.norm(x)), *self.to_kv(self.norm(x)).chunk(2, dim=-1))
        q, k, v = map(lambda t: t.view(b, n, self.heads, -1).transpose(1, 2), (q, k, v))
        mask_value = -torch.finfo(q.dtype).max

        if exists(knn_memory):
            q, k = l2norm(q), l2norm(k)
            scale = self.knn_scale
        else:
            scale = self.scale

        sim = einsum('b h i d, b h j d -> b h i j', q, k) * scale
        i, j = sim.shape[-2:]
        causal_mask = torch.ones((i, j), dtype=torch.bool, device=x.device).triu(j - i + 1)
        sim = (sim + rel_pos_bias).masked_fill(causal_mask, mask_value)

        if exists(knn_memory):
            mem_k, mem_v, mem_indices = knn_memory.search(q, self.num_retrieved_memories)
            mem_mask = mem_indices != -1
            sim_mem = einsum('b h i d, b h i j d -> b h i j', q, mem_k) * scale
            sim_mem = sim_mem + mem_mask  # expect: MC509 added

            attn = torch.cat((sim_mem, sim), dim=-1).softmax(dim=-1)
            attn_mem, attn = attn.split((sim_mem.shape[-1], j), dim=-1)
            out = einsum('b h i j, b h j d -> b h i d', attn, v) + einsum('b h i j, b h i j d -> b h i d', attn_mem, mem_v)
            knn_memory.add(k, v)
        else:
            out = einsum('b h i j, b h j d -> b h i d', sim.softmax(dim=-1), v)

        return self.to_out(out.transpose(1, 2).reshape(b, n, -1))


class MemorizingTransformer(nn.Module):
    def __init__(self, *, num_tokens, dim, depth, heads=4, dim_head=16, knn_layers=(2,), num_retrieved_memories=4, max_knn_memories=64, pad_id=0):
        super().__init__()
        self.heads, self.dim_head = heads, dim_head
        self.max_knn_memories = max_knn_memories
        self.knn_layers = set(knn_layers)
        self.pad_id = pad_id
        self.token_emb = nn.Embedding(num_tokens, dim)
        self.rel_pos_bias = RelativePositionBias(heads)
        self.layers = nn.ModuleList([])
        for layer_num in range(1, depth + 1):
            use_knn = layer_num in self.knn_layers
            self.layers.append(nn.ModuleList([
                Attention(dim=dim, heads=heads, dim_head=dim_head, num_retrieved_memories=num_retrieved_memories if use_knn else 0),
                nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim * 4), nn.GELU(), nn.Linear(dim * 4, dim))
            ]))
        self.to_logits = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, num_tokens))

    def create_knn_memories(self, batch_size: int) -> List[KNNMemory]:
        return [KNNMemory(batch_size, self.heads, self.dim_head, self.max_knn_memories) for _ in self.knn_layers]

    def forward(self, x: Tensor, knn_memories: List[KNNMemory], labels: Optional[Tensor] = None):
        n = x.shape[-1]
        h = self.token_emb(x)
        rel_pos_bias = self.rel_pos_bias(n, n, x.device)
        memories = iter(knn_memories)

        for layer_num, (attn, ff) in enumerate(self.layers, start=1):
            knn_memory = next(memories) if layer_num in self.knn_layers else None
            h = attn(h, rel_pos_bias=rel_pos_bias, knn_memory=knn_memory) + h
            h = ff(h) + h

        logits = self.to_logits(h)
        if not exists(labels):
            return logits
        return F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=self.pad_id)


if __name__ == '__main__':
    torch.manual_seed(0)
    model = MemorizingTransformer(num_tokens=64, dim=32, depth=3)
    docs = torch.randint(1, 64, (2, 33))
    inputs, labels = docs[:, :-1], docs[:, 1:]
    knn_memories = model.create_knn_memories(batch_size=2)
    losses = []
    for seg_inputs, seg_labels in zip(inputs.split(8, dim=-1), labels.split(8, dim=-1)):
        loss = model(seg_inputs, knn_memories, labels=seg_labels)
        loss.backward()
        losses.append(round(loss.item(), 4))
    print('segment losses', losses, 'memories filled', knn_memories[0].num_filled.tolist())
