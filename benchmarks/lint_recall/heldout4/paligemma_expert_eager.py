"""Held-out 4: the eager attention of a PaliGemma-with-expert policy run under AMP: the masked
value is a float32-sized constant while the attention weights are float16.

Source: huggingface/lerobot#710 (`big_neg = -2.3819763e38` and
`torch.where(attention_mask[:, None, :, :], att_weights, big_neg)` raise `value cannot be converted
to type at::Half without overflow` when the computation runs in half precision; on CPU torch 2.13
`torch.where` turns it into -inf instead, `torch.full_like` raises; the PR picks a value per
dtype).
Surroundings: a local constant handed to `torch.where`, a `torch.full_like` of a float16 tensor
with the float32 minimum inside a helper of the policy.
"""

import torch
import torch.nn as nn


def make_att_2d_masks(pad_masks: torch.Tensor, att_masks: torch.Tensor) -> torch.Tensor:
    cumsum = torch.cumsum(att_masks, dim=1)
    att_2d_masks = cumsum[:, None, :] <= cumsum[:, :, None]
    pad_2d_masks = pad_masks[:, None, :] * pad_masks[:, :, None]
    return att_2d_masks & pad_2d_masks


def eager_attention_forward(attention_mask: torch.Tensor, batch_size: int, head_dim: int,
                            query_states: torch.Tensor, key_states: torch.Tensor,
                            value_states: torch.Tensor) -> torch.Tensor:
    num_att_heads = query_states.shape[2]
    sequence_length = key_states.shape[1]
    query_states = query_states.transpose(1, 2)
    key_states = key_states.transpose(1, 2)
    att_weights = torch.matmul(query_states, key_states.transpose(2, 3))
    att_weights *= head_dim**-0.5
    big_neg = -2.3819763e38
    masked_att_weights = torch.where(attention_mask[:, None, :, :], att_weights, big_neg)  # expect: MC501 where-local
    probs = nn.functional.softmax(masked_att_weights, dim=-1)
    probs = probs.to(dtype=value_states.dtype)
    att_output = torch.matmul(probs, value_states.permute(0, 2, 1, 3))
    att_output = att_output.permute(0, 2, 1, 3)
    return att_output.reshape(batch_size, -1, num_att_heads * head_dim)[:, :sequence_length]


class ExpertHead(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(width, width)
        self.k = nn.Linear(width, width)

    def _masked_logits(self, suffix: torch.Tensor, prefix: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        b, n, d = suffix.shape
        q = self.q(suffix).view(b, n, self.heads, -1).transpose(1, 2)
        k = self.k(prefix).view(b, prefix.shape[1], self.heads, -1).transpose(1, 2)
        logits = (q @ k.transpose(-1, -2)).to(torch.float16)
        floor = torch.full_like(logits, torch.finfo(torch.float32).min)  # expect: MC517 full-like
        return torch.where(keep[:, None], logits, floor)

    def forward(self, suffix: torch.Tensor, prefix: torch.Tensor, pad_masks: torch.Tensor,
                att_masks: torch.Tensor) -> torch.Tensor:
        keep = make_att_2d_masks(pad_masks, att_masks)[:, -suffix.shape[1]:, :prefix.shape[1]]
        return self._masked_logits(suffix, prefix, keep).float().softmax(-1)
