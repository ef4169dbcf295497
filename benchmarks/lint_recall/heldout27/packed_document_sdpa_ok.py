"""Packed pre-training batches for a bidirectional encoder: several documents per row, a
document mask built outside torch.compile, SDPA under `sdpa_kernel`, and a cross-check against
FlexAttention with a document `mask_mod`.

Source: seed self_attention_mask_guide.txt §6 (`create_block_mask`) and §3, conventions.md §1
(FlexAttention row) and §2.8.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")


@dataclass
class PackConfig:
    dim: int = 32
    heads: int = 4
    mask_dtype: torch.dtype = torch.float32


@torch.compiler.disable
def document_bias(doc_lens: list[int], dtype: torch.dtype = torch.float32) -> Tensor:
    n = sum(doc_lens)
    bias = torch.ones(n, n, dtype=dtype)
    start = 0
    for length in doc_lens:
        bias[start : start + length, start : start + length] = 0
        start += length
    bias[bias == 1] = float("-inf")
    return bias


def document_ids(doc_lens: list[int]) -> Tensor:
    return torch.repeat_interleave(torch.arange(len(doc_lens)), torch.tensor(doc_lens))


class PackedAttention(nn.Module):
    def __init__(self, cfg: PackConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)

    def heads(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        b, n, _ = x.shape
        return self.qkv(x).view(b, n, 3, self.cfg.heads, -1).permute(2, 0, 3, 1, 4).unbind(0)

    def forward(self, x: Tensor, doc_lens: list[int]) -> Tensor:
        q, k, v = self.heads(x)
        bias = document_bias(doc_lens, self.cfg.mask_dtype)
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)

    def forward_flex(self, x: Tensor, doc_lens: list[int]) -> Tensor:
        q, k, v = self.heads(x)
        docs = document_ids(doc_lens)

        def same_document(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            return docs[q_idx] == docs[kv_idx]

        block_mask = create_block_mask(same_document, None, None, q.shape[-2], k.shape[-2], device="cpu")
        return flex_attention(q, k, v, block_mask=block_mask)


def main() -> None:
    torch.manual_seed(0)
    cfg = PackConfig()
    layer = PackedAttention(cfg)
    doc_lens = [5, 3, 8, 4]
    x = torch.randn(1, sum(doc_lens), cfg.dim)
    with torch.no_grad():
        out = layer(x, doc_lens)
        ref = layer.forward_flex(x, doc_lens)
        print("SDPA vs FlexAttention, max diff", round((out - ref).abs().max().item(), 6))
        print("share of exact-zero outputs", (out == 0).float().mean().item())
        y = x.clone()
        y[:, 16:] = torch.randn(1, 4, cfg.dim)
        moved = (layer(y, doc_lens)[..., :16, :] - out[..., :16, :]).abs().max().item()
        print("changing the last document moves the others by", moved)


if __name__ == "__main__":
    main()
