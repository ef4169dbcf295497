"""Retrieval-augmented answer generation with Fusion-in-Decoder.

Follows facebookresearch/FiD: each retrieved passage is formatted as
``question: ... title: ... context: ...``, ``encode_passages`` tokenizes the passages of every
example into a (batch, n_passages, length) tensor, the ``EncoderWrapper`` encodes each passage on
its own, and the decoder attends to the concatenation of all passage encodings of an example. A
small word-level tokenizer and a bag-of-words retriever stand in for the pretrained parts.

Source: conventions.md §2.6 and §5 item 6, §1 (SDPA row)
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class FiDConfig:
    n_passages: int = 3
    text_maxlength: int = 20
    answer_maxlength: int = 6
    d_model: int = 64
    num_heads: int = 4
    num_layers: int = 2


class WordTokenizer:
    pad_token_id, bos_token_id, eos_token_id = 0, 1, 2

    def __init__(self, texts: list[str]):
        words = sorted({w for t in texts for w in t.split()})
        self.vocab = {w: i + 3 for i, w in enumerate(words)}
        self.inverse = {i: w for w, i in self.vocab.items()}

    def __len__(self) -> int:
        return len(self.vocab) + 3

    def encode(self, text: str, max_length: int) -> list[int]:
        ids = [self.vocab[w] for w in text.split() if w in self.vocab][: max_length - 1]
        return ids + [self.eos_token_id]

    def decode(self, ids: list[int]) -> str:
        return " ".join(self.inverse[i] for i in ids if i in self.inverse)


def encode_passages(batch_text_passages: list[list[str]], tokenizer: WordTokenizer, max_length: int):
    passage_ids = torch.full((len(batch_text_passages), len(batch_text_passages[0]), max_length), tokenizer.pad_token_id)
    for i, passages in enumerate(batch_text_passages):
        for j, text in enumerate(passages):
            ids = tokenizer.encode(text, max_length)
            passage_ids[i, j, : len(ids)] = torch.tensor(ids)
    passage_masks = passage_ids != tokenizer.pad_token_id
    return passage_ids, passage_masks


class Collator:
    def __init__(self, text_maxlength: int, tokenizer: WordTokenizer, answer_maxlength: int):
        self.tokenizer, self.text_maxlength, self.answer_maxlength = tokenizer, text_maxlength, answer_maxlength

    def __call__(self, batch: list[dict]) -> dict:
        targets = [self.tokenizer.encode(ex["answer"], self.answer_maxlength) for ex in batch]
        labels = torch.full((len(batch), self.answer_maxlength), -100)
        for i, t in enumerate(targets):
            labels[i, : len(t)] = torch.tensor(t)
        text_passages = [
            [f"question: {ex['question']} title: {p['title']} context: {p['text']}" for p in ex["passages"]] for ex in batch
        ]
        passage_ids, passage_masks = encode_passages(text_passages, self.tokenizer, self.text_maxlength)
        return {"input_ids": passage_ids.view(len(batch), -1), "attention_mask": passage_masks.view(len(batch), -1), "labels": labels}


class Attention(nn.Module):
    def __init__(self, cfg: FiDConfig):
        super().__init__()
        self.h = cfg.num_heads
        self.q = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.kv = nn.Linear(cfg.d_model, 2 * cfg.d_model, bias=False)
        self.o = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x, kv=None, key_keep=None, causal=False):
        kv = x if kv is None else kv
        B, T, C = x.shape
        q = self.q(x).view(B, T, self.h, -1).transpose(1, 2)
        k, v = (t.view(B, kv.shape[1], self.h, -1).transpose(1, 2) for t in self.kv(kv).split(C, dim=-1))
        if causal:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=key_keep)
        return self.o(y.transpose(1, 2).reshape(B, T, C))


class EncoderLayer(nn.Module):
    def __init__(self, cfg: FiDConfig):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.attn = Attention(cfg)
        self.ff = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.ReLU(), nn.Linear(4 * cfg.d_model, cfg.d_model))

    def forward(self, x, key_keep):
        x = x + self.attn(self.ln1(x), key_keep=key_keep)
        return x + self.ff(self.ln2(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: FiDConfig):
        super().__init__()
        self.ln1, self.ln2, self.ln3 = (nn.LayerNorm(cfg.d_model) for _ in range(3))
        self.self_attn, self.cross_attn = Attention(cfg), Attention(cfg)
        self.ff = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.ReLU(), nn.Linear(4 * cfg.d_model, cfg.d_model))

    def forward(self, x, memory, memory_mask):
        x = x + self.self_attn(self.ln1(x), causal=True)
        x = x + self.cross_attn(self.ln2(x), kv=memory, key_keep=memory_mask)  # expect: MC515 fid
        return x + self.ff(self.ln3(x))


class EncoderWrapper(nn.Module):
    def __init__(self, cfg: FiDConfig, embed: nn.Embedding):
        super().__init__()
        self.n_passages, self.embed = cfg.n_passages, embed
        self.pos = nn.Embedding(cfg.text_maxlength, cfg.d_model)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.num_layers))

    def forward(self, input_ids, attention_mask):
        bsz, total_length = input_ids.shape
        passage_length = total_length // self.n_passages
        input_ids = input_ids.view(bsz * self.n_passages, passage_length)
        attention_mask = attention_mask.view(bsz * self.n_passages, passage_length)
        x = self.embed(input_ids) + self.pos(torch.arange(passage_length))
        ext = attention_mask[:, None, None, :]
        for layer in self.layers:
            x = layer(x, ext)
        return x.view(bsz, self.n_passages * passage_length, -1)


class FiDGenerator(nn.Module):
    def __init__(self, cfg: FiDConfig, vocab_size: int):
        super().__init__()
        self.cfg = cfg
        self.shared = nn.Embedding(vocab_size, cfg.d_model)
        self.encoder = EncoderWrapper(cfg, self.shared)
        self.dec_pos = nn.Embedding(cfg.answer_maxlength + 1, cfg.d_model)
        self.decoder = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.lm_head = nn.Linear(cfg.d_model, vocab_size, bias=False)

    def decode(self, decoder_input_ids, encoder_hidden_states, encoder_attention_mask):
        T = decoder_input_ids.shape[1]
        x = self.shared(decoder_input_ids) + self.dec_pos(torch.arange(T))
        for layer in self.decoder:
            x = layer(x, encoder_hidden_states, encoder_attention_mask)
        return self.lm_head(x)

    def forward(self, input_ids, attention_mask, labels):
        memory = self.encoder(input_ids, attention_mask)
        bos = torch.full((labels.shape[0], 1), WordTokenizer.bos_token_id)
        decoder_input_ids = torch.cat([bos, labels[:, :-1].clamp(min=0)], dim=1)
        logits = self.decode(decoder_input_ids, memory, attention_mask)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1), ignore_index=-100), logits

    @torch.no_grad()
    def generate(self, input_ids, attention_mask, max_length):
        memory = self.encoder(input_ids, attention_mask)
        out = torch.full((input_ids.shape[0], 1), WordTokenizer.bos_token_id)
        for _ in range(max_length):
            next_token = self.decode(out, memory, attention_mask)[:, -1].argmax(-1, keepdim=True)
            out = torch.cat([out, next_token], dim=1)
        return out[:, 1:]


CITIES = ["paris", "rome", "berlin", "madrid", "lisbon", "vienna", "prague", "oslo"]
COUNTRIES = ["france", "italy", "germany", "spain", "portugal", "austria", "czechia", "norway"]
FILLER = "it is known for old streets museums rivers bridges food music and many visitors every year".split()


def build_corpus(rng: random.Random) -> list[dict]:
    corpus = []
    for city, country in zip(CITIES, COUNTRIES):
        corpus.append({"title": country, "text": f"the capital of {country} is {city}"})
        corpus.append({"title": city, "text": " ".join(rng.sample(FILLER, rng.randint(2, 9)))})
    return corpus


def retrieve(question: str, corpus: list[dict], k: int, rng: random.Random) -> list[dict]:
    q = set(question.split())
    scored = sorted(corpus, key=lambda p: (-len(q & set((p["title"] + " " + p["text"]).split())), rng.random()))
    return scored[:k]


def main() -> None:
    torch.manual_seed(0)
    rng = random.Random(0)
    cfg = FiDConfig()
    corpus = build_corpus(rng)
    examples = [{"question": f"what is the capital of {c}", "answer": city} for city, c in zip(CITIES, COUNTRIES)]
    tokenizer = WordTokenizer([p["title"] + " " + p["text"] for p in corpus] + ["question: title: context: what capital"])
    collator = Collator(cfg.text_maxlength, tokenizer, cfg.answer_maxlength)
    model = FiDGenerator(cfg, len(tokenizer))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    try:
        for step in range(60):
            batch = [dict(ex, passages=retrieve(ex["question"], corpus, cfg.n_passages, rng)) for ex in rng.sample(examples, 4)]
            loss, _ = model(**collator(batch))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 20 == 0 or step == 59:
                print(f"step {step:2d} loss {loss.item():.4f}")
    except RuntimeError as err:
        print(f"training: RuntimeError: {err}")
    model.eval()
    batch = [dict(ex, passages=retrieve(ex["question"], corpus, cfg.n_passages, rng)) for ex in examples]
    answers = []
    for ex in batch:
        inputs = collator([ex])
        answers.append(tokenizer.decode(model.generate(inputs["input_ids"], inputs["attention_mask"], 2)[0].tolist()))
    print(f"exact match, one question at a time: {sum(a == ex['answer'] for a, ex in zip(answers, examples))}/{len(examples)}")
    inputs = collator(batch[:2])
    with torch.no_grad():
        try:
            both = model.generate(inputs["input_ids"], inputs["attention_mask"], 2)
            print(f"two questions batched: {[tokenizer.decode(row.tolist()) for row in both]}")
        except RuntimeError as err:
            print(f"two questions batched: RuntimeError: {err}")


if __name__ == "__main__":
    main()
