"""Cross-lingual dense retrieval with mContriever (Izacard et al., 2022) on a MKQA-like setup.

facebookresearch/contriever's `Contriever` encoder with average pooling, a shared multilingual
tokenizer that returns `input_ids` / `attention_mask`, an XLM-R-like encoder on
nn.TransformerEncoder, the InfoNCE loss with in-batch negatives and temperature 0.05,
queries in one language against passages in another, recall@k over the passage collection.

Source: conventions.md section 1 (HF transformers 2-D attention_mask row) and section 5 item 7
"""

import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

LANGS = ["en", "de", "sw"]


@dataclass
class EncoderConfig:
    vocab_size: int
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    intermediate_size: int = 128
    max_position_embeddings: int = 64
    pad_token_id: int = 1


class MultilingualTokenizer:
    def __init__(self, n_concepts=150, n_fillers=20, n_entities=400):
        self.specials = {"<s>": 0, "<pad>": 1, "</s>": 2}
        self.vocab = dict(self.specials)
        for e in range(n_entities):
            self.vocab[f"ent_{e}"] = len(self.vocab)
        for lang in LANGS:
            for c in range(n_concepts):
                self.vocab[f"{lang}_{c}"] = len(self.vocab)
            for f in range(n_fillers):
                self.vocab[f"{lang}_f{f}"] = len(self.vocab)
        self.pad_token_id = self.specials["<pad>"]

    def __call__(self, texts, padding=True, return_tensors="pt"):
        ids = [[0] + [self.vocab[w] for w in t.split()] + [2] for t in texts]
        width = max(len(x) for x in ids)
        return {"input_ids": torch.tensor([x + [self.pad_token_id] * (width - len(x)) for x in ids]),
                "attention_mask": torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in ids])}


class XLMREncoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.layer_norm = nn.LayerNorm(config.hidden_size)
        layer = nn.TransformerEncoderLayer(config.hidden_size, config.num_heads, config.intermediate_size,
                                           dropout=0.1, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, config.num_layers, enable_nested_tensor=False)

    def forward(self, input_ids, attention_mask):
        positions = torch.arange(input_ids.size(1), device=input_ids.device)[None, :]
        hidden = self.layer_norm(self.word_embeddings(input_ids) + self.position_embeddings(positions))
        return self.encoder(hidden, src_key_padding_mask=attention_mask == 0)


class Contriever(nn.Module):
    def __init__(self, config, pooling="average"):
        super().__init__()
        self.encoder = XLMREncoder(config)
        self.pooling = pooling

    def forward(self, input_ids, attention_mask, normalize=False):
        last_hidden = self.encoder(input_ids, attention_mask)
        if self.pooling == "average":
            pad = ~attention_mask[..., None]  # expect: MC518 contriever
            last_hidden = last_hidden.masked_fill(pad.bool(), 0.0)
            emb = last_hidden.sum(dim=1) / attention_mask.sum(dim=1)[..., None]
        else:
            emb = last_hidden[:, 0]
        if normalize:
            emb = F.normalize(emb, dim=-1)
        return emb


class InBatch(nn.Module):
    def __init__(self, retriever, temperature=0.05, label_smoothing=0.0):
        super().__init__()
        self.encoder = retriever
        self.temperature, self.label_smoothing = temperature, label_smoothing

    def forward(self, q_tokens, q_mask, k_tokens, k_mask):
        qemb = self.encoder(input_ids=q_tokens, attention_mask=q_mask, normalize=True)
        kemb = self.encoder(input_ids=k_tokens, attention_mask=k_mask, normalize=True)
        scores = torch.einsum("id,jd->ij", qemb / self.temperature, kemb)
        labels = torch.arange(len(qemb), device=scores.device)
        loss = F.cross_entropy(scores, labels, label_smoothing=self.label_smoothing)
        accuracy = (scores.argmax(-1) == labels).float().mean()
        return loss, accuracy


def make_pairs(n, rng, n_concepts=150, n_fillers=20, n_entities=400):
    pairs = []
    for _ in range(n):
        concepts = rng.sample(range(n_concepts), rng.randint(4, 8))
        entity = f"ent_{rng.randrange(n_entities)}"
        q_lang, p_lang = rng.sample(LANGS, 2)
        query = [f"{q_lang}_{c}" for c in rng.sample(concepts, 2)] + [entity]
        passage = [f"{p_lang}_{c}" for c in concepts] + [f"{p_lang}_f{rng.randrange(n_fillers)}" for _ in range(rng.randint(0, 10))]
        passage.append(entity)
        rng.shuffle(passage)
        pairs.append((" ".join(query), " ".join(passage)))
    return pairs


def main():
    torch.manual_seed(0)
    rng = random.Random(0)
    tokenizer = MultilingualTokenizer()
    model = InBatch(Contriever(EncoderConfig(vocab_size=len(tokenizer.vocab), pad_token_id=tokenizer.pad_token_id)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    for step in range(400):
        model.train()
        pairs = make_pairs(64, rng)
        q, p = tokenizer([x[0] for x in pairs]), tokenizer([x[1] for x in pairs])
        loss, acc = model(q["input_ids"], q["attention_mask"], p["input_ids"], p["attention_mask"])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.3f} in-batch accuracy {acc.item():.3f}")
    model.eval()
    test = make_pairs(300, random.Random(1))
    with torch.no_grad():
        q, p = tokenizer([x[0] for x in test]), tokenizer([x[1] for x in test])
        qemb = model.encoder(**q, normalize=True)
        pemb = model.encoder(**p, normalize=True)
        ranks = (qemb @ pemb.T).argsort(dim=-1, descending=True)
        gold = torch.arange(len(test))[:, None]
        for k in (1, 5, 20):
            print(f"recall@{k} over {len(test)} passages: {(ranks[:, :k] == gold).any(-1).float().mean():.3f}")


if __name__ == "__main__":
    main()
