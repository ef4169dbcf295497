"""Intent classifier whose masking is configured by a frozen `@dataclass` (`pad_id`,
`fill_value`), with a typed eager attention module and `register_buffer(persistent=False)`
for the position ids.

Source: seed self_attention_mask_guide.txt §3 (常见误区), conventions.md §1 cheat-sheet
(values used in the wild) and §3 item 20 (TransformerLensOrg/TransformerLens PR #366).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn


@dataclass(frozen=True)
class MaskConfig:
    pad_id: int = 0
    fill_value: float = -1e-9  # expect: MC516 fieldvalue


@dataclass(frozen=True)
class ModelConfig:
    vocab: int = 70
    dim: int = 32
    heads: int = 4
    max_len: int = 24
    intents: int = 4
    mask: MaskConfig = field(default_factory=MaskConfig)


class SelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.proj = nn.Linear(cfg.dim, cfg.dim)

    def forward(self, x: Tensor, key_keep: Tensor) -> Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.cfg.heads, -1).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / (c // self.cfg.heads) ** 0.5
        scores = scores.masked_fill(~key_keep[:, None, None, :], self.cfg.mask.fill_value)  # also: MC516
        return self.proj((scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, t, c))


class IntentClassifier(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.dim)
        self.pos = nn.Embedding(cfg.max_len, cfg.dim)
        self.register_buffer("position_ids", torch.arange(cfg.max_len), persistent=False)
        self.attn = SelfAttention(cfg)
        self.norm = nn.LayerNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.intents)

    def forward(self, input_ids: Tensor) -> Tensor:
        keep = input_ids != self.cfg.mask.pad_id
        x = self.tok(input_ids) + self.pos(self.position_ids[: input_ids.shape[1]])
        x = self.norm(x + self.attn(x, keep))
        w = keep.unsqueeze(-1).float()
        return self.head((x * w).sum(1) / w.sum(1).clamp_min(1.0))


def main() -> None:
    torch.manual_seed(0)
    model = IntentClassifier(ModelConfig()).eval()
    utterances = [[12, 5, 33, 8], [40, 2], [9, 9, 61, 17, 28, 3, 44]]
    ids = torch.zeros(len(utterances), 7, dtype=torch.long)
    for i, u in enumerate(utterances):
        ids[i, : len(u)] = torch.tensor(u)
    with torch.no_grad():
        logits = model(ids)
        for i, u in enumerate(utterances):
            alone = model(torch.tensor([u]))
            print(f"utterance {i}: batched vs alone max diff {(logits[i] - alone[0]).abs().max().item():.3g}")
        wider = torch.cat([ids, torch.zeros(len(utterances), 5, dtype=torch.long)], dim=1)
        print("five more pad ids move the logits by", round((model(wider) - logits).abs().max().item(), 6))


if __name__ == "__main__":
    main()
