"""Character-level GPT as a LightningModule whose causal bias comes from a TorchScript
function (dtype and device passed as typed arguments), with right padding in the batches.

Source: seed self_attention_mask_guide.txt §3 (`generate_causal_mask`), conventions.md §1
(nn.Transformer row), §2.3 and §3 item 5 (pytorch/pytorch#103749).
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

try:
    from lightning import LightningModule
except ImportError:  # stand-in for lightning.LightningModule

    class LightningModule(nn.Module):  # type: ignore[no-redef]
        def log(self, name: str, value: Tensor, **kwargs: object) -> None:
            print(f"{name}: {float(value.detach()):.4f}")


@torch.jit.script
def causal_bias(n: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    return torch.triu(torch.full((n, n), float("-inf"), dtype=dtype, device=device), diagonal=1)


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor, key_keep: Optional[Tensor] = None) -> Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) * (c // self.heads) ** -0.5
        scores = scores + causal_bias(t, scores.dtype, scores.device)
        if key_keep is not None:
            scores = scores.masked_fill(~key_keep[:, None, None, :], torch.finfo(scores.dtype).min)
        y = scores.softmax(dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class CharGPT(LightningModule):
    def __init__(self, vocab: int = 40, dim: int = 32, heads: int = 4, block: int = 16) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(block, dim)
        self.ln1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx: Tensor, key_keep: Optional[Tensor] = None) -> Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        x = x + self.attn(self.ln1(x), key_keep)
        x = x + self.mlp(self.ln2(x))
        return self.lm_head(x)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        idx, keep = batch
        logits = self(idx[:, :-1], keep[:, :-1])
        targets = idx[:, 1:].masked_fill(~keep[:, 1:], -100)
        loss = F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=-100)
        self.log("train_loss", loss)
        return loss


def main() -> None:
    torch.manual_seed(0)
    model = CharGPT()
    idx = torch.randint(1, 40, (3, 9))
    keep = torch.tensor([[True] * 9, [True] * 6 + [False] * 3, [True] * 4 + [False] * 5])
    model.training_step((idx, keep), 0)
    with torch.no_grad():
        logits = model(idx, keep)
        print("NaN logits at positions", sorted({int(p) for p in torch.isnan(logits).any(-1).nonzero()[:, 1]}))
        later = idx.clone()
        later[0, 5] = (later[0, 5] + 7) % 40
        moved = (model(later, keep)[0, :5] - logits[0, :5]).abs().nan_to_num(0.0).amax(-1)
        print("positions 0-4 moved by a change at 5:", [round(float(m), 4) for m in moved])


if __name__ == "__main__":
    main()
