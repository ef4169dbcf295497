"""RESDSQL-style schema item classifier for text-to-SQL ranking (Spider).

The question and the serialised schema ``question | table : col , col | table : ...``
are read by one cross-encoder; table and column names are pooled from their token
spans, every table attends to its own columns (``table_column_cross_attention``) and two
heads score whether each table and column is used by the gold SQL. The top-ranked items
make the pruned schema handed to the seq2seq SQL generator. Trained with focal loss.

Source: conventions.md §1 (HF attention_mask row; direction cheat-sheet), §5 item 1;
seed masked_fill_inplace.txt (作用); seed self_attention_mask_guide.txt §7 Q1
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD_ID, BOS_ID, EOS_ID, BAR_ID, COLON_ID, COMMA_ID = 0, 1, 2, 3, 4, 5


class SchemaSerializer:
    def __init__(self, vocab_size=800):
        self.vocab_size = vocab_size

    def word(self, w):
        return 6 + sum(ord(c) * 17 ** i for i, c in enumerate(w)) % (self.vocab_size - 6)

    def __call__(self, questions, schemas, padding=True):
        encoded, spans = [], []
        for question, schema in zip(questions, schemas):
            ids = [BOS_ID] + [self.word(w) for w in question.split()]
            table_spans, column_spans = [], []
            for table, columns in schema:
                ids.append(BAR_ID)
                table_spans.append((len(ids), len(ids) + len(table.split())))
                ids += [self.word(w) for w in table.split()] + [COLON_ID]
                cols = []
                for j, col in enumerate(columns):
                    cols.append((len(ids), len(ids) + len(col.split())))
                    ids += [self.word(w) for w in col.split()] + ([COMMA_ID] if j < len(columns) - 1 else [])
                column_spans.append(cols)
            encoded.append(ids + [EOS_ID])
            spans.append((table_spans, column_spans))
        width = max(map(len, encoded))
        input_ids = torch.tensor([ids + [PAD_ID] * (width - len(ids)) for ids in encoded])
        return {"input_ids": input_ids, "attention_mask": (input_ids != PAD_ID).long()}, spans


class EncoderLayer(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.o = nn.Linear(hidden, hidden)
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.ff = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))

    def forward(self, x, attention_mask):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(d // self.heads)
        scores = scores.masked_fill(attention_mask[:, None, None, :] == 0, float("-inf"))
        ctx = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, n, d)
        x = self.ln1(x + self.o(ctx))
        return self.ln2(x + self.ff(x))


class SchemaItemClassifier(nn.Module):
    def __init__(self, vocab_size=800, hidden=64, heads=4, layers=2, max_len=128):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, hidden, padding_idx=PAD_ID)
        self.pos = nn.Embedding(max_len, hidden)
        self.layers = nn.ModuleList(EncoderLayer(hidden, heads) for _ in range(layers))
        self.table_name_linear_after_pooling = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU())
        self.column_info_linear_after_pooling = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU())
        self.table_column_cross_attention_layer = nn.MultiheadAttention(hidden, num_heads=4, batch_first=True)
        self.table_norm = nn.LayerNorm(hidden)
        self.table_name_cls_head = nn.Sequential(nn.Linear(hidden, hidden // 2), nn.LeakyReLU(), nn.Linear(hidden // 2, 2))
        self.column_info_cls_head = nn.Sequential(nn.Linear(hidden, hidden // 2), nn.LeakyReLU(), nn.Linear(hidden // 2, 2))

    def table_column_cross_attention(self, table_embeddings, column_embeddings):
        n_cols = [c.size(0) for c in column_embeddings]
        columns = nn.utils.rnn.pad_sequence(column_embeddings, batch_first=True)
        column_padding = torch.arange(columns.size(1))[None, :] >= torch.tensor(n_cols)[:, None]
        attended, _ = self.table_column_cross_attention_layer(
            table_embeddings[:, None], columns, columns, key_padding_mask=column_padding, need_weights=False)
        return self.table_norm(table_embeddings + attended[:, 0])

    def forward(self, encoder_input_ids, encoder_input_attention_mask, batch_spans):
        x = self.embed(encoder_input_ids) + self.pos(torch.arange(encoder_input_ids.size(1)))
        for layer in self.layers:
            x = layer(x, encoder_input_attention_mask)
        table_logits, column_logits = [], []
        for i, (table_spans, column_spans) in enumerate(batch_spans):
            tables = torch.stack([x[i, s:e].mean(0) for s, e in table_spans])
            tables = self.table_name_linear_after_pooling(tables)
            columns = [self.column_info_linear_after_pooling(torch.stack([x[i, s:e].mean(0) for s, e in cols]))
                       for cols in column_spans]
            tables = self.table_column_cross_attention(tables, columns)
            table_logits.append(self.table_name_cls_head(tables))
            column_logits.append(self.column_info_cls_head(torch.cat(columns)))
        return table_logits, column_logits


def focal_loss(logits, labels, alpha=0.75, gamma=2.0):
    ce = F.cross_entropy(logits, labels, reduction="none")
    p_t = torch.exp(-ce)
    weight = torch.where(labels == 1, torch.full_like(ce, alpha), torch.full_like(ce, 1 - alpha))
    return (weight * (1 - p_t) ** gamma * ce).mean()


SPIDER = [
    ("how many heads of the departments are older than 56",
     [("department", ["department id", "name", "budget"]), ("head", ["head id", "name", "age"])],
     [0, 1], [0, 0, 0, 0, 0, 1]),
    ("what are the names of singers ordered by age",
     [("singer", ["singer id", "name", "age", "country"]), ("concert", ["concert id", "year"])],
     [1, 0], [0, 1, 1, 0, 0, 0]),
]


if __name__ == "__main__":
    torch.manual_seed(0)
    serializer, model = SchemaSerializer(), SchemaItemClassifier()
    inputs, spans = serializer([q for q, *_ in SPIDER], [s for _, s, *_ in SPIDER])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(3):
        table_logits, column_logits = model(inputs["input_ids"], inputs["attention_mask"], spans)
        loss = sum(focal_loss(t, torch.tensor(ex[2])) + focal_loss(c, torch.tensor(ex[3]))
                   for t, c, ex in zip(table_logits, column_logits, SPIDER))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        table_logits, column_logits = model(inputs["input_ids"], inputs["attention_mask"], spans)
    for (question, schema, *_), t in zip(SPIDER, table_logits):
        probs = t.softmax(-1)[:, 1]
        print(question, "->", [schema[j][0] for j in probs.argsort(descending=True).tolist()])
