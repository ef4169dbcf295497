"""Math word problem solver (Math23K / MAWPS style): problem text to a prefix-notation equation.

Numbers in the problem are replaced by slots ``N0 N1 ...``; the decoder writes the equation over
operators, slots and constants. Configuration is an OmegaConf YAML tree as Hydra composes it
(``model``, ``data``, ``trainer`` groups), read attribute-style by ``run(cfg)``. Answer accuracy
evaluates the predicted prefix expression.

Source: pytorch/pytorch#29546 (conventions.md section 3 item 9), rasbt/LLMs-from-scratch#1061 (item 14), conventions.md section 1 (direction cheat-sheet)
"""
from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F
import yaml

try:
    from omegaconf import OmegaConf
except ImportError:
    OmegaConf = None

CONFIG_YAML = """
model: {d_model: 64, n_heads: 4, enc_layers: 2, dec_layers: 2, dropout: 0.1}
data: {max_src: 40, max_tgt: 16, n_slots: 4}
trainer: {lr: 5.0e-4, steps: 4, seed: 0}
"""
OPS = ["<pad>", "<bos>", "<eos>", "+", "-", "*", "/", "1", "100", "N0", "N1", "N2", "N3"]
OP_ID = {tok: i for i, tok in enumerate(OPS)}


def load_config(text: str = CONFIG_YAML):
    raw = yaml.safe_load(text)
    if OmegaConf is not None:
        return OmegaConf.create(raw)
    return SimpleNamespace(**{k: SimpleNamespace(**v) for k, v in raw.items()})


def eval_prefix(tokens: list[str], numbers: list[float]) -> float:
    stack = []
    for tok in reversed(tokens):
        if tok in "+-*/":
            a, b = stack.pop(), stack.pop()
            stack.append({"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else float("nan")}[tok])
        else:
            stack.append(numbers[int(tok[1:])] if tok.startswith("N") else float(tok))
    return stack[-1] if stack else float("nan")


class Seq2Eq(nn.Module):
    def __init__(self, mcfg, dcfg, src_vocab=500):
        super().__init__()
        d, self.h = mcfg.d_model, mcfg.n_heads
        self.src_emb = nn.Embedding(src_vocab, d, padding_idx=0)
        self.tgt_emb = nn.Embedding(len(OPS), d, padding_idx=0)
        self.src_pos = nn.Embedding(dcfg.max_src, d)
        self.tgt_pos = nn.Embedding(dcfg.max_tgt, d)
        enc = nn.TransformerEncoderLayer(d, self.h, 2 * d, mcfg.dropout, batch_first=True)
        self.encoder = nn.TransformerEncoder(enc, mcfg.enc_layers, enable_nested_tensor=False)
        self.self_qkv = nn.ModuleList(nn.Linear(d, 3 * d) for _ in range(mcfg.dec_layers))
        self.cross_q = nn.ModuleList(nn.Linear(d, d) for _ in range(mcfg.dec_layers))
        self.cross_kv = nn.ModuleList(nn.Linear(d, 2 * d) for _ in range(mcfg.dec_layers))
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(2 * mcfg.dec_layers))
        self.out = nn.Linear(d, len(OPS))

    def split(self, x):
        b, t, d = x.shape
        return x.view(b, t, self.h, d // self.h).transpose(1, 2)

    def merge(self, x):
        return x.transpose(1, 2).flatten(2)

    def forward(self, src, tgt_in):
        src_pad = src == 0
        memory = self.encoder(self.src_emb(src) + self.src_pos.weight[: src.size(1)], src_key_padding_mask=src_pad)
        t = tgt_in.size(1)
        y = self.tgt_emb(tgt_in) + self.tgt_pos.weight[:t]
        tgt_keep = tgt_in != OP_ID["<pad>"]
        causal = torch.ones(t, t, dtype=torch.bool, device=y.device).tril()
        self_mask = causal & tgt_keep[:, None, None, :]
        cross_mask = ~src_pad[:, None, None, :]
        for i, (qkv, cq, ckv) in enumerate(zip(self.self_qkv, self.cross_q, self.cross_kv)):
            q, k, v = map(self.split, qkv(self.norms[2 * i](y)).chunk(3, -1))
            y = y + self.merge(F.scaled_dot_product_attention(q, k, v, attn_mask=self_mask))
            q = self.split(cq(self.norms[2 * i + 1](y)))
            k, v = map(self.split, ckv(memory).chunk(2, -1))
            y = y + self.merge(F.scaled_dot_product_attention(q, k, v, attn_mask=cross_mask))
        return self.out(y)

    @torch.no_grad()
    def solve(self, src, max_len=8):
        out = torch.full((src.size(0), 1), OP_ID["<bos>"], dtype=torch.long)
        for _ in range(max_len):
            nxt = self(src, out)[:, -1].argmax(-1, keepdim=True)
            out = torch.cat([out, nxt], 1)
        return [[OPS[i] for i in row[1:] if i > 2] for row in out.tolist()]


def make_batch(cfg, n=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, 500, (n, cfg.data.max_src), generator=g)
    src_len = torch.randint(10, cfg.data.max_src, (n,), generator=g)
    src = src * (torch.arange(cfg.data.max_src)[None] < src_len[:, None])
    eqs = [["+", "N0", "N1"], ["*", "N0", "-", "N1", "N2"], ["/", "N0", "100"]]
    tgt = torch.zeros(n, cfg.data.max_tgt, dtype=torch.long)
    for i in range(n):
        ids = [OP_ID["<bos>"]] + [OP_ID[x] for x in eqs[i % len(eqs)]] + [OP_ID["<eos>"]]
        tgt[i, : len(ids)] = torch.tensor(ids)
    return src, tgt


def run(cfg):
    torch.manual_seed(cfg.trainer.seed)
    model = Seq2Eq(cfg.model, cfg.data)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.trainer.lr)
    src, tgt = make_batch(cfg)
    for step in range(cfg.trainer.steps):
        model.train()
        logits = model(src, tgt[:, :-1])
        loss = F.cross_entropy(logits.transpose(1, 2), tgt[:, 1:], ignore_index=OP_ID["<pad>"])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    pred = model.solve(src[:2])
    print(f"loss {loss.item():.4f}", pred, eval_prefix(["+", "N0", "N1"], [3.0, 4.0]))
    return loss.item()


if __name__ == "__main__":
    run(load_config())
