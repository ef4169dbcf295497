"""Held-out 4: attention pooling over padded bags of instances (multiple-instance learning) and
an LSH-style bucket attention: a 0/1 mask multiplied into the logits before the softmax, and a
keep/drop blend that multiplies 0 by -inf.

Source: georg-wolflein/good-features#1 (ABMIL: `A = A * mask` then `softmax`: the masked
instances get weight exp(0); fixed with `masked_fill(~mask, -inf)`), cerebroai/reformers#3
(`dots * mask + (1 - mask) * float('-inf')` in the LSH attention gives NaN; written here with
torch).
Surroundings: `torch.mul` of the logits with a mask that comes from the caller through a model
method, a blend in a module-level helper with the mask cast to float first.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class GatedAttentionPool(nn.Module):
    def __init__(self, d_in: int, d_attn: int) -> None:
        super().__init__()
        self.attention_a = nn.Sequential(nn.Linear(d_in, d_attn), nn.Tanh())
        self.attention_b = nn.Sequential(nn.Linear(d_in, d_attn), nn.Sigmoid())
        self.attention_c = nn.Linear(d_attn, 1)

    def forward(self, bags: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        A = self.attention_c(self.attention_a(bags) * self.attention_b(bags)).squeeze(-1)
        A = torch.mul(A, valid)  # expect: MC520 torch-mul
        A = F.softmax(A, dim=1)
        return torch.einsum("bn,bnd->bd", A, bags)


class ABMIL(nn.Module):
    def __init__(self, d_in: int, n_classes: int) -> None:
        super().__init__()
        self.pool = GatedAttentionPool(d_in, 128)
        self.head = nn.Linear(d_in, n_classes)

    def forward(self, feats: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
        instance_mask = torch.arange(feats.shape[1], device=feats.device)[None, :] < lens[:, None]
        return self.head(self.pool(feats, instance_mask))


def lsh_bucket_attend(dots: torch.Tensor, bucket_mask: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    mask = bucket_mask.float()
    dots = dots * mask + (1.0 - mask) * float("-inf")  # expect: MC522 keep-blend
    return torch.softmax(dots, dim=-1) @ v
