"""TAPAS-style cell selection for sequential table QA (SQA), one question at a time.

The question and the flattened table share one BERT input; seven token-type channels
(segment, column, row, previous answer, column rank, inverse rank, numeric relation) are
embedded and summed. Token logits are averaged per cell and per column, as in TAPAS's
``segmented_tensor`` reductions, and an aggregation head reads [CLS]. In SQA each question
depends on the previous answer (``prev_labels``), so the conversation is fed in order.

Source: seed self_attention_mask_guide.txt §2, §5 (mask shapes), §7 Q1; conventions.md §2.6, §5 item 6
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

TYPE_VOCAB_SIZES = [3, 16, 16, 2, 16, 16, 10]
PAD, CLS, SEP = 0, 1, 2
AGGREGATIONS = ["NONE", "SUM", "AVERAGE", "COUNT"]


class TapasLikeTokenizer:
    def __init__(self, vocab_size=600, max_length=48):
        self.vocab_size, self.max_length = vocab_size, max_length

    def piece(self, word):
        return 3 + sum(ord(c) * (7 + i) for i, c in enumerate(word.lower())) % (self.vocab_size - 3)

    def __call__(self, table, query, prev_answer_coordinates=()):
        header, rows = table
        ids, types = [CLS], [[0] * 7]
        for w in query.split():
            ids.append(self.piece(w))
            types.append([0] * 7)
        ids.append(SEP)
        types.append([0] * 7)
        for r, row in enumerate([header] + rows):
            for c, cell in enumerate(row):
                numeric = [float(v[c]) for v in rows if str(v[c]).replace(".", "").isdigit()]
                rank = sorted(numeric).index(float(cell)) + 1 if r and str(cell).replace(".", "").isdigit() else 0
                inv_rank = len(numeric) - rank + 1 if rank else 0
                prev = int((r - 1, c) in prev_answer_coordinates)
                for w in str(cell).split():
                    ids.append(self.piece(w))
                    types.append([1, c + 1, r, prev, rank, inv_rank, 0])
        ids, types = ids[:self.max_length], types[:self.max_length]
        n_pad = self.max_length - len(ids)
        input_ids = torch.tensor([ids + [PAD] * n_pad])
        token_type_ids = torch.tensor([types + [[0] * 7] * n_pad])
        return {"input_ids": input_ids, "attention_mask": (input_ids != PAD).long(), "token_type_ids": token_type_ids}


class TapasLayer(nn.Module):
    def __init__(self, hidden, heads, dropout=0.1):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.attn_out = nn.Linear(hidden, hidden)
        self.attn_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.intermediate = nn.Linear(hidden, 4 * hidden)
        self.output = nn.Linear(4 * hidden, hidden)
        self.out_norm = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, hidden_states, attention_mask):
        b, n, d = hidden_states.shape
        q, k, v = self.qkv(hidden_states).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask.bool()[:, None, None, :],
                                             dropout_p=self.dropout if self.training else 0.0)
        h = self.attn_norm(hidden_states + self.attn_out(ctx.transpose(1, 2).reshape(b, n, d)))
        return self.out_norm(h + self.output(F.gelu(self.intermediate(h))))


class TapasForQuestionAnswering(nn.Module):
    def __init__(self, vocab_size=600, hidden=64, heads=4, layers=2, max_length=48, temperature=1.0):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden, padding_idx=PAD)
        self.position_embeddings = nn.Embedding(max_length, hidden)
        self.token_type_embeddings = nn.ModuleList(nn.Embedding(n, hidden) for n in TYPE_VOCAB_SIZES)
        self.emb_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.layers = nn.ModuleList(TapasLayer(hidden, heads) for _ in range(layers))
        self.output_weights = nn.Parameter(torch.randn(hidden) * 0.02)
        self.column_output_weights = nn.Parameter(torch.randn(hidden) * 0.02)
        self.aggregation_classifier = nn.Linear(hidden, len(AGGREGATIONS))
        self.temperature = temperature

    def forward(self, input_ids, attention_mask, token_type_ids):
        positions = torch.arange(input_ids.size(1), device=input_ids.device)
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions)
        for i, emb in enumerate(self.token_type_embeddings):
            x = x + emb(token_type_ids[..., i])
        x = self.emb_norm(x)
        for layer in self.layers:
            x = layer(x, attention_mask)
        token_logits = (x @ self.output_weights) / self.temperature
        column_ids, row_ids = token_type_ids[..., 1], token_type_ids[..., 2]
        is_cell = (token_type_ids[..., 0] == 1) & (row_ids > 0) & attention_mask.bool()
        n_cells = TYPE_VOCAB_SIZES[1] * TYPE_VOCAB_SIZES[2]
        cell_index = (column_ids * TYPE_VOCAB_SIZES[2] + row_ids).masked_fill(~is_cell, 0)
        weights = F.one_hot(cell_index, n_cells).float() * is_cell[..., None]
        counts = weights.sum(1)
        cell_logits = torch.einsum("bn,bnc->bc", token_logits, weights) / counts.clamp(min=1)
        cell_logits = cell_logits.masked_fill(counts == 0, torch.finfo(cell_logits.dtype).min)
        col_weights = F.one_hot(column_ids.masked_fill(~is_cell, 0), TYPE_VOCAB_SIZES[1]).float() * is_cell[..., None]
        col_repr = torch.einsum("bnd,bnc->bcd", x, col_weights) / col_weights.sum(1)[..., None].clamp(min=1)
        column_logits = (col_repr @ self.column_output_weights).masked_fill(col_weights.sum(1) == 0,
                                                                           torch.finfo(x.dtype).min)
        return cell_logits, column_logits, self.aggregation_classifier(x[:, 0])


def answer_coordinates(cell_logits, column_logits):
    column = int(column_logits[0].argmax())
    rows = (cell_logits[0].view(TYPE_VOCAB_SIZES[1], TYPE_VOCAB_SIZES[2])[column] > 0).nonzero().flatten()
    return tuple((int(r) - 1, column - 1) for r in rows)


TABLE = (["player", "team", "goals"], [["messi", "barcelona", "50"], ["ronaldo", "real madrid", "46"], ["suarez", "barcelona", "40"]])
CONVERSATION = [("which players play for barcelona", ((0, 0), (2, 0)), 0),
                ("how many goals did they score", ((0, 2), (2, 2)), 1)]


if __name__ == "__main__":
    torch.manual_seed(0)
    tokenizer, model = TapasLikeTokenizer(), TapasForQuestionAnswering()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(3):
        prev, total = (), 0.0
        for question, coords, agg in CONVERSATION:
            cell_logits, column_logits, agg_logits = model(**tokenizer(TABLE, question, prev))
            target = torch.zeros_like(cell_logits)
            for r, c in coords:
                target[0, (c + 1) * TYPE_VOCAB_SIZES[2] + r + 1] = 1.0
            column = torch.tensor([coords[0][1] + 1])
            exists = cell_logits > torch.finfo(cell_logits.dtype).min
            loss = (F.binary_cross_entropy_with_logits(cell_logits[exists], target[exists])
                    + F.cross_entropy(column_logits, column) + F.cross_entropy(agg_logits, torch.tensor([agg])))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total, prev = total + loss.item(), coords
        print(f"epoch {epoch} loss {total:.4f}")
    model.eval()
    with torch.no_grad():
        cell_logits, column_logits, agg_logits = model(**tokenizer(TABLE, CONVERSATION[0][0]))
    print("answer", answer_coordinates(cell_logits, column_logits), AGGREGATIONS[int(agg_logits.argmax())])
