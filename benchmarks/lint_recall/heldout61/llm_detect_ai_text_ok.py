"""LLM - Detect AI Generated Text: small causal LM trained on student essays, per-token loss features and a logistic head.

Source: huggingface/transformers PR #27114 and PR #26421 (conventions.md §3 item 15); NVIDIA-NeMo/Automodel PR #2658 (§3 item 16); §2.3, §5 item 4.
"""
import os
import gc
import csv
import math
import time
import random

import numpy as np

SEED = 42
TRAIN_ESSAYS = "/kaggle/input/llm-detect-ai-generated-text/train_essays.csv"
EXTRA_AI = "/kaggle/input/daigt-v2-train-dataset/train_v2_drcat_02.csv"
MAX_LEN = 96
VOCAB_SIZE = 4000
N_EMBD = 96
N_HEAD = 4
N_LAYER = 2
LM_BATCH = 16
LM_EPOCHS = 2
LM_LR = 6e-4
CLF_EPOCHS = 200
N_SYNTH = 300

random.seed(SEED)
np.random.seed(SEED)

HUMAN_WORDS = ("i think that cars are bad because my mom says so and we dont really need them alot "
               "plus its fun to walk to school with friends even when its raining outside").split()
AI_WORDS = ("furthermore it is important to consider the multifaceted implications of limiting car usage "
            "additionally this approach fosters sustainable communities and enhances overall wellbeing").split()


def synth_essays(n):
    rows = []
    for i in range(n):
        ai = i % 2
        words = AI_WORDS if ai else HUMAN_WORDS
        text = " ".join(random.choice(words) if random.random() < 0.85 else random.choice(HUMAN_WORDS + AI_WORDS)
                        for _ in range(random.randint(20, 90)))
        rows.append({"id": f"e{i:05d}", "text": text, "generated": str(ai)})
    return rows


