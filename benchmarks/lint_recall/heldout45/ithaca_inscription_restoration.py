"""Ithaca-style restoration, geographical and chronological attribution of Greek inscriptions.

Layout after deepmind/ithaca (Assael, Sommerschield et al., "Restoring and attributing ancient
texts using deep neural networks", Nature 603, 280-283, 2022), ported to PyTorch: a
`GreekAlphabet` with `missing` and `pad` symbols and a word list, character and word inputs
(damaged words become unknown), a stack of `TransformerBlock`s with `MultiHeadDotProductAttention`,
and three heads: the characters at the missing positions, the subregion and the date bin;
synthetic dedications from four regions and five centuries, the early ones writing E for eta
and O for omega as before the 403 BC reform, the late ones with itacistic spellings.

Source: rasbt/LLMs-from-scratch#1061 (conventions.md §3 item 14), conventions.md §1 (SDPA row, direction cheat-sheet) and §5 item 1
"""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

REGIONS = {
    "attica": (["αθηναιος", "αθηναια", "δημος"], ["καλλιας", "περικλης", "νικιας", "θρασυλλος"]),
    "ionia": (["μιλησιος", "εφεσιος", "βουλη"], ["θαλης", "αρισταγορης", "ερμιας", "ζηνων"]),
    "crete": (["κνωσιος", "γορτυνιος", "κοσμοι"], ["σωσος", "αρχιας", "ευνομος", "τιμαρχος"]),
    "macedonia": (["πελλαιος", "βασιλευς", "κοινον"], ["αμυντας", "φιλιππος", "περδικκας", "κασσανδρος"]),
}
DATES = ["vi", "v", "iv", "iii", "ii"]
VERBS = ["ανεθηκεν", "εποιησεν", "εδωκεν"]
GODS = ["αθηναι", "απολλωνι", "διι", "αρτεμιδι"]


class GreekAlphabet:
    def __init__(self):
        self.alphabet = list("αβγδεζηθικλμνξοπρστυφχψως")
        self.space, self.missing, self.pad, self.sos, self.unk = " ", "-", "#", "<", "?"
        self.idx2char = [self.pad, self.sos, self.unk, self.space, self.missing] + self.alphabet
        self.char2idx = {c: i for i, c in enumerate(self.idx2char)}
        words = set(VERBS + GODS + [w for r in REGIONS.values() for ws in r for w in ws])
        words |= {w.replace("ω", "ο") for w in words} | {w.replace("ω", "ο").replace("η", "ε") for w in words}
        self.wordlist = [self.pad, self.unk] + sorted(words)
        self.word2idx = {w: i for i, w in enumerate(self.wordlist)}

    def text_to_idx(self, text):
        return [self.char2idx[self.sos]] + [self.char2idx.get(c, 2) for c in text]

    def text_to_word_idx(self, text):
        ids = [self.word2idx[self.unk]]
        for word in text.split(" "):
            wid = self.word2idx.get(word, self.word2idx[self.unk])
            ids += [wid] * len(word) + [self.word2idx[self.pad]]
        return ids[:-1]

    def __call__(self, texts):
        chars = [self.text_to_idx(t) for t in texts]
        words = [self.text_to_word_idx(t) for t in texts]
        L = max(len(c) for c in chars)
        return {"text_char": torch.tensor([c + [0] * (L - len(c)) for c in chars]),
                "text_word": torch.tensor([w + [0] * (L - len(w)) for w in words]),
                "attention_mask": torch.tensor([[1] * len(c) + [0] * (L - len(c)) for c in chars])}


