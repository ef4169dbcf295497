"""TURL-style structure-aware table encoder fine-tuned for column type annotation.

A relational web table is read as its caption tokens, one header token sequence per
column and the linked entity cells. TURL's visibility matrix restricts attention to
structurally related elements: the caption is visible to everything, a header to the
caption and its own column, an entity cell to the caption, its header and the cells in
its row and column. Column types (multi-label, Freebase-like) are predicted from the
header encoding concatenated with the mean of the column's entity encodings.

Source: pytorch/pytorch#103963 (conventions.md §3 item 6); seed self_attention_mask_guide.txt
§3 (常见误区), §7 Q3; conventions.md §1 (direction cheat-sheet)
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIG = {"hidden_size": 64, "num_heads": 4, "num_layers": 2, "word_vocab": 500, "entity_vocab": 200,
          "max_columns": 8, "type_vocab": 6}
TYPES = ["people.person", "sports.team", "location.city", "film.film", "time.year", "music.artist"]


def word_id(w):
    return 1 + sum(ord(c) * 13 ** i for i, c in enumerate(w)) % (CONFIG["word_vocab"] - 1)


def visibility_matrix(kinds, rows, cols):
    n = len(kinds)
    visibility = torch.zeros(n, n)
    for i in range(n):
        for j in range(n):
            if kinds[i] == 0 or kinds[j] == 0:
                visibility[i, j] = 1
            elif kinds[i] == 1 or kinds[j] == 1:
                visibility[i, j] = float(cols[i] == cols[j])
            else:
                visibility[i, j] = float(rows[i] == rows[j] or cols[i] == cols[j])
    return visibility


def collate_tables(tables):
    items = []
    for table in tables:
        tokens, kinds, rows, cols = [], [], [], []
        for w in table["caption"].split():
            tokens.append(word_id(w)); kinds.append(0); rows.append(-1); cols.append(-1)
        for c, header in enumerate(table["headers"]):
            for w in header.split():
                tokens.append(word_id(w)); kinds.append(1); rows.append(-1); cols.append(c)
        for r, row in enumerate(table["entities"]):
            for c, entity in enumerate(row):
                tokens.append(entity); kinds.append(2); rows.append(r); cols.append(c)
        items.append((tokens, kinds, rows, cols))
    n = max(len(t[0]) for t in items)
    batch = {k: torch.zeros(len(items), n, dtype=torch.long) for k in ("ids", "kind", "row", "col")}
    batch["visibility"] = torch.zeros(len(items), n, n)
    batch["valid"] = torch.zeros(len(items), n, dtype=torch.bool)
    for b, (tokens, kinds, rows, cols) in enumerate(items):
        m = len(tokens)
        batch["ids"][b, :m], batch["kind"][b, :m] = torch.tensor(tokens), torch.tensor(kinds)
        batch["row"][b, :m], batch["col"][b, :m] = torch.tensor(rows), torch.tensor(cols)
        batch["visibility"][b, :m, :m] = visibility_matrix(kinds, rows, cols)
        batch["valid"][b, :m] = True
    return batch


class StructureAwareAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.in_proj = nn.Linear(hidden, 3 * hidden)
        self.out_proj = nn.Linear(hidden, hidden)

    def forward(self, x, visibility):
        b, n, d = x.shape
        q, k, v = self.in_proj(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(d // self.heads)
        scores = scores.masked_fill(visibility[:, None] == 0, torch.finfo(scores.dtype).min)
        probs = F.softmax(scores, dim=-1)
        return self.out_proj((probs @ v).transpose(1, 2).reshape(b, n, d))


class TURLEncoder(nn.Module):
    def __init__(self, cfg=CONFIG):
        super().__init__()
        h = cfg["hidden_size"]
        self.word_embeddings = nn.Embedding(cfg["word_vocab"], h)
        self.entity_embeddings = nn.Embedding(cfg["entity_vocab"], h)
        self.kind_embeddings = nn.Embedding(3, h)
        self.column_embeddings = nn.Embedding(cfg["max_columns"] + 1, h)
        self.attn = nn.ModuleList(StructureAwareAttention(h, cfg["num_heads"]) for _ in range(cfg["num_layers"]))
        self.norm1 = nn.ModuleList(nn.LayerNorm(h) for _ in range(cfg["num_layers"]))
        self.ffn = nn.ModuleList(nn.Sequential(nn.Linear(h, 4 * h), nn.GELU(), nn.Linear(4 * h, h))
                                 for _ in range(cfg["num_layers"]))
        self.norm2 = nn.ModuleList(nn.LayerNorm(h) for _ in range(cfg["num_layers"]))

    def forward(self, ids, kind, col, visibility):
        is_entity = kind == 2
        x = torch.where(is_entity[..., None], self.entity_embeddings(ids.clamp(max=CONFIG["entity_vocab"] - 1)),
                        self.word_embeddings(ids))
        x = x + self.kind_embeddings(kind) + self.column_embeddings(col + 1)
        for attn, n1, ffn, n2 in zip(self.attn, self.norm1, self.ffn, self.norm2):
            x = n1(x + attn(x, visibility))
            x = n2(x + ffn(x))
        return x


class ColumnTypeAnnotator(nn.Module):
    def __init__(self, cfg=CONFIG):
        super().__init__()
        self.encoder = TURLEncoder(cfg)
        self.classifier = nn.Linear(2 * cfg["hidden_size"], cfg["type_vocab"])

    def forward(self, batch, n_columns):
        x = self.encoder(batch["ids"], batch["kind"], batch["col"], batch["visibility"])
        column = F.one_hot(batch["col"].clamp(min=0), CONFIG["max_columns"])[..., :n_columns].float()
        column = column * batch["valid"][..., None]
        header = column * (batch["kind"] == 1)[..., None]
        entity = column * (batch["kind"] == 2)[..., None]
        header_repr = torch.einsum("bnc,bnd->bcd", header, x) / header.sum(1)[..., None].clamp(min=1)
        entity_repr = torch.einsum("bnc,bnd->bcd", entity, x) / entity.sum(1)[..., None].clamp(min=1)
        return self.classifier(torch.cat([header_repr, entity_repr], dim=-1))


WIKITABLES = [
    dict(caption="2010 fifa world cup squads", headers=["player", "club", "city"],
         entities=[[11, 40, 71], [12, 41, 72], [13, 40, 71]], types=[[0], [1], [2]]),
    dict(caption="best picture winners", headers=["film", "year"],
         entities=[[90, 150], [91, 151]], types=[[3], [4]]),
]


if __name__ == "__main__":
    torch.manual_seed(0)
    model = ColumnTypeAnnotator()
    batch = collate_tables(WIKITABLES)
    n_columns = max(len(t["headers"]) for t in WIKITABLES)
    target = torch.zeros(len(WIKITABLES), n_columns, CONFIG["type_vocab"])
    column_valid = torch.zeros(len(WIKITABLES), n_columns, dtype=torch.bool)
    for b, table in enumerate(WIKITABLES):
        column_valid[b, :len(table["headers"])] = True
        for c, labels in enumerate(table["types"]):
            target[b, c, labels] = 1.0
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(4):
        logits = model(batch, n_columns)
        loss = F.binary_cross_entropy_with_logits(logits[column_valid], target[column_valid])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")
    with torch.no_grad():
        predicted = model(batch, n_columns).sigmoid() > 0.5
    print([[TYPES[t] for t in range(len(TYPES)) if predicted[0, c, t]] for c in range(3)])
