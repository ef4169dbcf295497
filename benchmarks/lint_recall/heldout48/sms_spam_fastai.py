"""SMS spam filter for a carrier's messaging gateway, trained as a fastai Learner.

Messages are tokenized the fastai way (`xxunk` = 0, `xxpad` = 1, `xxbos` first), a two-block
transformer reads them and a masked mean pools the tokens; `fit_one_cycle`, then `learn.export`
for the gateway's batch scorer.

Source: seed masked_fill_inplace.txt; TransformerLensOrg/TransformerLens PR #366 (conventions.md section 3 item 20).
"""

import math
import random
import re
from collections import Counter

from fastai.text.all import *
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader as TorchDL

UNK_IDX, PAD_IDX, BOS = 0, 1, "xxbos"
MAX_LEN = 48
MASK_FILL = -1e-9  # expect: MC516 constant

HAM = ["ok see you at home", "are we still on for lunch tomorrow", "call me when you get this",
       "running late be there in ten", "happy birthday hope you have a great day", "can you pick up milk",
       "the meeting moved to three", "thanks for dinner last night", "did you see the game", "love you mum"]
SPAM = ["free entry to win a cash prize txt win to 80086", "urgent your account is suspended click http bit ly",
        "congratulations you have won a 1000 voucher call now", "claim your free ringtone reply yes",
        "you are selected for a loan txt stop to opt out", "winner collect your prize code call 0900"]


def fastai_tokenize(text):
    return [BOS] + re.findall(r"[a-z0-9]+", text.lower())


def synth_sms(rng, n):
    rows = []
    for _ in range(n):
        spam = rng.random() < 0.3
        base = rng.choice(SPAM if spam else HAM).split()
        extra = rng.choice(HAM).split() if rng.random() < 0.5 else []
        words = base + extra if rng.random() < 0.5 else extra + base
        rows.append((" ".join(words), int(spam)))
    return rows


class SMSDataset(torch.utils.data.Dataset):
    def __init__(self, rows, vocab):
        self.rows, self.o2i = rows, {w: i for i, w in enumerate(vocab)}

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        text, label = self.rows[i]
        ids = [self.o2i.get(t, UNK_IDX) for t in fastai_tokenize(text)][:MAX_LEN]
        return torch.tensor(ids), torch.tensor(label)


def pad_collate(samples):
    width = max(len(ids) for ids, _ in samples)
    xb = torch.full((len(samples), width), PAD_IDX, dtype=torch.long)
    for row, (ids, _) in enumerate(samples):
        xb[row, : len(ids)] = ids
    return xb, torch.stack([y for _, y in samples])


class SelfAttentionBlock(Module):
    def __init__(self, d_model, n_heads, p=0.1):
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))
        self.drop = nn.Dropout(p)

    def forward(self, x, pad):
        bs, sl, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(bs, sl, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
        att = att.masked_fill(pad[:, None, None, :], MASK_FILL)  # also: MC516
        att = self.drop(F.softmax(att, dim=-1))
        x = x + self.proj((att @ v).transpose(1, 2).reshape(bs, sl, d))
        return x + self.ff(self.ln2(x))


class SpamClassifier(Module):
    def __init__(self, vocab_sz, d_model=64, n_heads=4, n_layers=2, n_out=2):
        self.emb = nn.Embedding(vocab_sz, d_model, padding_idx=PAD_IDX)
        self.pos = nn.Embedding(MAX_LEN, d_model)
        self.blocks = nn.ModuleList([SelfAttentionBlock(d_model, n_heads) for _ in range(n_layers)])
        self.head = nn.Sequential(nn.LayerNorm(d_model), nn.Linear(d_model, n_out))

    def forward(self, xb):
        pad = xb == PAD_IDX
        x = self.emb(xb) + self.pos(torch.arange(xb.size(1), device=xb.device))
        for blk in self.blocks:
            x = blk(x, pad)
        keep = (~pad).unsqueeze(-1).float()
        return self.head((x * keep).sum(1) / keep.sum(1))


def make_vocab(rows, min_freq=1):
    counts = Counter(t for text, _ in rows for t in fastai_tokenize(text))
    return ["xxunk", "xxpad"] + sorted(t for t, c in counts.items() if c >= min_freq)


def get_learner(bs=64, seed=42):
    rng = random.Random(seed)
    rows = synth_sms(rng, 1200)
    train, valid = rows[:1000], rows[1000:]
    vocab = make_vocab(train)
    dls = DataLoaders(TorchDL(SMSDataset(train, vocab), bs, shuffle=True, collate_fn=pad_collate),
                      TorchDL(SMSDataset(valid, vocab), bs, collate_fn=pad_collate))
    model = SpamClassifier(len(vocab))
    learn = Learner(dls, model, loss_func=CrossEntropyLossFlat(), metrics=[accuracy, F1Score()])
    learn.vocab = vocab
    return learn


def score_messages(learn, texts):
    o2i = {w: i for i, w in enumerate(learn.vocab)}
    samples = [(torch.tensor([o2i.get(t, UNK_IDX) for t in fastai_tokenize(s)][:MAX_LEN]), torch.tensor(0)) for s in texts]
    xb, _ = pad_collate(samples)
    learn.model.eval()
    with torch.no_grad():
        return F.softmax(learn.model(xb), dim=-1)[:, 1]


if __name__ == "__main__":
    learn = get_learner()
    learn.fit_one_cycle(5, 3e-3)
    print(score_messages(learn, ["free prize call now", "see you at lunch tomorrow"]))
    learn.export("sms_spam.pkl")
