"""Sentence encoder whose masked softmax is a TorchScript function, served in float16.

`masked_softmax` is compiled with `@torch.jit.script` so the attention layers can be exported
as one scripted graph. `pad` is bool (B, 1, 1, S), True = padded key, to be hidden. Serving
calls `model.half()` and runs the encoder in float16 (halves memory on the inference box).

Source: NVIDIA/apex#1052 and #1105, facebookresearch/fairseq#3575, conventions.md §2.3 and
§3 item 18 (`masked_fill(mask, -1e9)` on float16 scores: "value cannot be converted to type
at::Half without overflow").
"""
import math

import torch
import torch.nn as nn
from torch import Tensor

PAD_ID = 0


@torch.jit.script
def masked_softmax(scores: Tensor, pad: Tensor) -> Tensor:
    scores = scores.masked_fill(pad, float("-inf"))
    return torch.softmax(scores, dim=-1)


class SelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: Tensor, pad: Tensor) -> Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
        weights = masked_softmax(scores, pad)
        return self.out((weights @ v).transpose(1, 2).reshape(b, n, d))


class Encoder(nn.Module):
    def __init__(self, vocab: int = 64, dim: int = 32, heads: int = 4, layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, padding_idx=PAD_ID)
        self.attn = nn.ModuleList(SelfAttention(dim, heads) for _ in range(layers))
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(layers))

    def forward(self, ids: Tensor) -> Tensor:
        pad = (ids == PAD_ID)[:, None, None, :]
        x = self.embed(ids)
        for attn, norm in zip(self.attn, self.norms):
            x = x + attn(norm(x), pad)
        keep = (~pad[:, 0, 0, :]).unsqueeze(-1).to(x.dtype)
        return (x * keep).sum(1) / keep.sum(1)


def serve(model: Encoder, ids: Tensor, dtype: torch.dtype) -> Tensor:
    model = model.to(dtype).eval()
    with torch.inference_mode():
        return model(ids)


if __name__ == "__main__":
    torch.manual_seed(0)
    model = Encoder()
    ids = torch.tensor([[3, 14, 15, 9, 0, 0], [2, 6, 5, 3, 5, 8]])
    ref = serve(model, ids, torch.float32)
    print("float32 sentence vectors:", tuple(ref.shape))
    emb = serve(model, ids, torch.float16)
    print("float16 vs float32:", (emb.float() - ref).abs().max().item())
