"""Mixed-precision fine-tuning loop: `torch.amp.autocast(device, dtype=amp_dtype)` with a
`torch.amp.GradScaler` (float16 on CUDA, bfloat16 on the CPU), a cross-attention adapter over
retrieved passages with a passage keep mask, and a float32 evaluation pass.

Source: huggingface/lerobot PR #710, conventions.md §2.3 and §3 item 19.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@dataclass
class TrainConfig:
    dim: int = 32
    heads: int = 4
    lr: float = 3e-3
    steps: int = 3
    amp_dtype: torch.dtype = torch.float16 if DEVICE == "cuda" else torch.bfloat16


class PassageCrossAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.o = nn.Linear(dim, dim)

    def forward(self, x: Tensor, passages: Tensor, passage_keep: Tensor) -> Tensor:
        b, t, c = x.shape
        s = passages.shape[1]
        q = self.q(x).view(b, t, self.heads, -1).transpose(1, 2)
        k, v = self.kv(passages).view(b, s, 2, self.heads, -1).permute(2, 0, 3, 1, 4)
        sim = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5
        sim = sim.masked_fill(~passage_keep[:, None, None, :], torch.finfo(sim.dtype).min)
        attn = sim.float().softmax(dim=-1).to(v.dtype)
        return self.o((attn @ v).transpose(1, 2).reshape(b, t, c))


class Reader(nn.Module):
    def __init__(self, cfg: TrainConfig) -> None:
        super().__init__()
        self.inp = nn.Linear(8, cfg.dim)
        self.cross = PassageCrossAttention(cfg.dim, cfg.heads)
        self.out = nn.Linear(cfg.dim, 1)

    def forward(self, x: Tensor, passages: Tensor, passage_keep: Tensor) -> Tensor:
        h = self.inp(x)
        h = h + self.cross(h, passages, passage_keep)
        return self.out(h).squeeze(-1)


def main() -> None:
    torch.manual_seed(0)
    cfg = TrainConfig()
    model = Reader(cfg).to(DEVICE)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    scaler = torch.amp.GradScaler(DEVICE, enabled=cfg.amp_dtype == torch.float16)
    x, y = torch.randn(4, 5, 8, device=DEVICE), torch.randn(4, 5, device=DEVICE)
    passages = torch.randn(4, 6, cfg.dim, device=DEVICE)
    passage_keep = torch.arange(6, device=DEVICE)[None, :] < torch.tensor([6, 4, 2, 5], device=DEVICE)[:, None]
    with torch.no_grad():
        before = model(x, passages, passage_keep)
        junk = passages.masked_fill(~passage_keep[..., None], 9.0)
        print("float32: padded passages move the output by", (model(x, junk, passage_keep) - before).abs().max().item())
    for step in range(cfg.steps):
        try:
            with torch.amp.autocast(DEVICE, dtype=cfg.amp_dtype):
                loss = F.mse_loss(model(x, passages, passage_keep).float(), y)
        except RuntimeError as err:
            print(f"step {step} under autocast({cfg.amp_dtype}) failed:", str(err).strip())
            return
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
