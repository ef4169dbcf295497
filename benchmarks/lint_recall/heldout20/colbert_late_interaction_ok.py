"""ColBERT-style late interaction: per-token embeddings, MaxSim over document tokens.

Query and document towers share a tiny encoder; the score of a (query, passage) pair sums,
over the real query tokens, the best cosine match among the real document tokens.
Twin (correct): MaxSim fills the document padding (attention_mask == 0) with -inf.
Source: seed self_attention_mask_guide.txt Q1 (mask value set the wrong way round, True where
False was meant); lucidrains/x-transformers#240 and #172 (what True means), conventions.md §1.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

PAD_ID, CLS_ID, VOCAB = 0, 1, 300


def tokenize(texts, max_len=16):
    rows = [[CLS_ID] + [2 + sum(map(ord, w)) % (VOCAB - 2) for w in t.split()][: max_len - 1] for t in texts]
    width = max(len(r) for r in rows)
    input_ids = torch.tensor([r + [PAD_ID] * (width - len(r)) for r in rows])
    return {"input_ids": input_ids, "attention_mask": (input_ids != PAD_ID).long()}


class TokenEncoder(nn.Module):
    def __init__(self, dim=32, out_dim=16, heads=4):
        super().__init__()
        self.heads = heads
        self.emb = nn.Embedding(VOCAB, dim, padding_idx=PAD_ID)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, out_dim, bias=False)

    def forward(self, input_ids, attention_mask):
        x = self.emb(input_ids)
        B, L, D = x.shape
        q, k, v = self.qkv(x).view(B, L, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        keep = attention_mask.bool()[:, None, None, :]
        h = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        h = x + h.transpose(1, 2).reshape(B, L, D)
        return F.normalize(self.proj(h), dim=-1)


def maxsim(q_emb, q_attention_mask, d_emb, d_attention_mask):
    """Score every query against every passage: (Bq, Bd)."""
    sim = torch.einsum("qnd,pmd->qpnm", q_emb, d_emb)
    sim = sim.masked_fill(d_attention_mask[None, :, None, :] == 0, float("-inf"))
    best = sim.max(dim=-1).values
    return (best * q_attention_mask[:, None, :]).sum(-1)


class ColBERT(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = TokenEncoder()

    def forward(self, queries, passages):
        q, d = tokenize(queries), tokenize(passages)
        q_emb = self.encoder(q["input_ids"], q["attention_mask"])
        d_emb = self.encoder(d["input_ids"], d["attention_mask"])
        return maxsim(q_emb, q["attention_mask"], d_emb, d["attention_mask"])


if __name__ == "__main__":
    torch.manual_seed(0)
    model = ColBERT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    queries = ["who wrote hamlet", "boiling point of water", "capital of france"]
    passages = ["hamlet is a play written by william shakespeare around 1600",
                "water boils at 100 degrees",
                "paris is the capital and largest city of france"]
    for step in range(30):
        scores = model(queries, passages)
        loss = F.cross_entropy(scores, torch.arange(len(queries)))
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("loss", round(loss.item(), 4), "ranking", model(queries, passages).argmax(-1).tolist())
