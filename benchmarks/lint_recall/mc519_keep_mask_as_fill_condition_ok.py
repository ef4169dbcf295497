"""MC519 correct twin: the fill condition is the inverted keep mask (`== 0`, `~`, logical_not).

Source: huggingface/transformers#205 and hyunwoongko/transformer#10 (`masked_fill(mask == 0, ...)`).
"""

import torch
import torch.nn as nn

attention_mask = torch.tensor([[1, 1, 1, 0]])
scores = torch.randn(1, 4, 4)
scores = scores.masked_fill(~attention_mask.bool()[:, None, :], float("-inf"))
token_logits = torch.randn(1, 4)
token_logits = token_logits.masked_fill(attention_mask == 0, -1e4)
input_ids = torch.tensor([[5, 6, 7, 0]])
input_ids = input_ids.masked_fill(~attention_mask.bool(), 0)


class BertSelfAttention(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.qk = nn.Linear(dim, 2 * dim)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        q, k = self.qk(x).chunk(2, -1)
        att = q @ k.transpose(-1, -2)
        att = att.masked_fill(attention_mask[:, None, :].logical_not(), torch.finfo(att.dtype).min)
        return att.softmax(-1)


def pointer_scores(attention_mask: torch.Tensor):
    pad = attention_mask.eq(0)

    def score(logits: torch.Tensor) -> torch.Tensor:
        return logits.masked_fill(pad, float("-inf")).log_softmax(-1)

    return score
