"""Chat-model decoder run under `torch.amp.autocast("cpu", dtype=torch.bfloat16)`: a
`prepare_decoder_mask` helper in the Hugging Face 4.x style builds an additive 4-D mask in the
autocast dtype for left-padded prompts; eager attention with a float32 softmax.

Source: huggingface/transformers PR #27114, NVIDIA-NeMo/Automodel PR #2658, conventions.md
§2.3 and §5 item 4, tools.md §0 P5.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def mask_dtype(default: torch.dtype = torch.float32) -> torch.dtype:
    return torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else default


def prepare_decoder_mask(attention_mask: Tensor, dtype: torch.dtype) -> Tensor:
    b, t = attention_mask.shape
    min_value = torch.finfo(dtype).min
    future = torch.ones(t, t, dtype=torch.bool, device=attention_mask.device).triu(1)
    causal = torch.zeros(t, t, dtype=dtype).masked_fill(future, min_value)
    padding = torch.zeros(b, 1, 1, t, dtype=dtype).masked_fill(attention_mask[:, None, None, :] == 0, min_value)
    return causal + padding  # expect: MC513 autocast


class DecoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm = nn.RMSNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)
        self.last_weights: Optional[Tensor] = None

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5 + mask
        weights = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        self.last_weights = weights.detach()
        return x + self.o((weights @ v).transpose(1, 2).reshape(b, t, c))


class ChatDecoder(nn.Module):
    def __init__(self, vocab: int = 60, dim: int = 32, heads: int = 4, depth: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(DecoderLayer(dim, heads) for _ in range(depth))
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        mask = prepare_decoder_mask(attention_mask, mask_dtype())
        x = self.embed(input_ids)
        for layer in self.layers:
            x = layer(x, mask)
        return self.lm_head(x)


def main() -> None:
    torch.manual_seed(0)
    model = ChatDecoder().eval()
    ids = torch.tensor([[0, 0, 0, 14, 7, 33], [21, 5, 9, 18, 2, 40]])
    attention_mask = (ids != 0).long()
    with torch.no_grad(), torch.amp.autocast("cpu", dtype=torch.bfloat16):
        logits = model(ids, attention_mask)
        mask = prepare_decoder_mask(attention_mask, mask_dtype())
    print("mask dtype", mask.dtype, "| -inf cells", int(torch.isinf(mask).sum()), "| NaN logits", bool(logits.isnan().any()))
    w = model.layers[0].last_weights[0, 0].float()
    for row in range(3):
        print(f"padded query {row} of prompt 0: weights", [round(float(p), 3) for p in w[row]])


if __name__ == "__main__":
    main()
