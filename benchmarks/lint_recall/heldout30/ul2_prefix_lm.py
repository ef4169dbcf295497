"""UL2-style mixture of denoisers on a decoder-only model: the [S2S] mode as a prefix LM.

Each example is split into an input prefix and a target; the prefix is read bidirectionally and
the target causally (the T5 / UL2 "non-causal decoder"). The collator pads on the right and
returns `input_ids`, an int64 `attention_mask` (1 = real token), `prefix_lengths` and labels
restricted to the target.

Source: seed self_attention_mask_guide.txt §2; seed masked_fill_inplace.txt; conventions.md §1
"""
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD_ID, S2S_ID = 0, 1


@dataclass
class DenoiserConfig:
    mode: str = "[S2S]"
    min_prefix_frac: float = 0.25
    max_prefix_frac: float = 0.75


def collate(examples, cfg: DenoiserConfig, rng: random.Random):
    rows, prefix_lengths, labels = [], [], []
    for tokens in examples:
        cut = max(1, int(len(tokens) * rng.uniform(cfg.min_prefix_frac, cfg.max_prefix_frac)))
        row = [S2S_ID] + tokens
        rows.append(row)
        prefix_lengths.append(cut + 1)
        labels.append([-100] * (cut + 1) + tokens[cut:])
    width = max(map(len, rows))
    input_ids = torch.tensor([r + [PAD_ID] * (width - len(r)) for r in rows])
    attention_mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows], dtype=torch.long)
    labels = torch.tensor([lab + [-100] * (width - len(lab)) for lab in labels])
    return {"input_ids": input_ids, "attention_mask": attention_mask,
            "prefix_lengths": torch.tensor(prefix_lengths), "labels": labels}


def prefix_lm_mask(prefix_lengths, seq_len):
    pos = torch.arange(seq_len)
    causal = pos[None, :, None] >= pos[None, None, :]
    in_prefix = pos[None, :] < prefix_lengths[:, None]
    return causal | (in_prefix[:, :, None] & in_prefix[:, None, :])


class NonCausalDecoderLayer(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.o = nn.Linear(d_model, d_model, bias=False)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, x, allowed, attention_mask):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.n_heads, -1).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
        neg = torch.finfo(scores.dtype).min
        scores = scores.masked_fill(~allowed[:, None], neg)
        key_keep = attention_mask[:, None, None, :].to(torch.bool)
        scores = scores.masked_fill(key_keep, neg)  # expect: MC519 ul2
        x = x + self.o((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class PrefixLM(nn.Module):
    def __init__(self, vocab=50, d_model=32, n_heads=4, n_layers=2, max_len=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.layers = nn.ModuleList(NonCausalDecoderLayer(d_model, n_heads) for _ in range(n_layers))
        self.lm_head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, input_ids, attention_mask, prefix_lengths, labels=None):
        t = input_ids.shape[1]
        allowed = prefix_lm_mask(prefix_lengths, t)
        h = self.embed(input_ids) + self.pos(torch.arange(t))
        for layer in self.layers:
            h = layer(h, allowed, attention_mask)
        logits = self.lm_head(h)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)
        return logits, loss


if __name__ == "__main__":
    torch.manual_seed(0)
    batch = collate([[7, 8, 9, 10, 11, 12], [20, 21, 22, 23], [30, 31, 32, 33, 34, 35, 36, 37]],
                    DenoiserConfig(), random.Random(0))
    model = PrefixLM().eval()
    with torch.no_grad():
        logits, loss = model(**batch)
    print("prefix_lengths", batch["prefix_lengths"].tolist())
    print("attention_mask", batch["attention_mask"].tolist())
    print("loss", round(loss.item(), 4))
