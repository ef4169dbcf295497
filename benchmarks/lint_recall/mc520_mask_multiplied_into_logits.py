"""MC520: a 0/1 mask multiplied into the scores before softmax: the masked logit becomes 0, not
-inf, and still gets exp(0) = 1 of weight.

Source: georg-wolflein/good-features PR #1 ("the multiplication ... sets the masked elements to
zero. However, softmax will still treat zeros as full-fledged elements"), huggingface/transformers#542
and #12109, the seed self_attention_mask_guide.txt ("PyTorch中mask是加法而非乘法").
Surroundings: top of file, after other code, a method, a closure, an in-place `*=`.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

a = torch.tensor([0.43, -0.21, 0.99, 0.32, -0.35, 0.04])
mask = torch.tensor([True, True, True, False, False, False])
weights = torch.softmax(a * mask, dim=0)  # expect: MC520 top

N_INST = 6
DIM = 8
ATT_DIM = 4


def init(m: nn.Module) -> None:
    for p in m.parameters():
        nn.init.normal_(p, std=0.02)


class Sizes:
    n_inst = N_INST
    dim = DIM


feats = torch.randn(2, N_INST, DIM)
scores = torch.randn(2, N_INST, N_INST)
keep = torch.ones(N_INST, N_INST).tril()
scores = scores * keep  # expect: MC520 after-code
probs = F.softmax(scores, dim=-1)


class ABMIL(nn.Module):
    def __init__(self, dim: int, att_dim: int) -> None:
        super().__init__()
        self.att = nn.Sequential(nn.Linear(dim, att_dim), nn.Tanh(), nn.Linear(att_dim, 1))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        a = self.att(x).squeeze(-1)
        a = a * mask  # expect: MC520 method
        a = torch.softmax(a, dim=1)
        return (a.unsqueeze(-1) * x).sum(1)


def masked_attention(pad_keep: torch.Tensor):
    def attend(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        s = q @ k.transpose(-1, -2)
        s *= pad_keep[:, None, :]  # expect: MC520 closure
        return s.softmax(-1)

    return attend
