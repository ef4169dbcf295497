"""Transcription-factor binding site classifier in the DNABERT fine-tuning layout.

ChIP-seq peak summits (positives) and shuffled flanks (negatives) are cut into
overlapping k-mers, tokenized with a k-mer vocabulary that has the BERT special
tokens, and classified from the [CLS] state concatenated with a mean over the
k-mer states. Predictions are averaged over the forward and reverse-complement
strands.

Source: conventions.md §1 (direction cheat-sheet; nn.Transformer and HF attention_mask rows), §5 item 1; seed self_attention_mask_guide.txt §2 and §7 Q1
"""
import itertools
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

KMER = 6
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
COMPLEMENT = str.maketrans("ACGTN", "TGCAN")


def seq2kmer(seq, k=KMER):
    return [seq[i:i + k] for i in range(len(seq) + 1 - k)]


def reverse_complement(seq):
    return seq.translate(COMPLEMENT)[::-1]


class DNATokenizer:
    def __init__(self, k=KMER):
        kmers = ["".join(p) for p in itertools.product("ACGT", repeat=k)]
        self.vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + kmers)}
        self.pad_token_id = self.vocab["[PAD]"]
        self.k = k

    def __len__(self):
        return len(self.vocab)

    def __call__(self, sequences, max_length=64, padding=True, return_tensors="pt"):
        ids = []
        for seq in sequences:
            toks = ["[CLS]"] + seq2kmer(seq.upper(), self.k)[: max_length - 2] + ["[SEP]"]
            ids.append([self.vocab.get(t, self.vocab["[UNK]"]) for t in toks])
        width = max(len(x) for x in ids)
        input_ids = torch.full((len(ids), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros(len(ids), width, dtype=torch.long)
        for i, row in enumerate(ids):
            input_ids[i, : len(row)] = torch.tensor(row)
            attention_mask[i, : len(row)] = 1
        token_type_ids = torch.zeros_like(input_ids)
        return {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask}


class DNABertEmbeddings(nn.Module):
    def __init__(self, vocab_size, hidden_size, max_position_embeddings=128, pad_token_id=0, dropout=0.1):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=pad_token_id)
        self.position_embeddings = nn.Embedding(max_position_embeddings, hidden_size)
        self.token_type_embeddings = nn.Embedding(2, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=1e-12)
        self.dropout = nn.Dropout(dropout)

    def forward(self, input_ids, token_type_ids):
        position_ids = torch.arange(input_ids.size(1), device=input_ids.device)[None, :]
        emb = self.word_embeddings(input_ids) + self.position_embeddings(position_ids)
        emb = emb + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(emb))


class DNABertForSequenceClassification(nn.Module):
    def __init__(self, vocab_size, hidden_size=64, num_layers=2, num_heads=4, num_labels=2, dropout=0.1):
        super().__init__()
        self.embeddings = DNABertEmbeddings(vocab_size, hidden_size, dropout=dropout)
        layer = nn.TransformerEncoderLayer(
            hidden_size, num_heads, dim_feedforward=4 * hidden_size, dropout=dropout,
            activation="gelu", batch_first=True,
        )
        self.encoder = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)
        self.pooler = nn.Sequential(nn.Linear(hidden_size, hidden_size), nn.Tanh())
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(2 * hidden_size, num_labels)

    def forward(self, input_ids, attention_mask, token_type_ids=None, labels=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        hidden = self.embeddings(input_ids, token_type_ids)
        hidden = self.encoder(hidden, src_key_padding_mask=attention_mask.to(torch.bool))  # expect: MC502 tokenizer
        pooled = self.pooler(hidden[:, 0])
        weights = attention_mask.unsqueeze(-1).type_as(hidden)
        mean = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)
        logits = self.classifier(self.dropout(torch.cat([pooled, mean], dim=-1)))
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return {"loss": loss, "logits": logits}


def make_dataset(n, motif="TGACTCA", rng=None):
    rng = rng or random.Random(0)
    data = []
    for i in range(n):
        length = rng.randint(24, 40)
        seq = "".join(rng.choice("ACGT") for _ in range(length))
        label = i % 2
        if label:
            pos = rng.randint(0, length - len(motif))
            seq = seq[:pos] + motif + seq[pos + len(motif):]
        data.append((seq, label))
    return data


@torch.no_grad()
def predict_both_strands(model, tokenizer, sequences):
    model.eval()
    fwd = model(**tokenizer(sequences))["logits"].softmax(-1)
    rev = model(**tokenizer([reverse_complement(s) for s in sequences]))["logits"].softmax(-1)
    return (fwd + rev) / 2


if __name__ == "__main__":
    torch.manual_seed(0)
    tokenizer = DNATokenizer()
    model = DNABertForSequenceClassification(len(tokenizer))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    data = make_dataset(32)
    for epoch in range(2):
        random.Random(epoch).shuffle(data)
        for start in range(0, len(data), 8):
            seqs, labels = zip(*data[start:start + 8])
            batch = tokenizer(list(seqs))
            out = model(**batch, labels=torch.tensor(labels))
            optimizer.zero_grad()
            out["loss"].backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        print(f"epoch {epoch} loss {out['loss'].item():.4f}")
    probs = predict_both_strands(model, tokenizer, [s for s, _ in data[:4]])
    print("P(bound):", probs[:, 1].tolist())
