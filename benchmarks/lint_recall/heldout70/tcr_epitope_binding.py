"""TCR-epitope binding classifier: CDR3beta and peptide sequences encoded by a shared
residue tokenizer, self-attention within each chain and CDR3-to-epitope cross
attention, trained with shuffled-pair negatives (TITAN / ERGO-II setting).

Source: conventions.md section 1 (Hugging Face attention_mask row, direction
cheat-sheet), section 5 item 1; seed masked_fill_inplace.txt (作用);
seed self_attention_mask_guide.txt section 7 (Q1).
"""
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWY"


class ResidueTokenizer:
    def __init__(self):
        self.vocab = {"[PAD]": 0, "[CLS]": 1, "[SEP]": 2}
        for a in AMINO_ACIDS:
            self.vocab[a] = len(self.vocab)
        self.pad_token_id = 0

    def __call__(self, sequences, padding="longest", return_tensors="pt"):
        ids = [[1] + [self.vocab[a] for a in s] + [2] for s in sequences]
        width = max(len(x) for x in ids)
        input_ids = torch.tensor([x + [0] * (width - len(x)) for x in ids])
        return {"input_ids": input_ids, "attention_mask": (input_ids != self.pad_token_id).long()}


class Attention(nn.Module):
    def __init__(self, dim, heads=4, dropout=0.1):
        super().__init__()
        self.heads = heads
        self.to_q = nn.Linear(dim, dim)
        self.to_kv = nn.Linear(dim, 2 * dim)
        self.to_out = nn.Linear(dim, dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, context, context_mask):
        b, n, d = x.shape
        q = self.to_q(x).view(b, n, self.heads, -1).transpose(1, 2)
        k, v = self.to_kv(context).view(b, context.size(1), 2, self.heads, -1).permute(2, 0, 3, 1, 4)
        dots = q @ k.transpose(-1, -2) * q.size(-1) ** -0.5
        keep = context_mask.bool()
        dots = dots.masked_fill(keep[:, None, None, :], float("-inf"))  # expect: MC519 keep
        attn = self.dropout(dots.softmax(dim=-1))
        return self.to_out((attn @ v).transpose(1, 2).reshape(b, n, d))


class ChainEncoder(nn.Module):
    def __init__(self, vocab_size, dim, depth, max_len=40):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, dim, padding_idx=0)
        self.pos = nn.Parameter(torch.randn(1, max_len, dim) * 0.02)
        self.layers = nn.ModuleList(
            [nn.ModuleList([nn.LayerNorm(dim), Attention(dim), nn.LayerNorm(dim), nn.Linear(dim, dim)]) for _ in range(depth)]
        )

    def forward(self, input_ids, attention_mask):
        x = self.emb(input_ids) + self.pos[:, : input_ids.size(1)]
        for norm1, attn, norm2, ff in self.layers:
            h = norm1(x)
            x = x + attn(h, h, attention_mask)
            x = x + F.gelu(ff(norm2(x)))
        return x


class BindingModel(nn.Module):
    def __init__(self, vocab_size, dim=32, depth=2):
        super().__init__()
        self.tcr_encoder = ChainEncoder(vocab_size, dim, depth)
        self.epitope_encoder = ChainEncoder(vocab_size, dim, depth)
        self.cross = Attention(dim)
        self.norm = nn.LayerNorm(dim)
        self.classifier = nn.Sequential(nn.Linear(2 * dim, dim), nn.ReLU(), nn.Linear(dim, 1))

    def forward(self, tcr, epitope):
        t = self.tcr_encoder(**tcr)
        e = self.epitope_encoder(**epitope)
        t = t + self.cross(self.norm(t), e, epitope["attention_mask"])
        m = tcr["attention_mask"].unsqueeze(-1).float()
        t_pool = (t * m).sum(1) / m.sum(1)
        return self.classifier(torch.cat([t_pool, e[:, 0]], dim=-1)).squeeze(-1)


PAIRS = [
    ("CASSIRSSYEQYF", "GILGFVFTL"),
    ("CASSLAPGATNEKLFF", "NLVPMVATV"),
    ("CSARDRTGNGYTF", "GLCTLVAML"),
    ("CASSYVGNTGELFF", "KLGGALQAK"),
    ("CASRPGLAGGRPEQYF", "AVFDRKSDAK"),
    ("CAWSVGQGNTEAFF", "YLQPRTFLL"),
]


def sample_batch(pairs, rng):
    tcrs, epis, labels = [], [], []
    for cdr3, epitope in pairs:
        tcrs.append(cdr3)
        if rng.random() < 0.5:
            epis.append(epitope)
            labels.append(1.0)
        else:
            epis.append(rng.choice([e for _, e in pairs if e != epitope]))
            labels.append(0.0)
    return tcrs, epis, torch.tensor(labels)


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = random.Random(0)
    tokenizer = ResidueTokenizer()
    model = BindingModel(len(tokenizer.vocab))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(4):
        tcrs, epis, y = sample_batch(PAIRS, rng)
        logits = model(tokenizer(tcrs), tokenizer(epis))
        loss = F.binary_cross_entropy_with_logits(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("bce", round(loss.item(), 4))
