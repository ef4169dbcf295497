"""Text classifier as a LightningModule, with a TorchScript helper for the padding and the
precision taken from the hyper-parameters (float32 for training, float16 for serving).

Source: NVIDIA/apex#1052 and #1105, facebookresearch/fairseq#3575, conventions.md §2.3
and §3 item 18, tools.md §0 P5.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

import torch
from torch import Tensor, nn

try:
    from lightning import LightningModule
except ImportError:  # lightning is not installed here: the little of it this file uses

    class LightningModule(nn.Module):  # type: ignore[no-redef]
        def __init__(self) -> None:
            super().__init__()
            self.logged: dict[str, float] = {}

        def log(self, name: str, value: Tensor, prog_bar: bool = False) -> None:
            self.logged[name] = float(value.detach())


@dataclass
class HParams:
    vocab: int = 100
    dim: int = 32
    heads: int = 4
    classes: int = 3
    pad_id: int = 0
    lr: float = 1e-3
    precision: torch.dtype = torch.float32


@torch.jit.script
def mask_padding(
    scores: Tensor,
    key_pad: Tensor,
    neg: float = -1e9,  # expect: MC501 jitdefault
) -> Tensor:
    return scores.masked_fill(key_pad[:, None, None, :], neg)  # also: MC501


class Classifier(LightningModule):
    def __init__(self, hp: HParams) -> None:
        super().__init__()
        self.hp = hp
        self.embed = nn.Embedding(hp.vocab, hp.dim, padding_idx=hp.pad_id)
        self.qkv = nn.Linear(hp.dim, 3 * hp.dim)
        self.proj = nn.Linear(hp.dim, hp.dim)
        self.head = nn.Linear(hp.dim, hp.classes)

    def forward(self, input_ids: Tensor, attention_mask: Optional[Tensor] = None) -> Tensor:
        if attention_mask is None:
            attention_mask = (input_ids != self.hp.pad_id).long()
        b, t = input_ids.shape
        x = self.embed(input_ids).to(dtype=self.hp.precision)
        q, k, v = self.qkv(x).view(b, t, 3, self.hp.heads, -1).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        scores = mask_padding(scores, attention_mask == 0)
        y = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, t, -1)
        y = self.proj(y)
        keep = attention_mask[..., None].to(y.dtype)
        pooled = (y * keep).sum(1) / keep.sum(1).clamp(min=1)
        return self.head(pooled)

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        logits = self(batch["input_ids"], batch["attention_mask"])
        loss = nn.functional.cross_entropy(logits.float(), batch["labels"])
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=self.hp.lr)


def main() -> None:
    torch.manual_seed(0)
    hp = HParams()
    ids = torch.tensor([[5, 17, 42, 8, 0, 0], [9, 3, 0, 0, 0, 0], [11, 12, 13, 14, 15, 16]])
    batch = {"input_ids": ids, "attention_mask": (ids != hp.pad_id).long(), "labels": torch.tensor([0, 2, 1])}
    model = Classifier(hp)
    opt = model.configure_optimizers()
    for step in range(5):
        loss = model.training_step(batch, step)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("float32 train_loss", round(model.logged["train_loss"], 4))

    serving = Classifier(replace(hp, precision=torch.float16))
    serving.load_state_dict(model.state_dict())
    serving.to(dtype=torch.float16).eval()
    model.eval()
    with torch.no_grad():
        ref = model(ids, batch["attention_mask"])
        try:
            out = serving(ids, batch["attention_mask"]).float()
        except RuntimeError as err:
            print("float16 forward failed:", str(err).strip().splitlines()[-1])
            return
    print("float16 vs float32 logits, max diff", (out - ref).abs().max().item())


if __name__ == "__main__":
    main()
