"""Medication recommendation from longitudinal EHR visits (G-BERT style, MIMIC-III).

Each visit is a set of diagnosis codes and a set of procedure codes; a shared
BERT-style code-set encoder turns each set (prefixed by [CLS]) into a visit
vector.  For visit t the recommender combines the current visit with the mean
of the patient's earlier visits and scores every ATC-3 medication; DDI pairs
from a co-prescription table are reported for the predicted sets.

Source: hyunwoongko/transformer PR #40, bentrevett/pytorch-seq2seq#96 (conventions.md §3 item 21).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD_IDX, CLS_IDX = 0, 1
N_DIAG, N_PROC, N_MED = 120, 60, 40


class ScaleDotProductAttention(nn.Module):
    def forward(self, q, k, v, mask=None):
        d_tensor = k.size(-1)
        score = (q @ k.transpose(2, 3)) / math.sqrt(d_tensor)
        if mask is not None:
            score = score.masked_fill(mask == 0, -10000)
        score = torch.softmax(score, dim=-1)
        return score @ v, score


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.n_head = n_head
        self.attention = ScaleDotProductAttention()
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_concat = nn.Linear(d_model, d_model)

    def split(self, tensor):
        batch_size, length, d_model = tensor.size()
        return tensor.view(batch_size, length, self.n_head, d_model // self.n_head).transpose(1, 2)

    def concat(self, tensor):
        batch_size, head, length, d_tensor = tensor.size()
        return tensor.transpose(1, 2).contiguous().view(batch_size, length, head * d_tensor)

    def forward(self, q, k, v, mask=None):
        q, k, v = self.split(self.w_q(q)), self.split(self.w_k(k)), self.split(self.w_v(v))
        out, _ = self.attention(q, k, v, mask=mask)
        return self.w_concat(self.concat(out))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, ffn_hidden, n_head, drop_prob):
        super().__init__()
        self.attention = MultiHeadAttention(d_model, n_head)
        self.norm1 = nn.LayerNorm(d_model)
        self.ffn = nn.Sequential(nn.Linear(d_model, ffn_hidden), nn.ReLU(), nn.Dropout(drop_prob),
                                 nn.Linear(ffn_hidden, d_model))
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(drop_prob)

    def forward(self, x, src_mask):
        x = self.norm1(x + self.dropout(self.attention(x, x, x, mask=src_mask)))
        return self.norm2(x + self.dropout(self.ffn(x)))


class CodeSetEncoder(nn.Module):
    def __init__(self, n_codes, d_model=64, ffn_hidden=128, n_head=4, n_layers=2, drop_prob=0.1):
        super().__init__()
        self.emb = nn.Embedding(n_codes + 2, d_model, padding_idx=PAD_IDX)
        self.layers = nn.ModuleList([EncoderLayer(d_model, ffn_hidden, n_head, drop_prob)
                                     for _ in range(n_layers)])

    def make_src_mask(self, codes):
        return (codes != PAD_IDX)[:, None, None, :]

    def forward(self, codes):
        mask = self.make_src_mask(codes)
        x = self.emb(codes)
        for layer in self.layers:
            x = layer(x, mask)
        return x[:, 0]


class GBertRecommender(nn.Module):
    def __init__(self, d_model=64):
        super().__init__()
        self.diag_enc = CodeSetEncoder(N_DIAG, d_model)
        self.proc_enc = CodeSetEncoder(N_PROC, d_model)
        self.head = nn.Sequential(nn.Linear(4 * d_model, 2 * d_model), nn.ReLU(), nn.Linear(2 * d_model, N_MED))

    def forward(self, diag, proc, visit_keep):
        b, v, _ = diag.shape
        hd = self.diag_enc(diag.flatten(0, 1)).view(b, v, -1)
        hp = self.proc_enc(proc.flatten(0, 1)).view(b, v, -1)
        visit = torch.cat([hd, hp], dim=-1)
        earlier = torch.ones(v, v, dtype=torch.bool, device=diag.device).tril(-1)
        earlier = earlier[None] & visit_keep[:, None, :]
        w = earlier.to(visit.dtype)
        history = (w @ visit) / w.sum(-1, keepdim=True).clamp(min=1.0)
        return self.head(torch.cat([visit, history], dim=-1))

    def loss(self, logits, meds, visit_keep):
        keep = visit_keep.flatten()
        logits, meds = logits.flatten(0, 1)[keep], meds.flatten(0, 1)[keep]
        bce = F.binary_cross_entropy_with_logits(logits, meds)
        targets = torch.full(meds.shape, -1, dtype=torch.long)
        for i, row in enumerate(meds):
            idx = row.nonzero().flatten()
            targets[i, :len(idx)] = idx
        return 0.9 * bce + 0.1 * F.multilabel_margin_loss(torch.sigmoid(logits), targets)


def ddi_rate(pred, ddi_adj):
    pairs = (pred.float().unsqueeze(-1) * pred.float().unsqueeze(-2) * ddi_adj).sum()
    total = (pred.float().sum(-1) * (pred.float().sum(-1) - 1)).sum()
    return (pairs / total.clamp(min=1.0)).item()


def pad_patients(patients, max_codes):
    b, v = len(patients), max(len(p) for p in patients)
    diag = torch.full((b, v, max_codes + 1), PAD_IDX, dtype=torch.long)
    proc = torch.full((b, v, max_codes + 1), PAD_IDX, dtype=torch.long)
    meds = torch.zeros(b, v, N_MED)
    visit_keep = torch.zeros(b, v, dtype=torch.bool)
    diag[:, :, 0], proc[:, :, 0] = CLS_IDX, CLS_IDX
    for i, visits in enumerate(patients):
        for j, (d, p, m) in enumerate(visits):
            diag[i, j, 1:1 + len(d)] = torch.tensor(d) + 2
            proc[i, j, 1:1 + len(p)] = torch.tensor(p) + 2
            meds[i, j, m] = 1.0
            visit_keep[i, j] = True
    return diag, proc, meds, visit_keep


def random_patients(n, generator):
    def rand_set(k, high):
        return torch.randperm(high, generator=generator)[:k].tolist()
    out = []
    for _ in range(n):
        n_visits = int(torch.randint(1, 4, (1,), generator=generator))
        out.append([(rand_set(int(torch.randint(2, 9, (1,), generator=generator)), N_DIAG),
                     rand_set(int(torch.randint(1, 5, (1,), generator=generator)), N_PROC),
                     rand_set(int(torch.randint(2, 7, (1,), generator=generator)), N_MED))
                    for _ in range(n_visits)])
    return out


if __name__ == "__main__":
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    diag, proc, meds, visit_keep = pad_patients(random_patients(4, g), max_codes=8)
    model = GBertRecommender()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(5):
        logits = model(diag, proc, visit_keep)
        loss = model.loss(logits, meds, visit_keep)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        pred = torch.sigmoid(model(diag, proc, visit_keep)) > 0.5
    ddi_adj = (torch.rand(N_MED, N_MED, generator=g) < 0.05).float()
    ddi_adj = ((ddi_adj + ddi_adj.T) > 0).float()
    print("loss", round(loss.item(), 4), "ddi", round(ddi_rate(pred[visit_keep], ddi_adj), 4))
