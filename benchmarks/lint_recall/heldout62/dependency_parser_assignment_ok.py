"""Natural Language Processing with Deep Learning, Assignment 3: a graph-based dependency parser.

The assignment's transition-based parser is followed by this optional part: a
biaffine graph-based parser (Dozat & Manning, 2017) on top of a small Transformer
encoder. Sentences come from a toy grammar with Universal-Dependencies-style heads
and labels instead of the Penn Treebank, so the notebook runs on the course's
Colab CPU runtime. A ``<root>`` token is prepended to every sentence; the
tokenizer mimics the Hugging Face call convention. Graded metrics: UAS and LAS.

Source: conventions.md §1 (HF attention_mask row, nn.MultiheadAttention row), §2.4
"""
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

DETS = ["the", "a", "every"]
ADJS = ["big", "small", "old", "happy", "red"]
NOUNS = ["dog", "cat", "student", "teacher", "park", "book", "garden", "city"]
VERBS = ["saw", "chased", "read", "liked", "found"]
PREPS = ["in", "near", "with"]
DEPRELS = ["root", "nsubj", "obj", "det", "amod", "case", "obl", "nmod"]
REL_ID = {r: i for i, r in enumerate(DEPRELS)}


def make_sentence(rng):
    tokens = []

    def add(word, rel):
        tokens.append([word, None, rel])
        return len(tokens) - 1

    def noun_phrase(rel, allow_pp):
        det = add(rng.choice(DETS), "det")
        adj = add(rng.choice(ADJS), "amod") if rng.random() < 0.4 else None
        noun = add(rng.choice(NOUNS), rel)
        for modifier in (det, adj):
            if modifier is not None:
                tokens[modifier][1] = noun
        if allow_pp and rng.random() < 0.3:
            case = add(rng.choice(PREPS), "case")
            inner = noun_phrase("nmod", False)
            tokens[case][1] = inner
            tokens[inner][1] = noun
        return noun

    subj = noun_phrase("nsubj", True)
    verb = add(rng.choice(VERBS), "root")
    tokens[subj][1] = verb
    tokens[noun_phrase("obj", True)][1] = verb
    if rng.random() < 0.5:
        case = add(rng.choice(PREPS), "case")
        inner = noun_phrase("obl", False)
        tokens[case][1] = inner
        tokens[inner][1] = verb
    words = [w for w, _, _ in tokens]
    heads = [0 if h is None else h + 1 for _, h, _ in tokens]
    rels = [r for _, _, r in tokens]
    return words, heads, rels


class WordTokenizer:
    def __init__(self):
        self.vocab = {w: i for i, w in enumerate(["<pad>", "<unk>", "<root>"] + DETS + ADJS + NOUNS + VERBS + PREPS)}

    def __call__(self, batch_words, padding=True, return_tensors="pt"):
        rows = [[2] + [self.vocab.get(w, 1) for w in words] for words in batch_words]
        width = max(map(len, rows))
        input_ids = torch.zeros(len(rows), width, dtype=torch.long)
        attention_mask = torch.zeros(len(rows), width, dtype=torch.long)
        for i, row in enumerate(rows):
            input_ids[i, : len(row)] = torch.tensor(row)
            attention_mask[i, : len(row)] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}


def prepare_batch(tokenizer, sentences):
    enc = tokenizer([words for words, _, _ in sentences], padding=True, return_tensors="pt")
    pad_mask = enc["attention_mask"] == 0
    width = enc["input_ids"].size(1)
    heads = torch.full((len(sentences), width), -100, dtype=torch.long)
    rels = torch.full((len(sentences), width), -100, dtype=torch.long)
    for i, (_, h, r) in enumerate(sentences):
        heads[i, 1 : len(h) + 1] = torch.tensor(h)
        rels[i, 1 : len(r) + 1] = torch.tensor([REL_ID[x] for x in r])
    return enc["input_ids"], pad_mask, heads, rels


