"""Med-BERT on structured EHR codes: pretraining heads and heart-failure-onset fine-tuning.

Patients are sequences of visits, each a set of ICD-10 diagnosis codes.
Codes are serialised visit by visit; every code gets a token, a visit
(segment) and a serialisation-order embedding.  Pretraining uses masked code
prediction plus prolonged length of stay from [CLS]; the fine-tuned model
predicts incident heart failure among patients with diabetes (DHF) from an
attention-pooled code representation.

Source: conventions.md §1 (Hugging Face attention_mask row, direction cheat-sheet), §5 item 1; seed masked_fill_inplace.txt (作用); seed self_attention_mask_guide.txt §7 Q1.
"""
from typing import Dict, List

import torch
import torch.nn as nn
import torch.nn.functional as F

SPECIAL_TOKENS = ["[PAD]", "[CLS]", "[MASK]", "[UNK]"]


class CodeTokenizer:
    def __init__(self, codes: List[str]):
        self.itos = SPECIAL_TOKENS + sorted(set(codes))
        self.stoi = {c: i for i, c in enumerate(self.itos)}
        self.pad_token_id, self.cls_token_id, self.mask_token_id = 0, 1, 2

    def __call__(self, patients: List[List[List[str]]], max_length=64, return_tensors="pt") -> Dict[str, torch.Tensor]:
        rows = []
        for visits in patients:
            ids, vis, order = [self.cls_token_id], [0], [0]
            for v, codes in enumerate(visits, start=1):
                for j, c in enumerate(codes):
                    ids.append(self.stoi.get(c, 3))
                    vis.append(v)
                    order.append(j + 1)
            rows.append((ids[:max_length], vis[:max_length], order[:max_length]))
        width = max(len(r[0]) for r in rows)
        out = {k: torch.zeros(len(rows), width, dtype=torch.long)
               for k in ("input_ids", "visit_ids", "order_ids", "attention_mask")}
        for i, (ids, vis, order) in enumerate(rows):
            out["input_ids"][i, :len(ids)] = torch.tensor(ids)
            out["visit_ids"][i, :len(ids)] = torch.tensor(vis)
            out["order_ids"][i, :len(ids)] = torch.tensor(order)
            out["attention_mask"][i, :len(ids)] = 1
        return out


class MedBertEncoder(nn.Module):
    def __init__(self, vocab_size, d=64, heads=4, layers=2, max_visits=32, max_order=32):
        super().__init__()
        self.heads = heads
        self.code = nn.Embedding(vocab_size, d, padding_idx=0)
        self.visit = nn.Embedding(max_visits, d)
        self.order = nn.Embedding(max_order, d)
        self.ln = nn.LayerNorm(d)
        self.qkv = nn.ModuleList([nn.Linear(d, 3 * d) for _ in range(layers)])
        self.out = nn.ModuleList([nn.Linear(d, d) for _ in range(layers)])
        self.ffn = nn.ModuleList([nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
                                  for _ in range(layers)])
        self.norms = nn.ModuleList([nn.LayerNorm(d) for _ in range(2 * layers)])

    def forward(self, input_ids, visit_ids, order_ids, keep):
        x = self.ln(self.code(input_ids) + self.visit(visit_ids) + self.order(order_ids))
        b, n, d = x.shape
        attn_mask = keep[:, None, None, :]
        for i, (qkv, out, ffn) in enumerate(zip(self.qkv, self.out, self.ffn)):
            q, k, v = qkv(x).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
            x = self.norms[2 * i](x + out(y.transpose(1, 2).reshape(b, n, d)))
            x = self.norms[2 * i + 1](x + ffn(x))
        return x


class MedBertPretraining(nn.Module):
    def __init__(self, vocab_size, d=64):
        super().__init__()
        self.encoder = MedBertEncoder(vocab_size, d)
        self.mlm = nn.Linear(d, vocab_size)
        self.plos = nn.Linear(d, 1)

    def forward(self, input_ids, visit_ids, order_ids, attention_mask, mlm_prob=0.15, plos=None):
        keep = attention_mask.bool()
        maskable = keep & (input_ids >= len(SPECIAL_TOKENS))
        chosen = maskable & (torch.rand(input_ids.shape) < mlm_prob)
        labels = input_ids.masked_fill(~chosen, -100)
        masked_ids = input_ids.masked_fill(chosen, 2)
        h = self.encoder(masked_ids, visit_ids, order_ids, keep)
        loss = F.cross_entropy(self.mlm(h).flatten(0, 1), labels.flatten(), ignore_index=-100)
        if plos is not None:
            loss = loss + F.binary_cross_entropy_with_logits(self.plos(h[:, 0]).squeeze(-1), plos)
        return loss


class HFOnsetClassifier(nn.Module):
    def __init__(self, encoder: MedBertEncoder, d=64):
        super().__init__()
        self.encoder = encoder
        self.pool = nn.Sequential(nn.Linear(d, d), nn.Tanh(), nn.Linear(d, 1))
        self.head = nn.Linear(2 * d, 1)

    def forward(self, input_ids, visit_ids, order_ids, attention_mask):
        keep = attention_mask.bool()
        h = self.encoder(input_ids, visit_ids, order_ids, keep)
        logits = self.pool(h).squeeze(-1)
        logits = logits.masked_fill(keep, torch.finfo(logits.dtype).min)  # expect: MC519 keep
        alpha = logits.softmax(dim=-1)
        pooled = (alpha.unsqueeze(-1) * h).sum(1)
        return self.head(torch.cat([h[:, 0], pooled], dim=-1)).squeeze(-1), alpha


def random_patients(n, codes, generator):
    out = []
    for _ in range(n):
        visits = []
        for _ in range(int(torch.randint(1, 5, (1,), generator=generator))):
            k = int(torch.randint(1, 6, (1,), generator=generator))
            visits.append([codes[int(i)] for i in torch.randint(len(codes), (k,), generator=generator)])
        out.append(visits)
    return out


if __name__ == "__main__":
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    codes = ["E11.9", "E11.65", "I10", "I25.10", "N18.3", "E78.5", "I48.91", "Z79.4", "R06.02", "I50.9"]
    tok = CodeTokenizer(codes)
    enc = tok(random_patients(6, codes, g), return_tensors="pt")
    pre = MedBertPretraining(len(tok.itos))
    opt = torch.optim.Adam(pre.parameters(), lr=1e-3)
    plos = torch.tensor([0.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    for step in range(3):
        loss = pre(**enc, plos=plos)
        opt.zero_grad()
        loss.backward()
        opt.step()
    clf = HFOnsetClassifier(pre.encoder)
    opt = torch.optim.Adam(clf.parameters(), lr=5e-4)
    y = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 1.0])
    for step in range(3):
        logit, alpha = clf(**enc)
        ft_loss = F.binary_cross_entropy_with_logits(logit, y)
        opt.zero_grad()
        ft_loss.backward()
        opt.step()
    print("pretrain", round(loss.item(), 4), "finetune", round(ft_loss.item(), 4))
    print("top code of patient 0:", tok.itos[enc["input_ids"][0, alpha[0].argmax()].item()])
