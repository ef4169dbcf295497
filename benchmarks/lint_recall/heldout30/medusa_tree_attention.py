"""Medusa-style tree verification: several draft continuations checked in one forward pass.

The draft heads propose a tree of candidate tokens (`TreeSpec.parents`, -1 for a child of the
last accepted token). The target model reads the prompt causally and every tree node sees the
whole prompt plus its own ancestors, with position ids given by the node's depth. The longest
path whose tokens match the target's greedy choices is accepted.

Source: seed self_attention_mask_guide.txt §3 and §7 Q3; conventions.md §1
"""
from dataclasses import dataclass, field

import torch
import torch.nn as nn


@dataclass
class TreeSpec:
    parents: list = field(default_factory=lambda: [-1, -1, 0, 0, 1, 2])

    def depths(self):
        d = []
        for p in self.parents:
            d.append(0 if p < 0 else d[p] + 1)
        return torch.tensor(d)

    def ancestor_mask(self):
        n = len(self.parents)
        mask = torch.zeros(n, n)
        for i in range(n):
            j = i
            while j >= 0:
                mask[i, j] = 1.0
                j = self.parents[j]
        return mask

    def paths(self):
        leaves = [i for i in range(len(self.parents)) if i not in self.parents]
        out = []
        for leaf in leaves:
            path, j = [], leaf
            while j >= 0:
                path.insert(0, j)
                j = self.parents[j]
            out.append(path)
        return out


class TargetLM(nn.Module):
    def __init__(self, vocab=40, dim=32, heads=4, n_layers=2):
        super().__init__()
        self.heads = heads
        self.embed, self.pos = nn.Embedding(vocab, dim), nn.Embedding(64, dim)
        self.qkv = nn.ModuleList(nn.Linear(dim, 3 * dim) for _ in range(n_layers))
        self.out = nn.ModuleList(nn.Linear(dim, dim) for _ in range(n_layers))
        self.head = nn.Linear(dim, vocab)

    def forward(self, input_ids, position_ids, full_mask):
        h = self.embed(input_ids) + self.pos(position_ids)
        b, t, d = h.shape
        for qkv, out in zip(self.qkv, self.out):
            q, k, v = qkv(h).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
            scores = q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5
            weights = (scores * full_mask).softmax(dim=-1)  # expect: MC520 treemask
            h = h + out((weights @ v).transpose(1, 2).reshape(b, t, d))
        return self.head(h)


def tree_inputs(prompt_ids, tree_ids, spec: TreeSpec):
    p, n = prompt_ids.shape[1], tree_ids.shape[1]
    full_mask = torch.zeros(p + n, p + n)
    full_mask[:p, :p] = torch.tril(torch.ones(p, p))
    full_mask[p:, :p] = 1.0
    full_mask[p:, p:] = spec.ancestor_mask()
    position_ids = torch.cat([torch.arange(p), p + spec.depths()])[None]
    return torch.cat([prompt_ids, tree_ids], dim=1), position_ids, full_mask


@torch.no_grad()
def greedy_continuation(model, prompt_ids, k):
    ids = prompt_ids
    for _ in range(k):
        t = ids.shape[1]
        logits = model(ids, torch.arange(t)[None], torch.tril(torch.ones(t, t)))
        ids = torch.cat([ids, logits[:, -1:].argmax(-1)], dim=1)
    return ids[:, prompt_ids.shape[1]:]


@torch.no_grad()
def verify(model, prompt_ids, tree_ids, spec: TreeSpec):
    input_ids, position_ids, full_mask = tree_inputs(prompt_ids, tree_ids, spec)
    logits = model(input_ids, position_ids, full_mask)
    p = prompt_ids.shape[1]
    greedy_root = logits[0, p - 1].argmax()
    node_next = logits[0, p:].argmax(-1)
    best = []
    for path in spec.paths():
        accepted, expected = [], greedy_root
        for node in path:
            if tree_ids[0, node] != expected:
                break
            accepted.append(node)
            expected = node_next[node]
        best = max(best, accepted, key=len)
    return [int(tree_ids[0, i]) for i in best], logits[0, p:]


if __name__ == "__main__":
    torch.manual_seed(0)
    model = TargetLM().eval()
    spec = TreeSpec()
    prompt = torch.tensor([[3, 9, 14, 2, 7]])
    tree_ids = torch.tensor([[11, 12, 13, 14, 15, 16]])
    tree_ids[0, [0, 2, 5]] = greedy_continuation(model, prompt, 3)[0]
    accepted, tree_logits = verify(model, prompt, tree_ids, spec)
    with torch.no_grad():
        path = spec.paths()[0]
        seq = torch.cat([prompt, tree_ids[:, path]], dim=1)
        t = seq.shape[1]
        ref = model(seq, torch.arange(t)[None], torch.tril(torch.ones(t, t)))
    print("greedy", tree_ids[0, [0, 2, 5]].tolist(), "accepted", accepted)
    print("tree vs sequential on path", path, (tree_logits[path] - ref[0, 5:]).abs().max().item())
