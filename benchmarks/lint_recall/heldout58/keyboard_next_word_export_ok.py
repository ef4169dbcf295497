"""Next-word suggestions for a phone keyboard, exported with torch.export for an on-device runtime.

The keyboard keeps the last 16 word pieces the user typed in the current field and asks the
model for the three most likely next words after every space. The model is a four-layer
causal transformer with a static context so the exported program has fixed shapes; a short
context is left-padded, and the runtime passes its length alongside the pieces.

Source: rasbt/LLMs-from-scratch#1061 (conventions.md §3 item 14), pytorch/pytorch#29546 (item 9), §5 item 1
"""

import argparse
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD = 0


@dataclass(frozen=True)
class KeyboardConfig:
    vocab: int = 4096
    context: int = 16
    dim: int = 96
    heads: int = 4
    layers: int = 4
    suggestions: int = 3


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: KeyboardConfig):
        super().__init__()
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim, bias=False)
        self.proj = nn.Linear(cfg.dim, cfg.dim, bias=False)
        causal = torch.tril(torch.ones(cfg.context, cfg.context, dtype=torch.bool))
        self.register_buffer("causal", causal, persistent=False)

    def forward(self, x, keep):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        allowed = self.causal[:t, :t] & keep[:, None, None, :]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        return self.proj(out.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, cfg: KeyboardConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.dim)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.dim)
        self.mlp = nn.Sequential(nn.Linear(cfg.dim, 3 * cfg.dim), nn.SiLU(), nn.Linear(3 * cfg.dim, cfg.dim))

    def forward(self, x, keep):
        x = x + self.attn(self.ln1(x), keep)
        return x + self.mlp(self.ln2(x))


class NextWordModel(nn.Module):
    def __init__(self, cfg: KeyboardConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.dim)
        self.pos = nn.Embedding(cfg.context, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.ln = nn.LayerNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, pieces, lengths):
        t = pieces.size(1)
        keep = torch.arange(t, device=pieces.device)[None, :] >= (t - lengths)[:, None]
        pos = (keep.long().cumsum(-1) - 1).clamp(min=0)
        x = self.embed(pieces) + self.pos(pos)
        for block in self.blocks:
            x = block(x, keep)
        return self.head(self.ln(x))


class SuggestionProgram(nn.Module):
    def __init__(self, model: NextWordModel):
        super().__init__()
        self.model = model

    def forward(self, pieces, lengths):
        logits = self.model(pieces, lengths)[:, -1]
        probs, ids = logits.softmax(-1).topk(self.model.cfg.suggestions, dim=-1)
        return ids, probs


def left_pad(histories, context):
    pieces = torch.full((len(histories), context), PAD, dtype=torch.long)
    lengths = torch.zeros(len(histories), dtype=torch.long)
    for i, h in enumerate(histories):
        h = h[-context:]
        pieces[i, context - len(h):] = torch.tensor(h)
        lengths[i] = len(h)
    return pieces, lengths


def train(model, corpus, steps=300, batch=32, lr=3e-3, generator=None):
    cfg = model.cfg
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        starts = torch.randint(0, corpus.numel() - cfg.context - 1, (batch,), generator=generator)
        lengths = torch.randint(2, cfg.context + 1, (batch,), generator=generator)
        windows = torch.stack([corpus[s:s + cfg.context + 1] for s in starts.tolist()])
        pad = torch.arange(cfg.context + 1)[None, :] < (cfg.context + 1 - lengths - 1)[:, None]
        windows = windows.masked_fill(pad, PAD)
        logits = model(windows[:, :-1], lengths)
        target = windows[:, 1:].masked_fill(pad[:, :-1], -100)
        loss = F.cross_entropy(logits.reshape(-1, cfg.vocab), target.reshape(-1), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss.item()


def export_program(model, path):
    program = SuggestionProgram(model.eval())
    example = left_pad([[17, 402, 9]], model.cfg.context)
    exported = torch.export.export(program, example)
    try:
        from executorch.exir import to_edge

        to_edge(exported).to_executorch().save(path)
    except ImportError:
        torch.export.save(exported, path.replace(".pte", ".pt2"))
    return exported


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--out", default="keyboard_next_word.pte")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    corpus = torch.load(args.corpus)
    model = NextWordModel(KeyboardConfig())
    print("loss", train(model, corpus, args.steps))
    exported = export_program(model, args.out)
    ids, probs = exported.module()(*left_pad([[12, 99, 3]], model.cfg.context))
    print(ids.tolist(), probs.tolist())


if __name__ == "__main__":
    main()
