"""MC520 with the 0/1 values proven in the file: a keep-mask multiplied into the logits that
softmax reads next.

Source: georg-wolflein/good-features PR #1 (`a * mask` then softmax: "softmax will still treat
zeros as full-fledged elements"), tebesu/CollaborativeMemoryNetwork#8 and
huggingface/transformers#542 ("an input of 0 can still yield quite a large softmax weight
(since e^0 = 1)").
Surroundings: top of file, a method, a closure, `*=`, a helper after other code.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

instances = torch.randn(6)
keep = torch.tensor([True, True, True, False, False, False])
weights = torch.softmax(instances * keep, dim=0)  # expect: MC520 top


class Pooler(nn.Module):
    def __init__(self, dim: int, pad_idx: int) -> None:
        super().__init__()
        self.score = nn.Linear(dim, 1)
        self.pad_idx = pad_idx

    def forward(self, tokens, hidden):
        logits = self.score(hidden).squeeze(-1)
        keep = tokens != self.pad_idx
        logits = logits * keep  # expect: MC520 method
        probs = F.softmax(logits, dim=-1)
        return (probs.unsqueeze(-1) * hidden).sum(1)


def decoder_attention(q, k, n):
    look_ahead = torch.ones(n, n).tril()

    def attend():
        energy = q @ k.transpose(-1, -2)
        energy *= look_ahead  # expect: MC520 closure
        return energy.softmax(dim=-1)

    return attend()


HIDDEN = 16


def project(x):
    return x * HIDDEN ** -0.5


def memory_attention(tokenizer, texts, query, memory):
    enc = tokenizer(texts, return_tensors="pt", padding=True)
    scores = project(torch.einsum("bd,bsd->bs", query, memory))
    return F.softmax(scores * enc["attention_mask"], dim=-1)  # expect: MC520 after-code
