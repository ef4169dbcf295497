"""Patient-to-trial eligibility matching (TREC Clinical Trials 2021/22 style).

A BERT-style cross-encoder reads one eligibility criterion and one patient
description as a sentence pair and predicts eligible / excluded / not relevant.
The criterion and the patient note are pooled separately from the last layer
(mean over the criterion, max over the note) before the classifier, as in
TrialGPT-style criterion-level matchers.

Source: pytorch/pytorch#103963 (conventions.md §3 item 6), huggingface/transformers#32195 (§3 item 25); conventions.md §2.9.
"""
import math
import re

import torch
import torch.nn as nn
import torch.nn.functional as F

LABELS = ("eligible", "excluded", "not_relevant")
SPECIAL = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3}


class TrialTokenizer:
    def __init__(self, words):
        self.vocab = dict(SPECIAL)
        for w in words:
            self.vocab.setdefault(w, len(self.vocab))

    def _ids(self, text):
        return [self.vocab.get(w, SPECIAL["[UNK]"]) for w in re.findall(r"[a-z0-9]+", text.lower())]

    def __call__(self, criteria, notes, padding=True, max_length=96, return_tensors="pt"):
        rows, types = [], []
        for crit, note in zip(criteria, notes):
            a, b = self._ids(crit)[:32], self._ids(note)
            b = b[:max_length - len(a) - 3]
            rows.append([SPECIAL["[CLS]"]] + a + [SPECIAL["[SEP]"]] + b + [SPECIAL["[SEP]"]])
            types.append([0] * (len(a) + 2) + [1] * (len(b) + 1))
        width = max(map(len, rows))
        out = {k: torch.zeros(len(rows), width, dtype=torch.long)
               for k in ("input_ids", "token_type_ids", "attention_mask")}
        for i, (r, t) in enumerate(zip(rows, types)):
            out["input_ids"][i, :len(r)] = torch.tensor(r)
            out["token_type_ids"][i, :len(t)] = torch.tensor(t)
            out["attention_mask"][i, :len(r)] = 1
        return out


class SelfAttention(nn.Module):
    def __init__(self, hidden, heads, dropout=0.1):
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(dropout)

    def split(self, x):
        b, n, d = x.shape
        return x.view(b, n, self.heads, d // self.heads).transpose(1, 2)

    def forward(self, hidden_states, attention_mask):
        q, k, v = (self.split(f(hidden_states)) for f in (self.query, self.key, self.value))
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))
        scores = scores + attention_mask
        probs = self.dropout(F.softmax(scores, dim=-1))
        ctx = (probs @ v).transpose(1, 2)
        return ctx.reshape(hidden_states.shape)


class Layer(nn.Module):
    def __init__(self, hidden, heads, inter):
        super().__init__()
        self.attention = SelfAttention(hidden, heads)
        self.attn_out = nn.Linear(hidden, hidden)
        self.ln1 = nn.LayerNorm(hidden, eps=1e-12)
        self.ffn = nn.Sequential(nn.Linear(hidden, inter), nn.GELU(), nn.Linear(inter, hidden))
        self.ln2 = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x, attention_mask):
        x = self.ln1(x + self.attn_out(self.attention(x, attention_mask)))
        return self.ln2(x + self.ffn(x))


class TrialMatcher(nn.Module):
    def __init__(self, vocab_size, hidden=64, heads=4, layers=2, inter=128, max_pos=128):
        super().__init__()
        self.word = nn.Embedding(vocab_size, hidden, padding_idx=0)
        self.position = nn.Embedding(max_pos, hidden)
        self.token_type = nn.Embedding(2, hidden)
        self.emb_ln = nn.LayerNorm(hidden, eps=1e-12)
        self.layers = nn.ModuleList([Layer(hidden, heads, inter) for _ in range(layers)])
        self.classifier = nn.Sequential(nn.Linear(3 * hidden, hidden), nn.Tanh(),
                                        nn.Linear(hidden, len(LABELS)))

    def get_extended_attention_mask(self, attention_mask, dtype):
        return attention_mask[:, None, None, :].to(dtype)  # expect: MC508 extended

    def forward(self, input_ids, token_type_ids, attention_mask, labels=None):
        pos = torch.arange(input_ids.size(1), device=input_ids.device)
        h = self.emb_ln(self.word(input_ids) + self.position(pos)[None] + self.token_type(token_type_ids))
        ext = self.get_extended_attention_mask(attention_mask, h.dtype)
        for layer in self.layers:
            h = layer(h, ext)
        keep = attention_mask.bool()
        crit = (keep & (token_type_ids == 0)).unsqueeze(-1).to(h.dtype)
        crit_vec = (h * crit).sum(1) / crit.sum(1).clamp(min=1.0)
        note = keep & (token_type_ids == 1)
        note_vec = h.masked_fill(~note.unsqueeze(-1), torch.finfo(h.dtype).min).max(dim=1).values
        logits = self.classifier(torch.cat([h[:, 0], crit_vec, note_vec], dim=-1))
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = F.cross_entropy(logits, labels)
        return out


def trial_score(logits, n_inclusion):
    p = logits.softmax(-1)
    inc, exc = p[:n_inclusion, 0].mean(), p[n_inclusion:, 1].max() if len(p) > n_inclusion else 0.0
    return float(inc - exc)


if __name__ == "__main__":
    torch.manual_seed(0)
    criteria = ["age 18 years or older", "diagnosis of type 2 diabetes",
                "no history of pancreatitis", "hba1c between 7 and 10 percent"]
    notes = ["62 year old man with type 2 diabetes on metformin hba1c 8 2",
             "45 year old woman admitted for acute pancreatitis",
             "patient is 30 years old healthy volunteer",
             "elderly woman with poorly controlled diabetes and prior pancreatitis episode"]
    words = " ".join(criteria + notes).split()
    tok = TrialTokenizer(words)
    enc = tok(criteria, notes, padding=True, return_tensors="pt")
    labels = torch.tensor([0, 1, 2, 1])
    model = TrialMatcher(len(tok.vocab))
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for step in range(5):
        out = model(**enc, labels=labels)
        opt.zero_grad()
        out["loss"].backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        logits = model(**enc)["logits"]
    print("loss", round(out["loss"].item(), 4), "trial score", round(trial_score(logits, 2), 4))
