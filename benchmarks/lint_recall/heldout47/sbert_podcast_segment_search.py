"""Podcast search: retrieving two-minute transcript segments for a topical query.

Imitates UKPLab/sentence-transformers as used for the TREC 2020 Podcasts Track segment
retrieval task: a `SentenceTransformer` built as an `nn.Sequential` of modules (a `Transformer`
module with `tokenize` and `forward(features)` adding `token_embeddings`, then `Pooling` with
`pooling_mode_mean_tokens`), `InputExample` pairs, `smart_batching_collate`,
`MultipleNegativesRankingLoss` with `cos_sim` and `scale=20`, `fit(train_objectives=...)`,
`encode(..., convert_to_tensor=True, normalize_embeddings=True)` and an
`InformationRetrievalEvaluator` reporting MRR@10 and Recall@10. The transformer module wraps a
small word-level encoder on `nn.TransformerEncoder` standing in for MiniLM, fed by a tokenizer
with the Hugging Face call signature.
Synthetic data: episodes on twelve topics, segments of 12-40 words of topic terms mixed with
conversational filler, and two- to four-word queries.

Source: seed self_attention_mask_guide.txt §2 and §7 Q1;
conventions.md §1 (direction cheat-sheet, HF attention_mask row) and §5 item 1.
"""

import random
from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn

TOPICS = {
    "black holes": ["event", "horizon", "telescope", "galaxy", "gravity", "image"],
    "tardigrades": ["water", "bears", "survive", "vacuum", "moss", "microscope"],
    "sourdough": ["starter", "flour", "yeast", "bake", "crust", "ferment"],
    "marathon": ["training", "miles", "pace", "shoes", "race", "hydration"],
    "stock market": ["shares", "index", "crash", "investors", "dividend", "bonds"],
    "true crime": ["detective", "evidence", "suspect", "trial", "witness", "alibi"],
    "beekeeping": ["hive", "queen", "honey", "swarm", "pollen", "smoker"],
    "climate": ["carbon", "warming", "emissions", "ice", "policy", "sea"],
    "video games": ["console", "level", "boss", "controller", "speedrun", "indie"],
    "startups": ["founder", "funding", "pitch", "seed", "product", "growth"],
    "jazz": ["saxophone", "improvise", "swing", "chord", "trumpet", "club"],
    "volcanoes": ["lava", "eruption", "magma", "ash", "crater", "island"],
}
FILLER = ["um", "like", "you", "know", "so", "yeah", "right", "i", "mean", "and", "the", "it",
          "was", "really", "kind", "of", "we", "talked", "about"]


class InputExample:
    def __init__(self, guid="", texts=None, label=0):
        self.guid = guid
        self.texts = texts
        self.label = label


class WordTokenizer:
    def __init__(self, vocab_words):
        self.vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2}
        for w in sorted(vocab_words):
            self.vocab.setdefault(w, len(self.vocab))

    def __call__(self, texts, padding=True, truncation="longest_first", return_tensors="pt",
                 max_length=64):
        ids = [[2] + [self.vocab.get(w, 1) for w in t.lower().split()][: max_length - 1] for t in texts]
        n = max(len(x) for x in ids)
        return {"input_ids": torch.tensor([x + [0] * (n - len(x)) for x in ids]),
                "attention_mask": torch.tensor([[1] * len(x) + [0] * (n - len(x)) for x in ids])}


class MiniEncoder(nn.Module):
    def __init__(self, vocab_size, hidden_size=48, num_layers=2, num_heads=4, max_len=64):
        super().__init__()
        self.embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=0)
        self.position_embeddings = nn.Embedding(max_len, hidden_size)
        layer = nn.TransformerEncoderLayer(hidden_size, num_heads, 2 * hidden_size, dropout=0.1,
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)
        self.config = {"hidden_size": hidden_size}

    def forward(self, input_ids, src_key_padding_mask=None):
        positions = torch.arange(input_ids.shape[1])[None]
        x = self.embeddings(input_ids) + self.position_embeddings(positions)
        return self.encoder(x, src_key_padding_mask=src_key_padding_mask)


class Transformer(nn.Module):
    def __init__(self, tokenizer, max_seq_length=64):
        super().__init__()
        self.tokenizer = tokenizer
        self.max_seq_length = max_seq_length
        self.auto_model = MiniEncoder(len(tokenizer.vocab), max_len=max_seq_length)

    def get_word_embedding_dimension(self):
        return self.auto_model.config["hidden_size"]

    def tokenize(self, texts):
        return self.tokenizer(texts, padding=True, truncation="longest_first", return_tensors="pt",
                              max_length=self.max_seq_length)

    def forward(self, features):
        key_mask = features["attention_mask"].bool()  # expect: MC511 features
        output_tokens = self.auto_model(features["input_ids"], src_key_padding_mask=key_mask)  # also: MC511
        features.update({"token_embeddings": output_tokens, "attention_mask": features["attention_mask"]})
        return features


class Pooling(nn.Module):
    def __init__(self, word_embedding_dimension, pooling_mode_mean_tokens=True):
        super().__init__()
        self.word_embedding_dimension = word_embedding_dimension
        self.pooling_mode_mean_tokens = pooling_mode_mean_tokens

    def forward(self, features):
        token_embeddings = features["token_embeddings"]
        input_mask_expanded = features["attention_mask"].unsqueeze(-1).expand(token_embeddings.size()).float()
        sum_embeddings = torch.sum(token_embeddings * input_mask_expanded, 1)
        sum_mask = torch.clamp(input_mask_expanded.sum(1), min=1e-9)
        features.update({"sentence_embedding": sum_embeddings / sum_mask})
        return features


