"""Graph Representation Learning, Homework 3: knowledge-graph completion with neighbour attention.

Starter code plus the released solution. A small family knowledge graph is generated
(people, their spouses, children and grandchildren), some triples are held out, and
the model has to rank the right tail entity for queries ``(head, relation, ?)``.
Part 1 is DistMult on its own; part 2 (this file) lets the head entity attend over
its padded list of ``(relation, neighbour)`` pairs from the training graph, in the
spirit of A2N (Bansal et al., 2019), before the DistMult scoring. Metrics: filtered
MRR and Hits@1/3.

Source: TransformerLensOrg/TransformerLens PR #366 (conventions.md §3 item 20), conventions.md §1, §5 item 5
"""
import math
import random
from collections import defaultdict

import torch
import torch.nn as nn
import torch.nn.functional as F

RELATIONS = ["self", "spouse_of", "parent_of", "child_of", "sibling_of", "grandparent_of", "grandchild_of"]
REL = {r: i for i, r in enumerate(RELATIONS)}
MAX_DEG = 12


def make_families(n_families, rng):
    triples, n_people = [], 0
    for _ in range(n_families):
        gp = [n_people, n_people + 1]
        n_people += 2
        triples += [(gp[0], "spouse_of", gp[1]), (gp[1], "spouse_of", gp[0])]
        parents = list(range(n_people, n_people + rng.randint(1, 3)))
        n_people += len(parents)
        for p in parents:
            children = list(range(n_people, n_people + rng.randint(1, 3)))
            n_people += len(children)
            for g in gp:
                triples += [(g, "parent_of", p), (p, "child_of", g)]
                for c in children:
                    triples += [(g, "grandparent_of", c), (c, "grandchild_of", g)]
            for c in children:
                triples += [(p, "parent_of", c), (c, "child_of", p)]
                triples += [(c, "sibling_of", d) for d in children if d != c]
        triples += [(p, "sibling_of", q) for p in parents for q in parents if p != q]
    return [(h, REL[r], t) for h, r, t in triples], n_people


def neighbour_table(train, n_entities):
    nbrs = defaultdict(list)
    for h, r, t in train:
        nbrs[h].append((r, t))
    rel = torch.zeros(n_entities, MAX_DEG, dtype=torch.long)
    ent = torch.zeros(n_entities, MAX_DEG, dtype=torch.long)
    keep = torch.zeros(n_entities, MAX_DEG, dtype=torch.bool)
    for e in range(n_entities):
        pairs = [(REL["self"], e)] + nbrs[e][: MAX_DEG - 1]
        rel[e, : len(pairs)] = torch.tensor([r for r, _ in pairs])
        ent[e, : len(pairs)] = torch.tensor([t for _, t in pairs])
        keep[e, : len(pairs)] = True
    return rel, ent, keep


class NeighbourAttentionDistMult(nn.Module):
    def __init__(self, n_entities, table, dim=64):
        super().__init__()
        self.entity = nn.Embedding(n_entities, dim)
        self.relation = nn.Embedding(len(RELATIONS), dim)
        self.query = nn.Linear(2 * dim, dim)
        self.key = nn.Linear(2 * dim, dim)
        self.value = nn.Linear(2 * dim, dim)
        self.register_buffer("nbr_rel", table[0])
        self.register_buffer("nbr_ent", table[1])
        self.register_buffer("nbr_keep", table[2])
        nn.init.xavier_uniform_(self.entity.weight)
        nn.init.xavier_uniform_(self.relation.weight)

    def encode_head(self, heads, rels):
        e_h, r_q = self.entity(heads), self.relation(rels)
        pairs = torch.cat([self.relation(self.nbr_rel[heads]), self.entity(self.nbr_ent[heads])], dim=-1)
        q = self.query(torch.cat([e_h, r_q], dim=-1))
        k, v = self.key(pairs), self.value(pairs)
        scores = torch.einsum("bd,bnd->bn", q, k) / math.sqrt(q.size(-1))
        scores = scores.masked_fill(~self.nbr_keep[heads], torch.finfo(scores.dtype).min)
        attn = scores.softmax(dim=-1)
        return e_h + torch.einsum("bn,bnd->bd", attn, v), attn

    def forward(self, heads, rels):
        h, _ = self.encode_head(heads, rels)
        return (h * self.relation(rels)) @ self.entity.weight.t()


def rank_metrics(model, queries, known):
    model.eval()
    ranks = []
    with torch.no_grad():
        heads = torch.tensor([h for h, _, _ in queries])
        rels = torch.tensor([r for _, r, _ in queries])
        scores = model(heads, rels)
        for i, (h, r, t) in enumerate(queries):
            row = scores[i].clone()
            others = [x for x in known[(h, r)] if x != t]
            if others:
                row[others] = -float("inf")
            ranks.append(int((row > row[t]).sum()) + 1)
    ranks = torch.tensor(ranks, dtype=torch.float)
    return (1 / ranks).mean().item(), (ranks <= 1).float().mean().item(), (ranks <= 3).float().mean().item()


def main():
    rng = random.Random(0)
    torch.manual_seed(0)
    triples, n_entities = make_families(60, rng)
    rng.shuffle(triples)
    n_test = len(triples) // 10
    test, train = triples[:n_test], triples[n_test:]
    known = defaultdict(set)
    for h, r, t in triples:
        known[(h, r)].add(t)
    print(f"{n_entities} people, {len(train)} training and {len(test)} test triples")

    table = neighbour_table(train, n_entities)
    print("neighbours of entity 0:", [(RELATIONS[r], t) for r, t, k in zip(*(x[0].tolist() for x in table)) if k])
    assert table[2][:, 0].all(), "every entity has at least its self pair"

    model = NeighbourAttentionDistMult(n_entities, table)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    data = torch.tensor(train)
    for epoch in range(24):
        model.train()
        perm = data[torch.randperm(len(data))]
        total = 0.0
        for s in range(0, len(perm), 128):
            h, r, t = perm[s : s + 128].unbind(1)
            loss = F.cross_entropy(model(h, r), t, label_smoothing=0.1)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
        if epoch % 8 == 7:
            mrr, h1, h3 = rank_metrics(model, test, known)
            print(f"epoch {epoch + 1}: loss {total / math.ceil(len(perm) / 128):.3f}  MRR {mrr:.3f}  Hits@1 {h1:.3f}  Hits@3 {h3:.3f}")

    _, attn = model.encode_head(torch.tensor([0]), torch.tensor([REL["grandparent_of"]]))
    print("attention of entity 0 over its neighbour slots:", [round(a, 3) for a in attn[0].tolist()])


if __name__ == "__main__":
    main()
