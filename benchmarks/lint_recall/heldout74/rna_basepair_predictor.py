"""RNA secondary structure prediction from sequence (SPOT-RNA / UFold-style output).

A transformer encoder reads the nucleotides, the pair representation is built
by outer concatenation and refined by a small 2-D residual CNN, and every (i, j)
gets a base-pairing logit. Only canonical and wobble pairs with a hairpin loop
of at least three nucleotides are allowed. Like most RNA folding repositories
the trainer folds one sequence per step; ``fold_batch`` pads several.

Source: conventions.md §2.6, §5 item 6; seed self_attention_mask_guide.txt §2 and §5
"""
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

NUCLEOTIDES = "ACGU"
PAD_ID = 0
MIN_LOOP = 3
PAIR_TABLE = torch.zeros(6, 6, dtype=torch.bool)
for a, b in ["AU", "UA", "GC", "CG", "GU", "UG"]:
    PAIR_TABLE[NUCLEOTIDES.index(a) + 1, NUCLEOTIDES.index(b) + 1] = True


def tokenize(seqs):
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), PAD_ID)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor([NUCLEOTIDES.find(c) + 1 if c in NUCLEOTIDES else 5 for c in s.upper()])
    return ids


def allowed_pairs(ids):
    keep = ids != PAD_ID
    pos = torch.arange(ids.shape[1], device=ids.device)
    far_enough = (pos[None, :] - pos[:, None]).abs() > MIN_LOOP
    return PAIR_TABLE[ids[:, :, None], ids[:, None, :]] & far_enough & keep[:, :, None] & keep[:, None, :]


class EncoderLayer(nn.Module):
    def __init__(self, d_model, nhead, dropout=0.1):
        super().__init__()
        self.nhead = nhead
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.GELU(), nn.Dropout(dropout),
                                nn.Linear(2 * d_model, d_model))

    def forward(self, x, keep):
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.nhead, -1).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)  # expect: MC515 padding
        x = x + self.proj(out.transpose(1, 2).reshape(b, n, d))
        return x + self.ff(self.norm2(x))


class ResBlock2d(nn.Module):
    def __init__(self, c, dilation=1):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=dilation, dilation=dilation)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1)
        self.norm1, self.norm2 = nn.InstanceNorm2d(c, affine=True), nn.InstanceNorm2d(c, affine=True)

    def forward(self, x):
        return x + self.conv2(F.elu(self.norm2(self.conv1(F.elu(self.norm1(x))))))


class BasePairPredictor(nn.Module):
    def __init__(self, d_model=32, nhead=4, num_layers=2, c_pair=16, max_len=256):
        super().__init__()
        self.embed = nn.Embedding(6, d_model, padding_idx=PAD_ID)
        self.pos = nn.Embedding(max_len, d_model)
        self.layers = nn.ModuleList([EncoderLayer(d_model, nhead) for _ in range(num_layers)])
        self.to_pair = nn.Conv2d(3 * d_model, c_pair, 1)
        self.resnet = nn.Sequential(ResBlock2d(c_pair, 1), ResBlock2d(c_pair, 2), ResBlock2d(c_pair, 4))
        self.out = nn.Conv2d(c_pair, 1, 1)

    def forward(self, ids):
        keep = ids != PAD_ID
        x = self.embed(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))[None]
        for layer in self.layers:
            x = layer(x, keep)
        n = x.shape[1]
        hi, hj = x[:, :, None].expand(-1, -1, n, -1), x[:, None, :].expand(-1, n, -1, -1)
        pair = torch.cat([hi, hj, hi * hj], dim=-1).permute(0, 3, 1, 2)
        pair = pair * (keep[:, None, :, None] & keep[:, None, None, :])
        logits = self.out(self.resnet(self.to_pair(pair))).squeeze(1)
        return (logits + logits.transpose(-1, -2)) / 2


def pairing_loss(logits, contacts, ids, pos_weight=5.0):
    allowed = allowed_pairs(ids)
    upper = torch.ones_like(allowed[0]).triu(1)
    weight = (allowed & upper).float()
    bce = F.binary_cross_entropy_with_logits(logits, contacts, reduction="none",
                                             pos_weight=torch.tensor(pos_weight))
    return (bce * weight).sum() / weight.sum().clamp(min=1.0)


def to_dot_bracket(probs, allowed, length, threshold=0.5):
    probs = (probs * allowed)[:length, :length].triu(1)
    structure, used = ["."] * length, set()
    for flat in probs.flatten().argsort(descending=True).tolist():
        i, j = divmod(flat, length)
        if probs[i, j] < threshold:
            break
        if i not in used and j not in used:
            structure[i], structure[j] = "(", ")"
            used.update((i, j))
    return "".join(structure)


@torch.no_grad()
def fold_batch(model, seqs):
    ids = tokenize(seqs)
    probs = torch.sigmoid(model(ids))
    allowed = allowed_pairs(ids)
    return [to_dot_bracket(p, a, len(s)) for p, a, s in zip(probs, allowed, seqs)]


def hairpin(rng, stem, loop):
    left = "".join(rng.choice("ACGU") for _ in range(stem))
    comp = {"A": "U", "U": "A", "G": "C", "C": "G"}
    seq = left + "".join(rng.choice("ACGU") for _ in range(loop)) + "".join(comp[c] for c in reversed(left))
    contacts = torch.zeros(len(seq), len(seq))
    for i in range(stem):
        j = len(seq) - 1 - i
        contacts[i, j] = contacts[j, i] = 1.0
    return seq, contacts


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = random.Random(0)
    data = [hairpin(rng, rng.randint(4, 7), rng.randint(3, 6)) for _ in range(4)]
    model = BasePairPredictor()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    for epoch in range(3):
        total = 0.0
        for seq, contacts in data:
            ids = tokenize([seq])
            loss = pairing_loss(model(ids), contacts[None], ids)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
        print(f"epoch {epoch} loss {total / len(data):.4f}")
    model.eval()
    print(data[0][0], fold_batch(model, [data[0][0]])[0])
