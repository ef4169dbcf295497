"""Held-out 14 (correct twin): the cross-encoder reranker of a small search service. Serving code scores every
(query, document) pair under the project's own `inference_precision()` context manager, which
enters `torch.autocast` (float16 on GPUs, bfloat16 on the CPU fleet), so the attention-pooling
logits come out in half precision.

Source: huggingface/lerobot PR #710 ("Use safe negative constant for half-precision masking":
a float32-sized negative constant used to mask half-precision attention weights) and
`maskcheck explain MC517`: `masked_fill` of a bfloat16 tensor with `torch.finfo(torch.float32).min`
raises "value cannot be converted to type c10::BFloat16 without overflow".
Twin: the fill takes the minimum of the logits' own dtype.
Surroundings: a `contextlib.contextmanager` that enters `torch.autocast`, used around the scoring.
"""

import contextlib
from typing import Iterator, List

import torch
from torch import nn


@contextlib.contextmanager
def inference_precision(device_type: str) -> Iterator[None]:
    """Half-precision inference: float16 on CUDA, bfloat16 elsewhere."""
    dtype = torch.float16 if device_type == "cuda" else torch.bfloat16
    with torch.no_grad(), torch.autocast(device_type, dtype=dtype):
        yield


class CrossEncoderReranker(nn.Module):
    """Embeds the concatenated `[query] [SEP] [document]` ids and pools them with one attention
    query vector before a relevance head."""

    def __init__(self, vocab_size: int = 2000, dim: int = 64, pad_id: int = 0):
        super().__init__()
        self.pad_id = pad_id
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=pad_id)
        self.proj = nn.Linear(dim, dim)
        self.pool_query = nn.Parameter(torch.randn(dim) / dim**0.5)
        self.head = nn.Linear(dim, 1)

    def _encode(self, ids: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.proj(self.embed(ids)))

    @torch.no_grad()
    def score(self, pair_ids: torch.Tensor) -> torch.Tensor:
        pad = pair_ids == self.pad_id
        with inference_precision(pair_ids.device.type):
            h = self._encode(pair_ids)
            logits = h @ self.pool_query
            logits = logits.masked_fill(pad, torch.finfo(logits.dtype).min)
            weights = logits.softmax(dim=-1)
            pooled = torch.einsum("bt,btd->bd", weights, h)
            return self.head(pooled).squeeze(-1).float()


def rerank(model: CrossEncoderReranker, candidates: List[List[int]], top_k: int = 10) -> List[int]:
    """Returns the indices of the best `top_k` candidates (each a list of token ids)."""
    width = max(len(c) for c in candidates)
    batch = torch.full((len(candidates), width), model.pad_id, dtype=torch.long)
    for row, ids in enumerate(candidates):
        batch[row, : len(ids)] = torch.tensor(ids)
    scores = model.score(batch)
    return scores.argsort(descending=True)[:top_k].tolist()
