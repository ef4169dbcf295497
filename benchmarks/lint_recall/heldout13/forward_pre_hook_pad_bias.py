"""Held-out 13: a plug-in library that adds padding support to third-party attention layers without
editing them: a forward pre-hook (registered `with_kwargs=True`) reads the token ids stored on the
model and injects a `bias` keyword that the layer adds to its scores.

Source: the seed guide, "PyTorch中mask是'加法'而非'乘法'" and Q3 (the mask is added to the scores,
0 keep / -inf drop) and `maskcheck explain MC509`: the hook injects the bool padding mask itself,
and `scores + bias` adds 1.0 at the padding instead of hiding it.
Surroundings: register_forward_pre_hook(with_kwargs=True) injecting the mask as a keyword.
"""

import torch
from torch import nn


class ThirdPartyAttention(nn.Module):
    """Stands for a layer from another package: it only knows an additive `bias`."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, bias=None) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) * (d // self.heads) ** -0.5
        if bias is not None:
            scores = scores + bias  # expect: MC509 hook
        return self.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d))


def add_padding_support(model: nn.Module, pad_id: int = 0) -> None:
    def inject_bias(module, args, kwargs):
        ids = model._current_ids
        pad = (ids == pad_id)[:, None, None, :]
        kwargs["bias"] = pad  # also: MC509
        return args, kwargs

    for module in model.modules():
        if isinstance(module, ThirdPartyAttention):
            module.register_forward_pre_hook(inject_bias, with_kwargs=True)


class TextClassifier(nn.Module):
    def __init__(self, vocab: int = 120, dim: int = 32, heads: int = 4, classes: int = 3):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList([ThirdPartyAttention(dim, heads) for _ in range(2)])
        self.head = nn.Linear(dim, classes)
        self._current_ids = None

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        self._current_ids = ids
        x = self.embed(ids)
        for block in self.blocks:
            x = x + block(x)
        return self.head(x[:, 0])
