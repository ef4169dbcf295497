"""Query-embedding service for e-commerce product search, with a dynamic batching queue.

Shoppers' queries arrive one at a time over HTTP; a background worker drains the request
queue every few milliseconds, pads whatever has arrived into one batch with the tokenizer,
embeds it with a small transformer encoder, and resolves each request's future with its
L2-normalised vector, which the caller sends to the approximate-nearest-neighbour index of
product embeddings.

Source: conventions.md §1 (HF attention_mask row), §2.4 (int64 key_padding_mask rejected)
"""

import argparse
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class BatcherSettings:
    max_batch: int = 32
    max_wait_ms: float = 4.0
    max_length: int = 32
    device: str = "cpu"


class QueryEncoder(nn.Module):
    def __init__(self, vocab_size=30522, dim=128, heads=4, layers=2, out_dim=64, max_len=64):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, dim)
        self.pos = nn.Embedding(max_len, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.1, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.proj = nn.Linear(dim, out_dim)

    def forward(self, input_ids, key_padding, attention_mask):
        pos = torch.arange(input_ids.size(1), device=input_ids.device)
        h = self.encoder(self.tok(input_ids) + self.pos(pos), src_key_padding_mask=key_padding)
        weight = attention_mask.unsqueeze(-1).to(h.dtype)
        pooled = (h * weight).sum(1) / weight.sum(1).clamp(min=1.0)
        return F.normalize(self.proj(pooled), dim=-1)


class DynamicBatcher:
    def __init__(self, model, tokenizer, settings: BatcherSettings):
        self.model = model.to(settings.device).eval()
        self.tokenizer = tokenizer
        self.settings = settings
        self.requests = queue.Queue()
        self.stats = {"batches": 0, "queries": 0}
        self._stop = threading.Event()
        self._worker = threading.Thread(target=self._loop, daemon=True)

    def start(self):
        self._worker.start()
        return self

    def stop(self):
        self._stop.set()
        self._worker.join()

    def submit(self, text) -> Future:
        fut = Future()
        self.requests.put((text, fut))
        return fut

    def _drain(self):
        first = self.requests.get(timeout=0.1)
        pending = [first]
        deadline = time.monotonic() + self.settings.max_wait_ms / 1000
        while len(pending) < self.settings.max_batch:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                pending.append(self.requests.get(timeout=remaining))
            except queue.Empty:
                break
        return pending

    @torch.inference_mode()
    def embed_batch(self, texts):
        enc = self.tokenizer(texts, padding=True, truncation=True, max_length=self.settings.max_length,
                             return_tensors="pt")
        input_ids = enc["input_ids"].to(self.settings.device)
        attention_mask = enc["attention_mask"].to(self.settings.device)
        key_padding = ~attention_mask  # expect: MC518 tokenizer
        return self.model(input_ids, key_padding, attention_mask).cpu()

    def _loop(self):
        while not self._stop.is_set():
            try:
                pending = self._drain()
            except queue.Empty:
                continue
            texts = [text for text, _ in pending]
            try:
                vectors = self.embed_batch(texts)
            except Exception as exc:
                for _, fut in pending:
                    fut.set_exception(exc)
                continue
            for (_, fut), vec in zip(pending, vectors):
                fut.set_result(vec)
            self.stats["batches"] += 1
            self.stats["queries"] += len(pending)


def load_tokenizer(name):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name)


def benchmark(batcher, queries, concurrency=64):
    start = time.perf_counter()
    futures = [batcher.submit(q) for q in queries[:concurrency]]
    vectors = torch.stack([f.result(timeout=30) for f in futures])
    elapsed = time.perf_counter() - start
    return vectors, elapsed


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokenizer", default="bert-base-uncased")
    parser.add_argument("--checkpoint", default=None)
    parser.add_argument("--max-batch", type=int, default=32)
    parser.add_argument("--max-wait-ms", type=float, default=4.0)
    args = parser.parse_args(argv)
    model = QueryEncoder()
    if args.checkpoint:
        model.load_state_dict(torch.load(args.checkpoint, map_location="cpu"))
    settings = BatcherSettings(max_batch=args.max_batch, max_wait_ms=args.max_wait_ms)
    batcher = DynamicBatcher(model, load_tokenizer(args.tokenizer), settings).start()
    queries = ["red running shoes", "usb-c charger 65w", "linen duvet cover king", "noise cancelling headphones"] * 16
    vectors, elapsed = benchmark(batcher, queries)
    print(f"{len(vectors)} queries in {elapsed * 1000:.1f} ms, {batcher.stats}")
    print("cosine(q0, q4) =", float(vectors[0] @ vectors[4]))
    batcher.stop()


if __name__ == "__main__":
    main()
