"""A config-driven little causal LM: every knob lives in `ModelConfig`.

The model reads the causal flag, the pad id, the masking value and the dtype from the
dataclass; `ModelConfig.from_dict` is how the training script loads it from YAML/JSON.
Run with `--dtype float16` on a GPU box, float32 elsewhere.

Source: NVIDIA/apex#1052 and #1105, facebookresearch/fairseq#3575, conventions.md §2.3 and §3 item 18
"""
import argparse
from dataclasses import asdict, dataclass, fields

import torch
import torch.nn as nn


@dataclass
class ModelConfig:
    vocab_size: int = 64
    d_model: int = 32
    n_heads: int = 4
    n_layers: int = 2
    max_len: int = 32
    pad_id: int = 0
    causal: bool = True
    dtype: str = "float32"
    mask_value: float = -1e9  # expect: MC501 config

    @classmethod
    def from_dict(cls, d):
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


class SelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x, pad):
        b, t, d = x.shape
        h = self.cfg.n_heads
        q, k, v = self.qkv(x).view(b, t, 3, h, d // h).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) * (d // h) ** -0.5
        hide = pad[:, None, None, :]
        if self.cfg.causal:
            hide = hide | torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(hide, self.cfg.mask_value)  # also: MC501
        y = scores.softmax(-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class ConfigLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
        self.pos = nn.Embedding(cfg.max_len, cfg.d_model)
        self.blocks = nn.ModuleList(SelfAttention(cfg) for _ in range(cfg.n_layers))
        self.norm = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size)

    def forward(self, ids):
        pad = ids == self.cfg.pad_id
        x = self.tok(ids) + self.pos(torch.arange(ids.size(1), device=ids.device))
        for block in self.blocks:
            x = x + block(self.norm(x), pad)
        return self.head(self.norm(x))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    args = parser.parse_args()
    cfg = ModelConfig.from_dict({"n_layers": 2, "causal": True, "dtype": args.dtype, "unused": 1})
    torch.manual_seed(0)
    model = ConfigLM(cfg).to(getattr(torch, cfg.dtype)).eval()
    ids = torch.tensor([[5, 9, 3, 7, 2], [4, 8, 6, 0, 0]])
    with torch.no_grad():
        logits = model(ids)
    print(asdict(cfg))
    print("logits", tuple(logits.shape), logits.dtype, "finite:", bool(torch.isfinite(logits).all()))


if __name__ == "__main__":
    main()