def cos_sim(a, b):
    return F.normalize(a, p=2, dim=1) @ F.normalize(b, p=2, dim=1).T


class SentenceTransformer(nn.Sequential):
    def __init__(self, modules):
        super().__init__(OrderedDict([(str(i), m) for i, m in enumerate(modules)]))

    def tokenize(self, texts):
        return self[0].tokenize(texts)

    def smart_batching_collate(self, batch):
        texts = [[example.texts[i] for example in batch] for i in range(len(batch[0].texts))]
        labels = torch.tensor([example.label for example in batch])
        return [self.tokenize(t) for t in texts], labels

    @torch.no_grad()
    def encode(self, sentences, batch_size=32, convert_to_tensor=True, normalize_embeddings=False):
        self.eval()
        all_embeddings = []
        for start in range(0, len(sentences), batch_size):
            features = self.tokenize(sentences[start:start + batch_size])
            embeddings = self.forward(features)["sentence_embedding"]
            if normalize_embeddings:
                embeddings = F.normalize(embeddings, p=2, dim=1)
            all_embeddings.append(embeddings)
        return torch.cat(all_embeddings) if convert_to_tensor else [e for e in all_embeddings]

    def fit(self, train_objectives, epochs=1, optimizer_params=None):
        dataloader, loss_model = train_objectives[0]
        dataloader.collate_fn = self.smart_batching_collate
        optimizer = torch.optim.AdamW(loss_model.parameters(), **(optimizer_params or {"lr": 2e-5}))
        for epoch in range(epochs):
            self.train()
            total = 0.0
            for features, labels in dataloader:
                loss_value = loss_model(features, labels)
                optimizer.zero_grad()
                loss_value.backward()
                optimizer.step()
                total += loss_value.item()
            print(f"epoch {epoch} loss {total / len(dataloader):.4f}")


class MultipleNegativesRankingLoss(nn.Module):
    def __init__(self, model, scale=20.0, similarity_fct=cos_sim):
        super().__init__()
        self.model = model
        self.scale = scale
        self.similarity_fct = similarity_fct
        self.cross_entropy_loss = nn.CrossEntropyLoss()

    def forward(self, sentence_features, labels):
        reps = [self.model(sentence_feature)["sentence_embedding"] for sentence_feature in sentence_features]
        embeddings_a = reps[0]
        embeddings_b = torch.cat(reps[1:])
        scores = self.similarity_fct(embeddings_a, embeddings_b) * self.scale
        labels = torch.arange(len(scores), dtype=torch.long)
        return self.cross_entropy_loss(scores, labels)


class InformationRetrievalEvaluator:
    def __init__(self, queries, corpus, relevant_docs, mrr_at_k=10):
        self.queries_ids = list(queries)
        self.queries = [queries[qid] for qid in self.queries_ids]
        self.corpus_ids = list(corpus)
        self.corpus = [corpus[cid] for cid in self.corpus_ids]
        self.relevant_docs = relevant_docs
        self.mrr_at_k = mrr_at_k

    def __call__(self, model):
        q = model.encode(self.queries, convert_to_tensor=True, normalize_embeddings=True)
        c = model.encode(self.corpus, convert_to_tensor=True, normalize_embeddings=True)
        top = (q @ c.T).topk(self.mrr_at_k, dim=1).indices
        mrr, recall = 0.0, 0.0
        for qi, qid in enumerate(self.queries_ids):
            hits = [self.corpus_ids[j] in self.relevant_docs[qid] for j in top[qi].tolist()]
            if any(hits):
                mrr += 1.0 / (hits.index(True) + 1)
            recall += sum(hits) / len(self.relevant_docs[qid])
        n = len(self.queries_ids)
        print(f"MRR@{self.mrr_at_k}: {mrr / n:.4f}  Recall@{self.mrr_at_k}: {recall / n:.4f}")
        return mrr / n


def make_segment(topic, rng):
    words = []
    for _ in range(rng.randint(12, 40)):
        words.append(rng.choice(TOPICS[topic]) if rng.random() < 0.35 else rng.choice(FILLER))
    return " ".join(words)


def make_query(topic, rng):
    return " ".join(rng.sample(topic.split() + TOPICS[topic], rng.randint(2, 4)))


def main():
    torch.manual_seed(3)
    rng = random.Random(3)
    topics = list(TOPICS)
    vocab = set(FILLER) | {w for t in topics for w in t.split() + TOPICS[t]}
    tokenizer = WordTokenizer(vocab)
    word_embedding_model = Transformer(tokenizer, max_seq_length=64)
    pooling_model = Pooling(word_embedding_model.get_word_embedding_dimension())
    model = SentenceTransformer(modules=[word_embedding_model, pooling_model])
    train_examples = []
    for i in range(384):
        topic = rng.choice(topics)
        train_examples.append(InputExample(guid=str(i), texts=[make_query(topic, rng), make_segment(topic, rng)]))
    train_dataloader = torch.utils.data.DataLoader(train_examples, shuffle=True, batch_size=32)
    train_loss = MultipleNegativesRankingLoss(model)
    model.fit(train_objectives=[(train_dataloader, train_loss)], epochs=4,
              optimizer_params={"lr": 1e-3})
    corpus, queries, relevant_docs = {}, {}, {}
    for ep in range(60):
        topic = topics[ep % len(topics)]
        corpus[f"ep{ep}_seg0"] = make_segment(topic, rng)
    for qi in range(36):
        topic = topics[qi % len(topics)]
        queries[f"q{qi}"] = make_query(topic, rng)
        relevant_docs[f"q{qi}"] = {cid for cid in corpus if topics[int(cid[2:].split("_")[0]) % len(topics)] == topic}
    InformationRetrievalEvaluator(queries, corpus, relevant_docs)(model)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
