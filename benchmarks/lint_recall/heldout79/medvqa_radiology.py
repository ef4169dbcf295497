"""Medical visual question answering on radiology images (VQA-RAD / SLAKE style).

Questions are tokenised with a Hugging Face-like tokenizer and encoded with a
small transformer; the image is cut into patches by a conv stem.  The
question is summarised by attention pooling, guides a stacked attention over
the image patches, and the answer is classified over the answer vocabulary.
Closed (yes/no) questions may only be answered yes or no.

Source: seed self_attention_mask_guide.txt §3 (常见误区: mask是加法而非乘法), §7 Q3; conventions.md §1 (direction cheat-sheet, additive masks).
"""
import re

import torch
import torch.nn as nn
import torch.nn.functional as F

ANSWERS = ["yes", "no", "left", "right", "ct", "mri", "x-ray", "lung", "liver", "brain", "kidney", "axial"]
CLOSED = torch.tensor([a in ("yes", "no") for a in ANSWERS])


class QuestionTokenizer:
    def __init__(self, corpus):
        words = sorted({w for q in corpus for w in re.findall(r"[a-z\-]+", q.lower())})
        self.vocab = {"[PAD]": 0, "[UNK]": 1, **{w: i + 2 for i, w in enumerate(words)}}

    def __call__(self, questions, padding="longest", max_length=20, return_tensors="pt"):
        ids = [[self.vocab.get(w, 1) for w in re.findall(r"[a-z\-]+", q.lower())][:max_length] for q in questions]
        width = max(map(len, ids))
        enc = {"input_ids": torch.zeros(len(ids), width, dtype=torch.long),
               "attention_mask": torch.zeros(len(ids), width, dtype=torch.long)}
        for i, row in enumerate(ids):
            enc["input_ids"][i, :len(row)] = torch.tensor(row)
            enc["attention_mask"][i, :len(row)] = 1
        return enc


class QuestionEncoder(nn.Module):
    def __init__(self, vocab_size, d, heads=4, layers=2, max_len=32):
        super().__init__()
        self.heads = heads
        self.emb = nn.Embedding(vocab_size, d, padding_idx=0)
        self.pos = nn.Embedding(max_len, d)
        self.layers = nn.ModuleList([nn.ModuleDict({
            "qkv": nn.Linear(d, 3 * d), "o": nn.Linear(d, d), "ln1": nn.LayerNorm(d), "ln2": nn.LayerNorm(d),
            "ff": nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))}) for _ in range(layers)])
        self.pool_proj = nn.Linear(d, 1)

    def forward(self, input_ids, attention_mask):
        b, n = input_ids.shape
        x = self.emb(input_ids) + self.pos(torch.arange(n, device=input_ids.device))[None]
        keep = attention_mask.bool()[:, None, None, :]
        for layer in self.layers:
            q, k, v = layer["qkv"](layer["ln1"](x)).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
            x = x + layer["o"](y.transpose(1, 2).reshape(b, n, -1))
            x = x + layer["ff"](layer["ln2"](x))
        scores = self.pool_proj(x).squeeze(-1)
        alpha = torch.softmax(scores * attention_mask, dim=-1)  # expect: MC520 multiply
        return (alpha.unsqueeze(-1) * x).sum(1), x


class StackedAttention(nn.Module):
    def __init__(self, d, d_att=32, hops=2):
        super().__init__()
        self.img = nn.ModuleList([nn.Linear(d, d_att) for _ in range(hops)])
        self.qst = nn.ModuleList([nn.Linear(d, d_att) for _ in range(hops)])
        self.att = nn.ModuleList([nn.Linear(d_att, 1) for _ in range(hops)])

    def forward(self, v, u):
        for img, qst, att in zip(self.img, self.qst, self.att):
            h = torch.tanh(img(v) + qst(u).unsqueeze(1))
            p = torch.softmax(att(h).squeeze(-1), dim=-1)
            u = u + (p.unsqueeze(-1) * v).sum(1)
        return u


class MedVQA(nn.Module):
    def __init__(self, vocab_size, d=64):
        super().__init__()
        self.patches = nn.Sequential(nn.Conv2d(1, d // 2, 4, stride=4), nn.GELU(), nn.Conv2d(d // 2, d, 2, stride=2))
        self.img_pos = nn.Parameter(torch.zeros(1, 16, d))
        self.question = QuestionEncoder(vocab_size, d)
        self.san = StackedAttention(d)
        self.classifier = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Dropout(0.2), nn.Linear(d, len(ANSWERS)))

    def forward(self, image, input_ids, attention_mask, closed):
        v = self.patches(image).flatten(2).transpose(1, 2) + self.img_pos
        u, _ = self.question(input_ids, attention_mask)
        logits = self.classifier(self.san(v, u))
        allowed = torch.where(closed[:, None], CLOSED[None, :], ~CLOSED[None, :])
        return logits.masked_fill(~allowed, float("-inf"))


def accuracy_by_type(logits, answers, closed):
    hit = logits.argmax(-1) == answers
    return {"closed": hit[closed].float().mean().item(), "open": hit[~closed].float().mean().item()}


if __name__ == "__main__":
    torch.manual_seed(0)
    questions = ["Is there a pleural effusion?", "Which organ is abnormal in this image?",
                 "Is the lesion on the left side of the brain?", "What imaging modality was used?",
                 "Are the kidneys normal?", "In which plane is this image taken?"]
    answers = torch.tensor([ANSWERS.index(a) for a in ["no", "liver", "yes", "ct", "yes", "axial"]])
    closed = CLOSED[answers]
    tok = QuestionTokenizer(questions)
    enc = tok(questions, padding="longest", return_tensors="pt")
    images = torch.randn(len(questions), 1, 32, 32)
    model = MedVQA(len(tok.vocab))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(6):
        logits = model(images, enc["input_ids"], enc["attention_mask"], closed)
        loss = F.cross_entropy(logits, answers)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        logits = model(images, enc["input_ids"], enc["attention_mask"], closed)
    print("loss", round(loss.item(), 4), accuracy_by_type(logits, answers, closed))