def read_csv(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


if os.path.exists(TRAIN_ESSAYS):
    essays = read_csv(TRAIN_ESSAYS)
    if os.path.exists(EXTRA_AI):
        essays += [{"id": f"x{i}", "text": r["text"], "generated": r["label"]} for i, r in enumerate(read_csv(EXTRA_AI))]
else:
    essays = synth_essays(N_SYNTH)
labels = np.array([int(r["generated"]) for r in essays])
print(f"essays {len(essays)}, generated share {labels.mean():.3f}")

word_counts = {}
for r in essays:
    for w in r["text"].lower().split():
        word_counts[w] = word_counts.get(w, 0) + 1
itos = ["<pad>", "<bos>", "<unk>"] + [w for w, _ in sorted(word_counts.items(), key=lambda x: -x[1])][: VOCAB_SIZE - 3]
stoi = {w: i for i, w in enumerate(itos)}

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(SEED)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def encode_batch(texts, max_len=MAX_LEN):
    seqs = [[1] + [stoi.get(w, 2) for w in t.lower().split()][: max_len - 1] for t in texts]
    T = max(len(s) for s in seqs)
    input_ids = torch.zeros(len(seqs), T, dtype=torch.long)
    attention_mask = torch.zeros(len(seqs), T, dtype=torch.long)
    for i, s in enumerate(seqs):
        input_ids[i, T - len(s):] = torch.tensor(s)
        attention_mask[i, T - len(s):] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def _make_causal_mask(T, dtype, device):
    mask = torch.full((T, T), torch.finfo(dtype).min, device=device)
    mask_cond = torch.arange(T, device=device)
    mask.masked_fill_(mask_cond < (mask_cond + 1).view(T, 1), 0)
    return mask.to(dtype)[None, None, :, :]


def _expand_mask(mask, dtype):
    inverted_mask = 1.0 - mask[:, None, None, :].to(dtype)
    return inverted_mask.masked_fill(inverted_mask.to(torch.bool), torch.finfo(dtype).min)


def prepare_decoder_attention_mask(attention_mask, dtype):
    causal_4d = _make_causal_mask(attention_mask.shape[-1], dtype, attention_mask.device)
    expanded = _expand_mask(attention_mask, dtype)
    return causal_4d.masked_fill(expanded.bool(), torch.finfo(dtype).min)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(N_EMBD, 3 * N_EMBD)
        self.c_proj = nn.Linear(N_EMBD, N_EMBD)

    def forward(self, x, attn_bias):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(N_EMBD, dim=2)
        q, k, v = (t.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        att = att + attn_bias
        att = F.softmax(att, dim=-1, dtype=torch.float32).to(q.dtype)
        return self.c_proj((att @ v).transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(N_EMBD)
        self.attn = Attention()
        self.ln_2 = nn.LayerNorm(N_EMBD)
        self.mlp = nn.Sequential(nn.Linear(N_EMBD, 4 * N_EMBD), nn.GELU(), nn.Linear(4 * N_EMBD, N_EMBD))

    def forward(self, x, attn_bias):
        x = x + self.attn(self.ln_1(x), attn_bias)
        return x + self.mlp(self.ln_2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab_size):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, N_EMBD)
        self.wpe = nn.Embedding(MAX_LEN, N_EMBD)
        self.h = nn.ModuleList([Block() for _ in range(N_LAYER)])
        self.ln_f = nn.LayerNorm(N_EMBD)
        self.lm_head = nn.Linear(N_EMBD, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, input_ids, attention_mask):
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        x = self.wte(input_ids) + self.wpe(position_ids)
        attn_bias = prepare_decoder_attention_mask(attention_mask, x.dtype)
        for block in self.h:
            x = block(x, attn_bias)
        return self.lm_head(self.ln_f(x))


def token_nll(model, batch):
    logits = model(batch["input_ids"], batch["attention_mask"])
    nll = F.cross_entropy(logits[:, :-1].transpose(1, 2), batch["input_ids"][:, 1:], reduction="none")
    valid = batch["attention_mask"][:, 1:].bool()
    return nll, valid


def features_for(model, texts):
    model.eval()
    feats = []
    with torch.no_grad():
        for i in range(0, len(texts), LM_BATCH * 2):
            batch = {k: v.to(device) for k, v in encode_batch(texts[i: i + LM_BATCH * 2]).items()}
            nll, valid = token_nll(model, batch)
            for row, ok in zip(nll, valid):
                x = row[ok]
                feats.append([x.mean().item(), x.std().item() if len(x) > 1 else 0.0, x.max().item(),
                              (x < 1.0).float().mean().item(), math.log(len(x) + 1)])
    return np.array(feats, dtype=np.float32)


def roc_auc(y, p):
    order = np.argsort(p)
    ranks = np.empty(len(p))
    ranks[order] = np.arange(1, len(p) + 1)
    pos = y == 1
    return float((ranks[pos].sum() - pos.sum() * (pos.sum() + 1) / 2) / (pos.sum() * (~pos).sum()))


idx = np.random.permutation(len(essays))
n_val = len(essays) // 4
val_idx, trn_idx = idx[:n_val], idx[n_val:]
human_texts = [essays[i]["text"] for i in trn_idx if labels[i] == 0]

if __name__ == "__main__":
    lm = TinyGPT(len(itos)).to(device)
    opt = torch.optim.AdamW(lm.parameters(), lr=LM_LR, weight_decay=0.1)
    for epoch in range(LM_EPOCHS):
        t0 = time.time()
        lm.train()
        random.shuffle(human_texts)
        for i in range(0, len(human_texts), LM_BATCH):
            batch = {k: v.to(device) for k, v in encode_batch(human_texts[i: i + LM_BATCH]).items()}
            nll, valid = token_nll(lm, batch)
            loss = nll[valid].mean()
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(lm.parameters(), 1.0)
            opt.step()
        print(f"LM epoch {epoch} loss {loss.item():.4f} ppl {math.exp(loss.item()):.1f} ({time.time() - t0:.1f}s)")
    X_trn = features_for(lm, [essays[i]["text"] for i in trn_idx])
    X_val = features_for(lm, [essays[i]["text"] for i in val_idx])
    mu, sd = X_trn.mean(0), X_trn.std(0) + 1e-6
    clf = nn.Linear(X_trn.shape[1], 1)
    copt = torch.optim.LBFGS(clf.parameters(), lr=0.5, max_iter=CLF_EPOCHS)
    xt, yt = torch.tensor((X_trn - mu) / sd), torch.tensor(labels[trn_idx], dtype=torch.float32)

    def closure():
        copt.zero_grad()
        l = F.binary_cross_entropy_with_logits(clf(xt).squeeze(-1), yt) + 1e-3 * clf.weight.pow(2).sum()
        l.backward()
        return l

    copt.step(closure)
    with torch.no_grad():
        p_val = torch.sigmoid(clf(torch.tensor((X_val - mu) / sd))).squeeze(-1).numpy()
    print(f"validation ROC AUC: {roc_auc(labels[val_idx], p_val):.4f}")
    gc.collect()
