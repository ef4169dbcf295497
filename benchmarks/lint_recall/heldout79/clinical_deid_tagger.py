"""PHI de-identification of clinical notes (i2b2 2014 categories, BIO tags).

A word-level note tokenizer with a Hugging Face call signature, a Transformer
encoder on nn.MultiheadAttention (local windows in the lower layers, full
attention above), a token classification head, and BIO-constrained greedy
decoding for the surrogate-replacement step.

Source: conventions.md §1 (nn.MultiheadAttention and Hugging Face attention_mask rows, direction cheat-sheet), §5 item 1; seed self_attention_mask_guide.txt §2, §7 Q1.
"""
import re
from typing import Dict, List

import torch
import torch.nn as nn
import torch.nn.functional as F

PHI_TAGS = ["O", "B-NAME", "I-NAME", "B-DATE", "I-DATE", "B-HOSPITAL", "I-HOSPITAL",
            "B-ID", "I-ID", "B-LOCATION", "I-LOCATION", "B-AGE", "I-AGE"]
TAG2ID = {t: i for i, t in enumerate(PHI_TAGS)}


class NoteTokenizer:
    pad_token_id = 0
    unk_token_id = 1

    def __init__(self, vocab: List[str]):
        self.vocab = {w: i + 2 for i, w in enumerate(vocab)}

    def __len__(self):
        return len(self.vocab) + 2

    @staticmethod
    def split(text: str) -> List[str]:
        return re.findall(r"\w+|[^\w\s]", text.lower())

    def __call__(self, texts, padding=True, truncation=True, max_length=128, return_tensors="pt"):
        ids = []
        for text in texts:
            toks = [self.vocab.get(w, self.unk_token_id) for w in self.split(text)]
            ids.append(toks[:max_length] if truncation else toks)
        width = max(len(x) for x in ids)
        input_ids = torch.full((len(ids), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros(len(ids), width, dtype=torch.long)
        for i, toks in enumerate(ids):
            input_ids[i, :len(toks)] = torch.tensor(toks)
            attention_mask[i, :len(toks)] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}


def local_window_mask(n: int, radius: int, device=None) -> torch.Tensor:
    pos = torch.arange(n, device=device)
    far = (pos[None, :] - pos[:, None]).abs() > radius
    far[:, 0] = False
    return far


def bio_transitions() -> torch.Tensor:
    allowed = torch.ones(len(PHI_TAGS), len(PHI_TAGS), dtype=torch.bool)
    for j, tag in enumerate(PHI_TAGS):
        if tag.startswith("I-"):
            allowed[:, j] = False
            allowed[TAG2ID["B-" + tag[2:]], j] = True
            allowed[j, j] = True
    return allowed


class DeidBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, radius=None):
        super().__init__()
        self.radius = radius
        self.self_attn = nn.MultiheadAttention(d_model, n_heads, dropout=dropout, batch_first=True)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Dropout(dropout),
                                nn.Linear(d_ff, d_model))
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, attention_mask):
        window = None
        if self.radius is not None:
            window = local_window_mask(x.size(1), self.radius, x.device)
        h = self.norm1(x)
        h, _ = self.self_attn(h, h, h, attn_mask=window,
                              key_padding_mask=attention_mask.to(torch.bool),  # expect: MC502 padding
                              need_weights=False)
        x = x + self.drop(h)
        return x + self.drop(self.ff(self.norm2(x)))


class DeidTagger(nn.Module):
    def __init__(self, vocab_size, d_model=64, n_heads=4, n_layers=4, d_ff=128,
                 max_len=256, local_layers=2, radius=6, dropout=0.1):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab_size, d_model, padding_idx=0)
        self.pos_emb = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList([
            DeidBlock(d_model, n_heads, d_ff, dropout, radius if i < local_layers else None)
            for i in range(n_layers)
        ])
        self.norm = nn.LayerNorm(d_model)
        self.classifier = nn.Linear(d_model, len(PHI_TAGS))
        self.register_buffer("allowed", bio_transitions(), persistent=False)

    def forward(self, input_ids, attention_mask, labels=None):
        pos = torch.arange(input_ids.size(1), device=input_ids.device)
        x = self.tok_emb(input_ids) + self.pos_emb(pos)[None]
        for block in self.blocks:
            x = block(x, attention_mask)
        logits = self.classifier(self.norm(x))
        out = {"logits": logits}
        if labels is not None:
            labels = labels.masked_fill(attention_mask == 0, -100)
            out["loss"] = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        return out

    @torch.no_grad()
    def decode(self, input_ids, attention_mask) -> List[List[str]]:
        logits = self.forward(input_ids, attention_mask)["logits"]
        prev = torch.full((input_ids.size(0),), TAG2ID["O"], dtype=torch.long, device=logits.device)
        tags = []
        for t in range(logits.size(1)):
            step = logits[:, t].masked_fill(~self.allowed[prev], float("-inf"))
            prev = step.argmax(-1)
            tags.append(prev)
        tags = torch.stack(tags, 1)
        return [[PHI_TAGS[i] for i in row[m.bool()].tolist()]
                for row, m in zip(tags, attention_mask)]


def surrogate(text: str, tags: List[str], tokenizer: NoteTokenizer) -> str:
    words = tokenizer.split(text)
    out = []
    for word, tag in zip(words, tags):
        if tag == "O":
            out.append(word)
        elif tag.startswith("B-"):
            out.append("[" + tag[2:] + "]")
    return " ".join(out)


def synthetic_notes(n: int, generator: torch.Generator) -> Dict[str, List]:
    names = ["smith", "garcia", "nguyen", "okafor"]
    body = ["pt", "seen", "in", "clinic", "on", "for", "follow", "up", "of", "chf", "bp", "stable"]
    notes, tags = [], []
    for _ in range(n):
        k = int(torch.randint(6, 20, (1,), generator=generator))
        words, labs = [], []
        for _ in range(k):
            if torch.rand(1, generator=generator) < 0.15:
                words += ["mr", names[int(torch.randint(4, (1,), generator=generator))]]
                labs += ["O", "B-NAME"]
            else:
                words.append(body[int(torch.randint(len(body), (1,), generator=generator))])
                labs.append("O")
        notes.append(" ".join(words))
        tags.append(labs)
    return {"notes": notes, "tags": tags, "vocab": body + names + ["mr"]}


if __name__ == "__main__":
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    data = synthetic_notes(6, g)
    tokenizer = NoteTokenizer(data["vocab"])
    enc = tokenizer(data["notes"], padding=True, return_tensors="pt")
    labels = torch.zeros_like(enc["input_ids"])
    for i, labs in enumerate(data["tags"]):
        labels[i, :len(labs)] = torch.tensor([TAG2ID[t] for t in labs])
    model = DeidTagger(len(tokenizer))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(5):
        out = model(enc["input_ids"], enc["attention_mask"], labels=labels)
        opt.zero_grad()
        out["loss"].backward()
        opt.step()
    print("loss", round(out["loss"].item(), 4))
    model.eval()
    pred = model.decode(enc["input_ids"], enc["attention_mask"])
    print(surrogate(data["notes"][0], pred[0], tokenizer))
