"""Music-token GPT as a LightningModule: the additive causal mask is a non-persistent buffer
(`register_buffer(..., persistent=False)`, so checkpoints stay small), hooks for checkpoint
metadata, and `torch.nn.attention.sdpa_kernel` pinned to the MATH backend for reproducibility.

Source: seed self_attention_mask_guide.txt §3 (`generate_causal_mask`), conventions.md §1
(nn.Transformer row) and §2.3, tools.md §0 P4.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

try:
    from lightning import LightningModule
except ImportError:  # minimal stand-in when lightning is missing

    class LightningModule(nn.Module):  # type: ignore[no-redef]
        def log(self, name: str, value: Tensor, **kwargs: Any) -> None:
            print(f"{name}: {float(value.detach()):.4f}")

        def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None: ...


class MusicGPT(LightningModule):
    def __init__(self, vocab: int = 90, dim: int = 32, heads: int = 4, ctx: int = 16) -> None:
        super().__init__()
        self.heads = heads
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(ctx, dim)
        self.ln = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.lm_head = nn.Linear(dim, vocab)
        self.register_buffer("causal_bias", torch.triu(torch.ones(ctx, ctx), diagonal=1) * float("-inf"), persistent=False)  # expect: MC522 buffer

    def forward(self, idx: Tensor) -> Tensor:
        b, t = idx.shape
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        q, k, v = self.qkv(self.ln(x)).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        with sdpa_kernel(SDPBackend.MATH):
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=self.causal_bias[:t, :t])
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, -1))
        x = x + self.mlp(x)
        return self.lm_head(x)

    def training_step(self, batch: Tensor, batch_idx: int) -> Tensor:
        logits = self(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        self.log("train_loss", loss)
        return loss

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["context"] = self.pos.num_embeddings

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def main() -> None:
    torch.manual_seed(0)
    model = MusicGPT()
    print("buffer in state_dict:", "causal_bias" in model.state_dict())
    batch = torch.randint(0, 90, (2, 12))
    opt = model.configure_optimizers()
    loss = model.training_step(batch, 0)
    opt.zero_grad()
    loss.backward()
    opt.step()
    with torch.no_grad():
        logits = model(batch[:, :8])
        print("NaN share of the logits", torch.isnan(logits).float().mean().item())
        later = batch[:, :8].clone()
        later[:, 6] = (later[:, 6] + 1) % 90
        print("change at 6 moves positions 0-5 by", (model(later)[:, :6] - logits[:, :6]).abs().nan_to_num(0.0).max().item())


if __name__ == "__main__":
    main()
