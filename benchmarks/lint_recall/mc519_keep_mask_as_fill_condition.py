"""MC519: a keep mask (HF attention_mask, 1 = real token) used as the masked_fill condition: the
real tokens are masked and the padding is kept.

Source: huggingface/transformers#205 (attention_mask: 1 for real tokens), hyunwoongko/transformer#10
(the correct form is `masked_fill(mask == 0, ...)`), the seed self_attention_mask_guide.txt
(True means padding only for key_padding_mask).
Surroundings: top of file, after other code, a method, a closure.
"""

import torch
import torch.nn as nn

attention_mask = torch.tensor([[1, 1, 1, 0]])
scores = torch.randn(1, 4, 4)
scores = scores.masked_fill(attention_mask.bool()[:, None, :], float("-inf"))  # expect: MC519 top

HIDDEN = 8
HEADS = 2
EPS = 1e-6


def mean_pool(x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    k = keep.unsqueeze(-1).to(x.dtype)
    return (x * k).sum(1) / k.sum(1).clamp(min=EPS)


class Conf:
    hidden = HIDDEN
    heads = HEADS


hidden = torch.randn(1, 4, HIDDEN)
pooled = mean_pool(hidden, attention_mask)
token_logits = torch.randn(1, 4)
token_logits = token_logits.masked_fill(attention_mask.to(torch.bool), -1e4)  # expect: MC519 after-code


class BertSelfAttention(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.qk = nn.Linear(dim, 2 * dim)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        q, k = self.qk(x).chunk(2, -1)
        att = q @ k.transpose(-1, -2)
        att = att.masked_fill(attention_mask[:, None, :].bool(), torch.finfo(att.dtype).min)  # expect: MC519 method
        return att.softmax(-1)


def pointer_scores(attention_mask: torch.Tensor):
    keep = attention_mask.bool()

    def score(logits: torch.Tensor) -> torch.Tensor:
        return logits.masked_fill(keep, float("-inf")).log_softmax(-1)  # expect: MC519 closure

    return score
