"""Customs tariff classification: HS chapter suggestions for commercial-invoice line descriptions.

A FastAPI service for brokers' filing software: `POST /classify` takes a batch of goods
descriptions and returns the top-k HS chapters with probabilities. The model (word embeddings,
a two-layer `nn.TransformerEncoder`, masked mean pooling) is loaded once in the lifespan hook;
`uvicorn hs_code_fastapi:app --workers 2`.

Source: seed self_attention_mask_guide.txt (section 2); conventions.md section 1 (direction cheat-sheet), section 5 item 1.
"""

import random
import re
from contextlib import asynccontextmanager
from typing import List

import torch
import torch.nn as nn
import torch.nn.functional as F
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, Field

CHAPTERS = {
    "09": ["coffee", "tea", "pepper", "roasted", "beans", "ground", "spices", "cinnamon"],
    "39": ["plastic", "polyethylene", "pvc", "resin", "film", "granules", "polymer", "sheets"],
    "61": ["knitted", "cotton", "t-shirts", "sweaters", "jersey", "womens", "mens", "garments"],
    "73": ["steel", "iron", "screws", "bolts", "pipes", "stainless", "fittings", "nuts"],
    "84": ["pump", "machine", "engine", "valve", "compressor", "parts", "bearing", "industrial"],
    "85": ["electric", "cable", "battery", "lithium", "charger", "transformer", "led", "circuit"],
    "94": ["furniture", "chair", "wooden", "table", "mattress", "lamp", "cabinet", "office"],
}
FILLER = ["of", "for", "and", "new", "assorted", "pcs", "packed", "in", "cartons", "grade", "high", "quality"]
LABELS = sorted(CHAPTERS)


class GoodsTokenizer:
    def __init__(self):
        words = sorted({w for ws in CHAPTERS.values() for w in ws} | set(FILLER))
        self.vocab = {w: i + 2 for i, w in enumerate(words)}
        self.pad_id, self.unk_id = 0, 1

    def __call__(self, texts: List[str], max_length: int = 40):
        ids = [[self.vocab.get(w, self.unk_id) for w in re.findall(r"[a-z0-9\-]+", t.lower())][:max_length] or [self.unk_id] for t in texts]
        width = max(len(x) for x in ids)
        input_ids = torch.tensor([x + [self.pad_id] * (width - len(x)) for x in ids])
        return {"input_ids": input_ids, "attention_mask": input_ids != self.pad_id}


class HSClassifier(nn.Module):
    def __init__(self, vocab_size, n_labels, d_model=64, n_heads=4, n_layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=0)
        self.pos = nn.Embedding(64, d_model)
        layer = nn.TransformerEncoderLayer(d_model, n_heads, 2 * d_model, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, n_labels)

    def forward(self, input_ids, attention_mask):
        x = self.embed(input_ids) + self.pos(torch.arange(input_ids.size(1), device=input_ids.device))
        x = self.encoder(x, src_key_padding_mask=attention_mask)  # expect: MC502 keyword
        keep = attention_mask.unsqueeze(-1).to(x.dtype)
        return self.head((x * keep).sum(1) / keep.sum(1))


def synth_invoice_lines(n, seed):
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        label = rng.choice(LABELS)
        words = rng.sample(CHAPTERS[label], rng.randint(2, 4)) + rng.sample(FILLER, rng.randint(0, 6))
        rng.shuffle(words)
        lines.append((" ".join(words), LABELS.index(label)))
    return lines


def train_classifier(tokenizer, epochs=6, batch_size=32, seed=0):
    torch.manual_seed(seed)
    data = synth_invoice_lines(3000, seed)
    model = HSClassifier(len(tokenizer.vocab) + 2, len(LABELS))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(epochs):
        model.train()
        random.Random(seed).shuffle(data)
        for i in range(0, len(data), batch_size):
            chunk = data[i:i + batch_size]
            enc = tokenizer([t for t, _ in chunk])
            loss = F.cross_entropy(model(**enc), torch.tensor([y for _, y in chunk]))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model.eval()


class ClassifyRequest(BaseModel):
    descriptions: List[str] = Field(..., min_length=1, max_length=256)
    top_k: int = Field(3, ge=1, le=len(LABELS))


class Suggestion(BaseModel):
    chapter: str
    probability: float


class ClassifyResponse(BaseModel):
    results: List[List[Suggestion]]


STATE = {}


@asynccontextmanager
async def lifespan(app: FastAPI):
    STATE["tokenizer"] = GoodsTokenizer()
    STATE["model"] = train_classifier(STATE["tokenizer"])
    yield
    STATE.clear()


app = FastAPI(title="HS chapter suggester", version="1.2.0", lifespan=lifespan)


def suggest(descriptions: List[str], top_k: int) -> List[List[Suggestion]]:
    enc = STATE["tokenizer"](descriptions)
    with torch.inference_mode():
        probs = STATE["model"](enc["input_ids"], enc["attention_mask"]).softmax(dim=-1)
    top = probs.topk(top_k, dim=-1)
    return [[Suggestion(chapter=LABELS[j], probability=round(p, 4)) for p, j in zip(ps.tolist(), js.tolist())]
            for ps, js in zip(top.values, top.indices)]


@app.post("/classify", response_model=ClassifyResponse)
def classify(req: ClassifyRequest) -> ClassifyResponse:
    if "model" not in STATE:
        raise HTTPException(status_code=503, detail="model not loaded")
    return ClassifyResponse(results=suggest(req.descriptions, req.top_k))


@app.get("/health")
def health():
    return {"status": "ok", "labels": LABELS}