class BiaffineParser(nn.Module):
    def __init__(self, vocab_size, d_model=64, n_heads=4, n_layers=2, arc_dim=64, rel_dim=32, max_len=32):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, d_model, padding_idx=0)
        self.pos = nn.Embedding(max_len, d_model)
        layer = nn.TransformerEncoderLayer(d_model, n_heads, 4 * d_model, dropout=0.1, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.arc_dep, self.arc_head = nn.Linear(d_model, arc_dim), nn.Linear(d_model, arc_dim)
        self.rel_dep, self.rel_head = nn.Linear(d_model, rel_dim), nn.Linear(d_model, rel_dim)
        self.arc_W = nn.Parameter(torch.zeros(arc_dim, arc_dim))
        self.arc_b = nn.Linear(arc_dim, 1, bias=False)
        self.rel_W = nn.Parameter(torch.zeros(len(DEPRELS), rel_dim, rel_dim))
        self.rel_b = nn.Linear(2 * rel_dim, len(DEPRELS))

    def forward(self, input_ids, pad_mask):
        x = self.emb(input_ids) + self.pos(torch.arange(input_ids.size(1), device=input_ids.device))[None]
        h = self.encoder(x, src_key_padding_mask=pad_mask.bool())
        dep, head = F.elu(self.arc_dep(h)), F.elu(self.arc_head(h))
        arc = dep @ self.arc_W @ head.transpose(1, 2) + self.arc_b(head).transpose(1, 2)
        arc = arc.masked_fill(pad_mask.bool()[:, None, :], torch.finfo(arc.dtype).min)
        return arc, F.elu(self.rel_dep(h)), F.elu(self.rel_head(h))

    def rel_scores(self, rel_dep, rel_head, heads):
        idx = heads.clamp(min=0)[..., None].expand(-1, -1, rel_head.size(-1))
        chosen = rel_head.gather(1, idx)
        bilinear = torch.einsum("btd,rde,bte->btr", rel_dep, self.rel_W, chosen)
        return bilinear + self.rel_b(torch.cat([rel_dep, chosen], dim=-1))


def attachment_scores(model, tokenizer, data):
    model.eval()
    input_ids, pad_mask, heads, rels = prepare_batch(tokenizer, data)
    with torch.no_grad():
        arc, rel_dep, rel_head = model(input_ids, pad_mask)
        pred_heads = arc.argmax(-1)
        pred_rels = model.rel_scores(rel_dep, rel_head, pred_heads).argmax(-1)
    scored = heads != -100
    uas = (pred_heads == heads)[scored].float().mean().item()
    las = ((pred_heads == heads) & (pred_rels == rels))[scored].float().mean().item()
    return uas, las


def main():
    rng = random.Random(0)
    torch.manual_seed(0)
    train = [make_sentence(rng) for _ in range(1500)]
    test = [make_sentence(rng) for _ in range(200)]
    words, heads, rels = train[0]
    for i, (w, h, r) in enumerate(zip(words, heads, rels), start=1):
        print(f"{i:2d} {w:8s} head={h:2d} {r}")
    assert all(0 <= h <= len(ws) and h != i for ws, hs, _ in train for i, h in enumerate(hs, start=1))

    tokenizer = WordTokenizer()
    input_ids, pad_mask, gold_heads, gold_rels = prepare_batch(tokenizer, train[:2])
    print("input_ids", input_ids.tolist())

    model = BiaffineParser(len(tokenizer.vocab))
    opt = torch.optim.Adam(model.parameters(), lr=2e-3, betas=(0.9, 0.9))
    for epoch in range(5):
        model.train()
        rng.shuffle(train)
        for s in range(0, len(train), 50):
            input_ids, pad_mask, heads, rels = prepare_batch(tokenizer, train[s : s + 50])
            arc, rel_dep, rel_head = model(input_ids, pad_mask)
            arc_loss = F.cross_entropy(arc.reshape(-1, arc.size(-1)), heads.reshape(-1), ignore_index=-100)
            rel_logits = model.rel_scores(rel_dep, rel_head, heads)
            rel_loss = F.cross_entropy(rel_logits.reshape(-1, len(DEPRELS)), rels.reshape(-1), ignore_index=-100)
            opt.zero_grad()
            (arc_loss + rel_loss).backward()
            opt.step()
        uas, las = attachment_scores(model, tokenizer, test)
        print(f"epoch {epoch}: arc loss {arc_loss.item():.3f}  rel loss {rel_loss.item():.3f}  UAS {uas:.3f}  LAS {las:.3f}")


if __name__ == "__main__":
    main()
