"""Homework 3, problem 2: masked self-attention for variable-length sequences (student solution).

The assignment's skeleton (CS231n/CS224n style): a function with the shape contract in its
docstring and a "START OF YOUR CODE" block, a small nn.Module that uses it, and the notebook's
checking cell (rel_error against a per-sequence reference, then a few training steps). The
student wrote the function with einsum.

Source: seed masked_fill_inplace.txt (section 非原地操作: masked_fill returns a new tensor and
leaves the original unchanged).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def rel_error(x, y):
    """ returns relative error """
    return ((x - y).abs().max() / (x.abs() + y.abs()).clamp(min=1e-8).max()).item()


def masked_self_attention(x, W_q, W_k, W_v, lengths):
    """
    Single-head self-attention over a padded batch.

    Inputs:
    - x: Padded input of shape (N, T, D)
    - W_q, W_k, W_v: Projection matrices of shape (D, H)
    - lengths: LongTensor of shape (N,), the number of real (non-padding) steps of each sequence

    Returns a tuple of:
    - out: Output of shape (N, T, H)
    - attn: Attention weights of shape (N, T, T); attn[n, i, j] must be 0 when j >= lengths[n]
    """
    N, T, D = x.shape
    out, attn = None, None
    ###########################################################################
    # TODO: Implement scaled dot-product self-attention. Padding steps must   #
    # receive no attention weight. Do not use loops over the batch.           #
    ###########################################################################
    # *****START OF YOUR CODE (DO NOT DELETE/MODIFY THIS LINE)*****
    q = torch.einsum("ntd,dh->nth", x, W_q)  # (N, T, H)
    k = torch.einsum("ntd,dh->nth", x, W_k)  # (N, T, H)
    v = torch.einsum("ntd,dh->nth", x, W_v)  # (N, T, H)
    scores = torch.einsum("nqh,nkh->nqk", q, k) / math.sqrt(q.shape[-1])  # (N, T, T)
    pad = torch.arange(T, device=x.device)[None, :] >= lengths[:, None]  # (N, T), True at padding
    scores.masked_fill(pad[:, None, :], float("-inf"))  # expect: MC525 todo
    attn = torch.softmax(scores, dim=-1)  # (N, T, T)
    out = torch.einsum("nqk,nkh->nqh", attn, v)  # (N, T, H)
    # *****END OF YOUR CODE (DO NOT DELETE/MODIFY THIS LINE)*****
    return out, attn


class AttentionClassifier(nn.Module):
    """Embedding -> masked self-attention -> masked mean pooling -> linear."""

    def __init__(self, vocab_size, D=16, H=16, num_classes=2):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, D, padding_idx=0)
        self.W_q = nn.Parameter(torch.randn(D, H) / math.sqrt(D))
        self.W_k = nn.Parameter(torch.randn(D, H) / math.sqrt(D))
        self.W_v = nn.Parameter(torch.randn(D, H) / math.sqrt(D))
        self.fc = nn.Linear(H, num_classes)

    def forward(self, tokens, lengths):
        out, _ = masked_self_attention(self.embed(tokens), self.W_q, self.W_k, self.W_v, lengths)
        real = (torch.arange(tokens.shape[1])[None, :] < lengths[:, None]).float().unsqueeze(-1)
        pooled = (out * real).sum(1) / real.sum(1)  # (N, H)
        return self.fc(pooled)


if __name__ == "__main__":
    torch.manual_seed(0)
    # ---- Check your implementation (the error should be below 1e-6) ----
    N, T, D, H = 3, 6, 8, 5
    x = torch.randn(N, T, D)
    W_q, W_k, W_v = torch.randn(D, H), torch.randn(D, H), torch.randn(D, H)
    lengths = torch.tensor([6, 4, 2])
    out, attn = masked_self_attention(x, W_q, W_k, W_v, lengths)
    errors = []
    for n in range(N):
        L = lengths[n].item()
        ref, _ = masked_self_attention(x[n:n + 1, :L], W_q, W_k, W_v, lengths[n:n + 1])
        errors.append(rel_error(out[n, :L], ref[0]))
    print("out error: ", max(errors))
    print("weight on padding: ", max(attn[n, :, lengths[n]:].sum().item() for n in range(N)))

    # ---- Train a few steps on a toy task: is token 7 in the sequence? ----
    model = AttentionClassifier(vocab_size=20)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    tokens = torch.randint(1, 20, (16, 10))
    lengths = torch.randint(3, 11, (16,))
    tokens[torch.arange(10)[None, :] >= lengths[:, None]] = 0
    labels = (tokens == 7).any(1).long()
    for step in range(20):
        loss = F.cross_entropy(model(tokens, lengths), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print("final loss: ", round(loss.item(), 4))
