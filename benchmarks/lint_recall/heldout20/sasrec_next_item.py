"""SASRec next-item recommendation (after pmixer/SASRec.pytorch), left-padded item histories.

Item 0 is padding; `log2feats` scales item embeddings, adds positions, zeroes padded steps with
`timeline_mask`, and runs pre-LN blocks on nn.MultiheadAttention (sequence-first) with a causal
bool `attention_mask` (True = blocked) and a key padding mask. BCE over positive/negative items.
Bug: the causal mask is built as tril without `~`, so MHA blocks the past and the step itself.
Source: pytorch/pytorch#29546 (flipped look-ahead mask), rasbt/LLMs-from-scratch#1061,
conventions.md §3 items 9 and 14 (tril vs triu for a True = drop mask).
"""
import torch
import torch.nn as nn

N_ITEMS, MAXLEN, DIM = 50, 8, 32


class SASRec(nn.Module):
    def __init__(self, blocks=2, heads=2):
        super().__init__()
        self.item_emb = nn.Embedding(N_ITEMS + 1, DIM, padding_idx=0)
        self.pos_emb = nn.Embedding(MAXLEN, DIM)
        self.attn_ln = nn.ModuleList([nn.LayerNorm(DIM) for _ in range(blocks)])
        self.attn = nn.ModuleList([nn.MultiheadAttention(DIM, heads) for _ in range(blocks)])
        self.ffn = nn.ModuleList([nn.Sequential(nn.LayerNorm(DIM), nn.Linear(DIM, DIM), nn.ReLU(),
                                                nn.Linear(DIM, DIM)) for _ in range(blocks)])
        self.last_ln = nn.LayerNorm(DIM)

    def log2feats(self, log_seqs):
        seqs = self.item_emb(log_seqs) * DIM ** 0.5 + self.pos_emb(torch.arange(log_seqs.shape[1]))
        timeline_mask = log_seqs == 0
        seqs = seqs * ~timeline_mask.unsqueeze(-1)
        tl = seqs.shape[1]
        attention_mask = torch.tril(torch.ones((tl, tl), dtype=torch.bool))  # expect: MC521 sasrec
        for ln, attn, ffn in zip(self.attn_ln, self.attn, self.ffn):
            seqs = seqs.transpose(0, 1)
            q = ln(seqs)
            out, _ = attn(q, seqs, seqs, attn_mask=attention_mask,  # also: MC521
                          key_padding_mask=timeline_mask, need_weights=False)
            seqs = (q + out).transpose(0, 1)
            seqs = seqs + ffn(seqs)
            seqs = seqs * ~timeline_mask.unsqueeze(-1)
        return self.last_ln(seqs)

    def forward(self, log_seqs, pos_seqs, neg_seqs):
        feats = self.log2feats(log_seqs)
        pos_logits = (feats * self.item_emb(pos_seqs)).sum(-1)
        neg_logits = (feats * self.item_emb(neg_seqs)).sum(-1)
        return pos_logits, neg_logits

    def predict(self, log_seqs):
        return self.log2feats(log_seqs)[:, -1] @ self.item_emb.weight.T


def make_batch(histories):
    seq = torch.zeros(len(histories), MAXLEN, dtype=torch.long)
    pos = torch.zeros_like(seq)
    for i, h in enumerate(histories):
        h = h[-(MAXLEN + 1):]
        seq[i, MAXLEN - len(h) + 1:] = torch.tensor(h[:-1])
        pos[i, MAXLEN - len(h) + 1:] = torch.tensor(h[1:])
    neg = torch.randint(1, N_ITEMS + 1, seq.shape) * (pos != 0)
    return seq, pos, neg


if __name__ == "__main__":
    torch.manual_seed(0)
    histories = [list(range(s, s + 7)) for s in range(1, 40, 3)]  # each user walks up the catalogue
    model = SASRec()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    bce = nn.BCEWithLogitsLoss()
    for _ in range(150):
        seq, pos, neg = make_batch(histories)
        pos_logits, neg_logits = model(seq, pos, neg)
        real = pos != 0
        loss = bce(pos_logits[real], torch.ones_like(pos_logits[real])) + bce(neg_logits[real], torch.zeros_like(neg_logits[real]))
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        hits = (model.predict(make_batch(histories)[1])[:, 1:].argmax(-1) + 1 == torch.tensor([h[-1] + 1 for h in histories])).float().mean()
    print("loss", round(loss.item(), 4), "next-item hit rate", hits.item())
