"""MC520 correct twin: the masked logits are filled before softmax, or the probabilities are
masked after it and renormalised.

Source: the fix of georg-wolflein/good-features PR #1 (`masked_fill(a, ~mask, -inf)`),
abisee/pointer-generator#88 and ruotianluo/self-critical.pytorch#89 (softmax, then the mask,
then re-normalise: equivalent to masking before softmax).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

instances = torch.randn(6)
keep = torch.tensor([True, True, True, False, False, False])
weights = torch.softmax(instances.masked_fill(~keep, float("-inf")), dim=0)


class Pooler(nn.Module):
    def __init__(self, dim: int, pad_idx: int) -> None:
        super().__init__()
        self.score = nn.Linear(dim, 1)
        self.pad_idx = pad_idx

    def forward(self, tokens, hidden):
        logits = self.score(hidden).squeeze(-1)
        keep = tokens != self.pad_idx
        probs = F.softmax(logits, dim=-1)
        probs = probs * keep
        probs = probs / probs.sum(-1, keepdim=True)
        return (probs.unsqueeze(-1) * hidden).sum(1)


def decoder_attention(q, k, n):
    look_ahead = torch.ones(n, n).tril()

    def attend():
        energy = q @ k.transpose(-1, -2)
        energy = energy.masked_fill(look_ahead == 0, float("-inf"))
        return energy.softmax(dim=-1)

    return attend()


def memory_attention(tokenizer, texts, query, memory):
    enc = tokenizer(texts, return_tensors="pt", padding=True)
    scores = torch.einsum("bd,bsd->bs", query, memory)
    probs = F.softmax(scores * enc["attention_mask"], dim=-1)
    probs = probs * enc["attention_mask"]
    return probs / probs.sum(-1, keepdim=True)
