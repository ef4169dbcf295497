"""Held-out 5: head-masked attention in a transformer trained with mixed precision.

Source: NVIDIA/apex#1105 ("RuntimeError: value cannot be converted to type at::Half without overflow:
-1e+10" from `attn_scores_head = attn_scores_head.masked_fill(head_mask == 0, -1e10)` in mixed-precision
training; "change the -1e10 to a smaller value works").
Surroundings: a per-head loop in forward, a fill value kept on the module, a pooling helper whose
default argument is the fill value, a training step under autocast.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class HeadMaskedAttention(nn.Module):
    def __init__(self, dim: int, n_heads: int, mask_value: float = -1e10) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = dim // n_heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.mask_value = mask_value

    def forward(self, x: torch.Tensor, head_mask: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        attn_scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        heads = []
        for h in range(self.n_heads):
            attn_scores_head = attn_scores[:, h]
            attn_scores_head = attn_scores_head.masked_fill(head_mask[:, h] == 0, -1e10)  # expect: MC501 loop
            heads.append(attn_scores_head)
        attn_scores = torch.stack(heads, dim=1)
        attn_scores = attn_scores.masked_fill(pad[:, None, None, :], self.mask_value)  # expect: MC501 attribute
        probs = F.softmax(attn_scores, dim=-1)
        return self.out((probs @ v).transpose(1, 2).reshape(b, n, d))


def attention_pool(hidden: torch.Tensor, keep: torch.Tensor, scorer: nn.Linear,
                   fill: float = -1e10) -> torch.Tensor:
    scores = scorer(hidden).squeeze(-1)
    scores = scores.masked_fill(~keep, fill)  # expect: MC501 default-argument
    return torch.einsum("bn,bnd->bd", scores.softmax(-1), hidden)


def train_step(model: nn.Module, batch: dict, opt: torch.optim.Optimizer,
               scaler: torch.cuda.amp.GradScaler) -> float:
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.float16):
        logits = model(batch["x"], batch["head_mask"], batch["pad"])
        loss = F.cross_entropy(logits.mean(1), batch["y"])
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    return float(loss)
