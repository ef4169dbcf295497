"""Held-out 4: in-place masked fills on tensors that autograd still needs: the score of an
additive attention used by a gradient-importance measure, and the softmax output of a
self-attention whose padded query rows are zeroed in place.

Source: pytorch/pytorch#54625 (`score_t.masked_fill_(torch.logical_not(mask), -np.inf)` in an
attention's forward; with `torch.autograd.grad` the gradient comes out wrong; "masked_fill_
causes the error, torch.where works fine"), jadore801120/attention-is-all-you-need-pytorch#16
(masking the attention in place through `.data` to get around autograd; the answer: fill the
tensor itself, out of place).
Surroundings: the output of a module method, the output of softmax zeroed in place on rows
selected by a query padding mask.
"""

import numpy as np
import torch
import torch.nn as nn


class _Attention(nn.Module):
    def __init__(self, input_size: int = 128, attention_hidden_size: int = 128) -> None:
        super().__init__()
        self.W1 = nn.Linear(input_size, attention_hidden_size)
        self.W2 = nn.Linear(attention_hidden_size, 1, bias=False)
        self.softmax = nn.Softmax(dim=-1)

    def score(self, values: torch.Tensor) -> torch.Tensor:
        h_t = torch.tanh(self.W1(values))
        score_t = self.W2(h_t)
        return score_t.squeeze(2)

    def forward(self, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        score_t = self.score(values)
        score_t.masked_fill_(torch.logical_not(mask), -np.inf)  # expect: MC505 method-output
        alpha_t = self.softmax(score_t)
        return (alpha_t.unsqueeze(2) * values).sum(1)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.w_qs = nn.Linear(d_model, d_model, bias=False)
        self.w_ks = nn.Linear(d_model, d_model, bias=False)
        self.w_vs = nn.Linear(d_model, d_model, bias=False)
        self.fc = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x: torch.Tensor, key_pad: torch.Tensor, query_pad: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q = self.w_qs(x).view(b, n, self.n_head, -1).transpose(1, 2)
        k = self.w_ks(x).view(b, n, self.n_head, -1).transpose(1, 2)
        v = self.w_vs(x).view(b, n, self.n_head, -1).transpose(1, 2)
        attn = torch.matmul(q / (d // self.n_head) ** 0.5, k.transpose(2, 3))
        attn = attn.masked_fill(key_pad[:, None, None, :], float("-inf"))
        attn = torch.softmax(attn, dim=-1)
        attn.masked_fill_(query_pad[:, None, :, None], 0.0)  # expect: MC505 softmax-output
        return self.fc(torch.matmul(attn, v).transpose(1, 2).reshape(b, n, d))
