"""DPR-style bi-encoder: separate question and passage towers, [CLS] pooling, in-batch negatives.

Each tower is a small nn.TransformerEncoder-like stack built on nn.MultiheadAttention; the
collate function returns a Hugging Face style batch (`attention_mask`, True = real token).
Bug: the batch's `attention_mask` goes straight into `key_padding_mask` (True = padding).
Source: seed self_attention_mask_guide.txt §2 (key_padding_mask: True = padding) and Q1;
conventions.md §1 direction cheat-sheet; pytorch/pytorch PR #141694 (key_padding_mask doc).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

PAD_ID, CLS_ID, VOCAB = 0, 1, 500


def collate(texts, max_len=24):
    rows = [[CLS_ID] + [2 + sum(map(ord, w)) % (VOCAB - 2) for w in t.lower().split()][: max_len - 1]
            for t in texts]
    width = max(len(r) for r in rows)
    input_ids = torch.tensor([r + [PAD_ID] * (width - len(r)) for r in rows])
    return {"input_ids": input_ids, "attention_mask": input_ids != PAD_ID}


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, attention_mask):
        h = self.ln1(x)
        h, _ = self.attn(h, h, h, key_padding_mask=attention_mask, need_weights=False)  # expect: MC502 dpr
        x = x + h
        return x + self.ff(self.ln2(x))


class Tower(nn.Module):
    def __init__(self, dim=48, heads=4, layers=2, max_len=64):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, dim, padding_idx=PAD_ID)
        self.pos = nn.Embedding(max_len, dim)
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(layers)])

    def forward(self, input_ids, attention_mask):
        x = self.tok(input_ids) + self.pos(torch.arange(input_ids.shape[1]))
        for block in self.blocks:
            x = block(x, attention_mask)
        return x[:, 0]  # [CLS]


def train(questions, passages, steps=40):
    q_tower, p_tower = Tower(), Tower()
    params = list(q_tower.parameters()) + list(p_tower.parameters())
    opt = torch.optim.AdamW(params, lr=2e-3)
    qb, pb = collate(questions), collate(passages)
    for _ in range(steps):
        q = q_tower(qb["input_ids"], qb["attention_mask"])
        p = p_tower(pb["input_ids"], pb["attention_mask"])
        loss = F.cross_entropy(q @ p.T, torch.arange(len(questions)))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return q_tower, p_tower, loss.item()


if __name__ == "__main__":
    torch.manual_seed(0)
    questions = ["who painted the mona lisa", "how tall is mount everest", "what is dna"]
    passages = ["the mona lisa is a portrait painted by leonardo da vinci",
                "mount everest is 8849 metres tall",
                "dna carries the genetic instructions of living organisms in every cell"]
    q_tower, p_tower, loss = train(questions, passages)
    q_tower.eval()
    with torch.no_grad():
        alone = q_tower(**collate(questions[2:]))
        padded = q_tower(**collate(questions))[2]
    print("loss", round(loss, 4), "padded vs alone", (alone[0] - padded).abs().max().item())