class MultiHeadDotProductAttention(nn.Module):
    def __init__(self, emb_dim, num_heads, attention_dropout_rate=0.1):
        super().__init__()
        self.num_heads, self.dropout = num_heads, attention_dropout_rate
        self.qkv = nn.Linear(emb_dim, 3 * emb_dim)
        self.out = nn.Linear(emb_dim, emb_dim)

    def forward(self, x, mask=None):
        B, L, D = x.shape
        q, k, v = self.qkv(x).view(B, L, 3, self.num_heads, D // self.num_heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0)
        return self.out(y.transpose(1, 2).reshape(B, L, D))


class TransformerBlock(nn.Module):
    def __init__(self, emb_dim, num_heads, mlp_dim, dropout_rate=0.1):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(emb_dim), nn.LayerNorm(emb_dim)
        self.attention = MultiHeadDotProductAttention(emb_dim, num_heads)
        self.mlp = nn.Sequential(nn.Linear(emb_dim, mlp_dim), nn.GELU(), nn.Linear(mlp_dim, emb_dim))
        self.dropout = nn.Dropout(dropout_rate)

    def forward(self, x, attn_mask=None):
        x = x + self.dropout(self.attention(self.ln1(x), mask=attn_mask))
        return x + self.dropout(self.mlp(self.ln2(x)))


class Model(nn.Module):
    def __init__(self, char_vocab_size, word_vocab_size, output_subregions, output_date, emb_dim=64, num_layers=2,
                 num_heads=4, mlp_dim=128, max_len=96):
        super().__init__()
        self.char_embeddings = nn.Embedding(char_vocab_size, emb_dim)
        self.word_embeddings = nn.Embedding(word_vocab_size, emb_dim)
        self.pos_embeddings = nn.Embedding(max_len, emb_dim)
        self.blocks = nn.ModuleList([TransformerBlock(emb_dim, num_heads, mlp_dim) for _ in range(num_layers)])
        self.ln = nn.LayerNorm(emb_dim)
        self.head_chars = nn.Linear(emb_dim, char_vocab_size)
        self.head_subregion = nn.Linear(emb_dim, output_subregions)
        self.head_date = nn.Linear(emb_dim, output_date)

    def forward(self, text_char, text_word, attention_mask):
        pad = attention_mask == 0
        positions = torch.arange(text_char.size(1)).unsqueeze(0)
        x = self.char_embeddings(text_char) + self.word_embeddings(text_word) + self.pos_embeddings(positions)
        for block in self.blocks:
            x = block(x, attn_mask=pad[:, None, None, :])  # expect: MC511 tokenizer
        x = self.ln(x)
        pooled = x.masked_fill(pad[..., None], 0.0).sum(1) / (~pad).sum(1, keepdim=True)
        return self.head_chars(x), self.head_subregion(pooled), self.head_date(pooled)


def random_inscription(rng):
    region = int(rng.integers(len(REGIONS)))
    date = int(rng.integers(len(DATES)))
    ethnics, names = list(REGIONS.values())[region]
    words = [str(rng.choice(names)), str(rng.choice(ethnics)), str(rng.choice(VERBS)), str(rng.choice(GODS))]
    if rng.random() < 0.5:
        words = words[:2] + [str(rng.choice(names[::-1])), str(rng.choice(ethnics))] + words[2:]
    text = " ".join(words)
    if date <= 1:
        text = text.replace("ω", "ο")
    if date == 0:
        text = text.replace("η", "ε")
    if date >= 3:
        text = text.replace("ει", "ι")
    if date == 4:
        text = text.replace("αι", "ε")
    return text, region, date


def damage(alphabet, text, rng, spans=3):
    lost = np.zeros(len(text), dtype=bool)
    for _ in range(spans):
        n = int(rng.integers(1, 5))
        start = int(rng.integers(0, len(text) - n))
        lost[start:start + n] = True
    damaged = "".join(alphabet.missing if m else c for c, m in zip(text, lost))
    return damaged, [alphabet.char2idx[c] if m else -100 for c, m in zip(text, lost)]


def make_batch(alphabet, rng, n):
    texts, labels, regions, dates = [], [], [], []
    for _ in range(n):
        text, region, date = random_inscription(rng)
        damaged, target = damage(alphabet, text, rng)
        texts.append(damaged), labels.append([-100] + target), regions.append(region), dates.append(date)
    batch = alphabet(texts)
    L = batch["text_char"].size(1)
    batch_labels = torch.tensor([t + [-100] * (L - len(t)) for t in labels])
    return batch, batch_labels, torch.tensor(regions), torch.tensor(dates)


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    alphabet = GreekAlphabet()
    model = Model(len(alphabet.idx2char), len(alphabet.wordlist), len(REGIONS), len(DATES))
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for step in range(400):
        model.train()
        batch, labels, regions, dates = make_batch(alphabet, rng, 32)
        logits_chars, logits_subregion, logits_date = model(**batch)
        loss = F.cross_entropy(logits_chars.flatten(0, 1), labels.flatten(), ignore_index=-100) \
            + F.cross_entropy(logits_subregion, regions) + F.cross_entropy(logits_date, dates)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 99:
            print(f"step {step + 1}: loss {loss.item():.3f}")
    model.eval()
    batch, labels, regions, dates = make_batch(alphabet, np.random.default_rng(1), 300)
    with torch.no_grad():
        logits_chars, logits_subregion, logits_date = model(**batch)
    lost = labels != -100
    top1 = (logits_chars.argmax(-1) == labels)[lost].float().mean().item()
    top5 = (logits_chars.topk(5, dim=-1).indices == labels.unsqueeze(-1)).any(-1)[lost].float().mean().item()
    region_acc = (logits_subregion.argmax(-1) == regions).float().mean().item()
    date_acc = (logits_date.argmax(-1) == dates).float().mean().item()
    print(f"restoration top-1 {top1:.3f}, top-5 {top5:.3f}, subregion accuracy {region_acc:.3f}, date accuracy {date_acc:.3f}")
    n = int(batch["attention_mask"][0].sum())
    with torch.no_grad():
        alone = model(**{k: v[:1, :n] for k, v in batch.items()})[0]
    print(f"first inscription alone vs padded: {(alone - logits_chars[:1, :n]).abs().max().item():.1e}")
