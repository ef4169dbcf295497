"""Cross-encoder reranker: each (query, passage) pair is tokenized into one sequence with segment
ids, candidates are scored in fixed-size batches padded to the longest pair, and the [CLS] state
is read out as the relevance score.

Source: seed self_attention_mask_guide.txt §2, conventions.md §1 (direction cheat-sheet) and §5 item 1, lucidrains/x-transformers#240
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
VOCAB, DIM, HEADS = 64, 32, 4
PAD, CLS, SEP = 0, 1, 2


def tokenize_pairs(query, passages):
    rows = [[CLS] + query + [SEP] + p + [SEP] for p in passages]
    types = [[0] * (len(query) + 2) + [1] * (len(p) + 1) for p in passages]
    width = max(map(len, rows))
    return {
        "input_ids": torch.tensor([r + [PAD] * (width - len(r)) for r in rows]),
        "token_type_ids": torch.tensor([t + [0] * (width - len(t)) for t in types]),
        "attention_mask": torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows]),
    }


class EncoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.out = nn.Linear(DIM, DIM)
        self.ffn = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))
        self.ln1, self.ln2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)

    def forward(self, x, attention_mask):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)
        attn_mask = (attention_mask == 0)[:, None, None, :]  # expect: MC511 reranker
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)  # also: MC511
        x = self.ln1(x + self.out(a.transpose(1, 2).reshape(b, t, DIM)))
        return self.ln2(x + self.ffn(x))


class CrossEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM, padding_idx=PAD)
        self.seg = nn.Embedding(2, DIM)
        self.pos = nn.Embedding(64, DIM)
        self.layers = nn.ModuleList(EncoderLayer() for _ in range(2))
        self.score = nn.Linear(DIM, 1)

    def forward(self, input_ids, token_type_ids, attention_mask):
        x = self.tok(input_ids) + self.seg(token_type_ids) + self.pos(torch.arange(input_ids.shape[1]))
        for layer in self.layers:
            x = layer(x, attention_mask)
        return self.score(x[:, 0]).squeeze(-1)


@torch.no_grad()
def rerank(model, query, passages, batch_size=3):
    scores = []
    for i in range(0, len(passages), batch_size):
        batch = tokenize_pairs(query, passages[i:i + batch_size])
        scores.append(model(**batch))
    scores = torch.cat(scores)
    return scores, scores.argsort(descending=True)


if __name__ == "__main__":
    model = CrossEncoder().eval()
    query = [5, 9, 14]
    passages = [[20, 21, 22, 23, 24, 25], [30, 31], [40, 41, 42, 43], [50, 51, 52], [33, 34, 35, 36, 37], [60]]
    batched, order = rerank(model, query, passages)
    alone, order_alone = rerank(model, query, passages, batch_size=1)
    print("batched:", [round(s, 4) for s in batched.tolist()])
    print("alone:  ", [round(s, 4) for s in alone.tolist()])
    print(f"max |batched - alone|: {(batched - alone).abs().max().item():.3g}")
    print("ranking batched", order.tolist(), "alone", order_alone.tolist())
