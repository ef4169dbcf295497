"""Held-out 4 twin: the padded instances are filled with -inf before the softmax, and the LSH
blend is a masked_fill.

Source: georg-wolflein/good-features#1, cerebroai/reformers#3 (the fixes).
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
        A = torch.masked_fill(A, ~valid, float("-inf"))
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
    dots = dots.masked_fill(~bucket_mask.bool(), float("-inf"))
    return torch.softmax(dots, dim=-1) @ v
