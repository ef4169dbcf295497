"""Field-interaction attention for ad click-through-rate prediction, fine-tuned then served int8.

AutoInt-style self-attention over the embedded feature fields of an ad request (user, ad,
placement and context fields). Fields a request does not carry are masked as keys. A short
fine-tuning pass runs on the day's impression log, then the model is dynamically quantized with
torch.ao and traced for the bidding fleet, which scores candidate ads in batches.

Source: seed masked_fill_inplace.txt (注意（原地操作的坑）: 梯度计算风险; 与模型缓冲区的配合)
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

FIELDS = (
    "user_id", "user_segment", "ad_id", "advertiser", "placement",
    "device", "hour", "geo", "query_category", "creative_size",
)
ALWAYS_PRESENT = ("user_id", "ad_id", "placement")
MISSING = 0


@dataclass
class CTRConfig:
    vocab_per_field: int = 1000
    dim: int = 32
    heads: int = 2
    layers: int = 2
    dropout: float = 0.1
    lr: float = 3e-3


class FieldInteraction(nn.Module):
    def __init__(self, cfg: CTRConfig, n_fields: int):
        super().__init__()
        self.heads = cfg.heads
        self.head_dim = cfg.dim // cfg.heads
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.res = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.pair_bias = nn.Parameter(torch.zeros(cfg.heads, n_fields, n_fields))
        self.register_buffer("self_pair", torch.eye(n_fields, dtype=torch.bool), persistent=False)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, present):
        b, f, _ = x.shape
        q, k, v = self.qkv(x).view(b, f, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        bias = self.pair_bias
        bias.masked_fill_(self.self_pair, float("-inf"))  # expect: MC505 parameter
        scores = scores + bias
        scores = scores.masked_fill(~present[:, None, None, :], torch.finfo(scores.dtype).min)
        attn = self.drop(scores.softmax(dim=-1))
        out = (attn @ v).transpose(1, 2).reshape(b, f, -1)
        return F.relu(out + self.res(x))


class AutoIntCTR(nn.Module):
    def __init__(self, cfg: CTRConfig):
        super().__init__()
        n = len(FIELDS)
        self.embed = nn.Embedding(n * cfg.vocab_per_field, cfg.dim)
        self.register_buffer("offsets", torch.arange(n) * cfg.vocab_per_field, persistent=False)
        self.quant = torch.ao.quantization.QuantStub()
        self.dequant = torch.ao.quantization.DeQuantStub()
        self.blocks = nn.ModuleList(FieldInteraction(cfg, n) for _ in range(cfg.layers))
        self.head = nn.Linear(n * cfg.dim, 1)

    def forward(self, field_ids):
        present = field_ids != MISSING
        x = self.embed(field_ids + self.offsets)
        x = x * present.unsqueeze(-1).to(x.dtype)
        for block in self.blocks:
            x = block(x, present)
        return self.dequant(self.head(self.quant(x.flatten(1)))).squeeze(-1)


def synthetic_impressions(n, cfg, generator=None):
    ids = torch.randint(1, cfg.vocab_per_field, (n, len(FIELDS)), generator=generator)
    optional = [i for i, name in enumerate(FIELDS) if name not in ALWAYS_PRESENT]
    drop = torch.rand(n, len(optional), generator=generator) < 0.3
    ids[:, optional] = ids[:, optional].masked_fill(drop, MISSING)
    affinity = ((ids[:, 1] % 7) == (ids[:, 3] % 7)) | ((ids[:, 4] % 5) == 0)
    logit = affinity.float() * 2.0 - 1.5 + 0.3 * (ids[:, 6] % 4 == 0).float()
    clicks = torch.bernoulli(torch.sigmoid(logit), generator=generator)
    return {"field_ids": ids, "clicked": clicks}


def fine_tune(model, log, cfg, steps=200, batch_size=256):
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    model.train()
    n = log["field_ids"].size(0)
    for step in range(steps):
        idx = torch.randint(0, n, (batch_size,))
        logits = model(log["field_ids"][idx])
        loss = F.binary_cross_entropy_with_logits(logits, log["clicked"][idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss.item()


@torch.no_grad()
def evaluate_auc(model, log):
    model.eval()
    scores = model(log["field_ids"])
    labels = log["clicked"].bool()
    pos, neg = scores[labels], scores[~labels]
    return (pos[:, None] > neg[None, :]).float().mean().item()


def export_for_serving(model, example, path):
    model.eval()
    qmodel = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
    with torch.no_grad():
        traced = torch.jit.trace(qmodel, example)
    traced.save(path)
    return qmodel


def score_candidates(model, request, candidates):
    batch = request.unsqueeze(0).repeat(candidates.size(0), 1)
    ad_cols = [FIELDS.index(name) for name in ("ad_id", "advertiser", "creative_size")]
    batch[:, ad_cols] = candidates
    with torch.inference_mode():
        return torch.sigmoid(model(batch))


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--out", default="ctr_int8.pt")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    cfg = CTRConfig()
    gen = torch.Generator().manual_seed(args.seed)
    train_log = synthetic_impressions(20000, cfg, gen)
    test_log = synthetic_impressions(4000, cfg, gen)
    model = AutoIntCTR(cfg)
    loss = fine_tune(model, train_log, cfg, steps=args.steps)
    auc = evaluate_auc(model, test_log)
    qmodel = export_for_serving(model, test_log["field_ids"][:8], args.out)
    print(f"loss {loss:.3f}  auc {auc:.3f}  int8 auc {evaluate_auc(qmodel, test_log):.3f}")
    request = test_log["field_ids"][0]
    candidates = torch.randint(1, cfg.vocab_per_field, (16, 3))
    print(score_candidates(qmodel, request, candidates))


if __name__ == "__main__":
    main()
