"""Held-out 7 (correct twin): AllenNLP-style `nn.util` helpers (masked_softmax, masked_log_softmax,
replace_masked_values) and a bidirectional attention flow layer using them.

Source: the seed guide's "mask is additive, not multiplicative" (logits multiplied by a bool
mask before softmax and never renormalised, the bug allennlp's own `memory_efficient=False` path
avoids by re-masking), NVIDIA/apex#1052 (a -1e32 fill value bound in a lambda), the seed guide
"PyTorch mask is additive" (a `torch.BoolTensor` mask, known from its annotation only, added to the
similarity matrix).
Surroundings: `torch.BoolTensor` annotations, a lambda helper, functions called from a Module.
"""

import torch
from torch import nn

replace_masked = lambda t, m: t.masked_fill(~m, torch.finfo(t.dtype).min)


def masked_softmax(vector: torch.Tensor, mask: torch.BoolTensor, dim: int = -1) -> torch.Tensor:
    """Softmax over `vector` where `mask` is True (False = padding)."""
    while mask.dim() < vector.dim():
        mask = mask.unsqueeze(1)
    return torch.nn.functional.softmax(vector.masked_fill(~mask, torch.finfo(vector.dtype).min), dim=dim)


def masked_max(vector: torch.Tensor, mask: torch.BoolTensor, dim: int) -> torch.Tensor:
    return replace_masked(vector, mask).max(dim=dim)[0]


class BidafAttention(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.w = nn.Linear(3 * dim, 1, bias=False)

    def similarity(self, passage: torch.Tensor, question: torch.Tensor) -> torch.Tensor:
        p = passage.unsqueeze(2).expand(-1, -1, question.size(1), -1)
        q = question.unsqueeze(1).expand(-1, passage.size(1), -1, -1)
        return self.w(torch.cat([p, q, p * q], dim=-1)).squeeze(-1)

    def forward(self, passage: torch.Tensor, question: torch.Tensor,
                passage_mask: torch.BoolTensor, question_question_mask: torch.BoolTensor) -> torch.Tensor:
        sim = self.similarity(passage, question)
        p2q = masked_softmax(sim, question_question_mask)
        attended_question = torch.bmm(p2q, question)
        q2p_logits = masked_max(sim, question_question_mask.unsqueeze(1), dim=-1)
        q2p_logits = q2p_logits.masked_fill(~passage_mask, torch.finfo(q2p_logits.dtype).min)
        q2p = q2p_logits.softmax(-1)
        attended_passage = torch.bmm(q2p.unsqueeze(1), passage).expand_as(passage)
        return torch.cat([passage, attended_question, passage * attended_question,
                          passage * attended_passage], dim=-1)
