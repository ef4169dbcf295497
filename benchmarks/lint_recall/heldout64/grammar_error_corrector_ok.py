"""Grammatical error correction (BEA-2019 / W&I+LOCNESS style) as a seq2seq LightningModule.

The encoder is a stack of ``nn.MultiheadAttention`` layers over the learner sentence; the decoder
writes the corrected sentence with ``F.scaled_dot_product_attention`` for both its self- and
cross-attention. Both sides are tokenised by ``GecTokenizer`` which returns Hugging Face style
``input_ids`` / ``attention_mask`` dicts. The decoder can be compiled (``compile_decoder``).

Source: conventions.md section 1 (direction cheat-sheet; MHA and SDPA rows), section 4.1 (SDPA docstring note on inverting MHA masks), section 5 item 1; seed self_attention_mask_guide.txt section 2, section 7 Q1
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    from lightning import LightningModule
except ImportError:
    class LightningModule(nn.Module):
        def log(self, *args, **kwargs):
            pass

HPARAMS = {"vocab": 300, "d_model": 64, "heads": 4, "enc_layers": 2, "dec_layers": 2, "lr": 3e-4,
           "label_smoothing": 0.1, "compile_decoder": False, "max_len": 64}
PAD, BOS, EOS = 0, 1, 2


class GecTokenizer:
    def __init__(self, vocab: int):
        self.vocab = vocab

    def word_id(self, word):
        return 3 + sum((i + 1) * ord(c) for i, c in enumerate(word)) % (self.vocab - 3)

    def __call__(self, sentences, add_bos=False):
        rows = [[self.word_id(w) for w in s.lower().split()] + [EOS] for s in sentences]
        if add_bos:
            rows = [[BOS] + r for r in rows]
        width = max(map(len, rows))
        ids = torch.full((len(rows), width), PAD, dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(r)
        return {"input_ids": ids, "attention_mask": (ids != PAD).long()}


class EncoderLayer(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.mha = nn.MultiheadAttention(d, h, dropout=0.1, batch_first=True)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.ReLU(), nn.Linear(4 * d, d))
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)

    def forward(self, x, src_pad):
        y, _ = self.mha(x, x, x, key_padding_mask=src_pad, need_weights=False)
        x = self.n1(x + y)
        return self.n2(x + self.ff(x))


class DecoderLayer(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.sa = nn.Linear(d, 3 * d)
        self.sa_o = nn.Linear(d, d)
        self.ca_q = nn.Linear(d, d)
        self.ca_kv = nn.Linear(d, 2 * d)
        self.ca_o = nn.Linear(d, d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.ReLU(), nn.Linear(4 * d, d))
        self.n1, self.n2, self.n3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)

    def heads(self, x):
        b, t, d = x.shape
        return x.view(b, t, self.h, d // self.h).transpose(1, 2)

    def forward(self, y, memory, tgt_keep, src_pad):
        b, t, d = y.shape
        q, k, v = map(self.heads, self.sa(y).chunk(3, -1))
        causal = torch.ones(t, t, dtype=torch.bool, device=y.device).tril()
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=causal & tgt_keep[:, None, None, :])
        y = self.n1(y + self.sa_o(a.transpose(1, 2).reshape(b, t, d)))
        q = self.heads(self.ca_q(y))
        k, v = map(self.heads, self.ca_kv(memory).chunk(2, -1))
        c = F.scaled_dot_product_attention(q, k, v, attn_mask=~src_pad[:, None, None, :])
        y = self.n2(y + self.ca_o(c.transpose(1, 2).reshape(b, t, d)))
        return self.n3(y + self.ff(y))


class GecModel(LightningModule):
    def __init__(self, hp=HPARAMS):
        super().__init__()
        self.hp = hp
        d = hp["d_model"]
        self.embed = nn.Embedding(hp["vocab"], d, padding_idx=PAD)
        self.pos = nn.Embedding(hp["max_len"], d)
        self.encoder = nn.ModuleList(EncoderLayer(d, hp["heads"]) for _ in range(hp["enc_layers"]))
        self.decoder = nn.ModuleList(DecoderLayer(d, hp["heads"]) for _ in range(hp["dec_layers"]))
        self.lm_head = nn.Linear(d, hp["vocab"])
        self.decode_fn = torch.compile(self._decode) if hp["compile_decoder"] else self._decode

    def _embed(self, ids):
        return self.embed(ids) + self.pos(torch.arange(ids.size(1), device=ids.device))

    def encode(self, src):
        src_pad = src["attention_mask"] == 0
        x = self._embed(src["input_ids"])
        for layer in self.encoder:
            x = layer(x, src_pad)
        return x, src_pad

    def _decode(self, tgt_ids, tgt_keep, memory, src_pad):
        y = self._embed(tgt_ids)
        for layer in self.decoder:
            y = layer(y, memory, tgt_keep, src_pad)
        return self.lm_head(y)

    def forward(self, src, tgt):
        memory, src_pad = self.encode(src)
        return self.decode_fn(tgt["input_ids"][:, :-1], tgt["attention_mask"][:, :-1].bool(), memory, src_pad)

    def training_step(self, batch, batch_idx):
        src, tgt = batch
        logits = self(src, tgt)
        labels = tgt["input_ids"][:, 1:].masked_fill(tgt["attention_mask"][:, 1:] == 0, -100)
        loss = F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=-100,
                               label_smoothing=self.hp["label_smoothing"])
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.hp["lr"], betas=(0.9, 0.98))

    @torch.no_grad()
    def correct(self, src, max_len=12):
        memory, src_pad = self.encode(src)
        out = torch.full((memory.size(0), 1), BOS, dtype=torch.long)
        for _ in range(max_len):
            logits = self.decode_fn(out, torch.ones_like(out, dtype=torch.bool), memory, src_pad)
            out = torch.cat([out, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        return out


if __name__ == "__main__":
    torch.manual_seed(0)
    tok = GecTokenizer(HPARAMS["vocab"])
    wrong = ["she go to school every days", "i has a apple", "they was happy yesterday when we arrive"]
    right = ["she goes to school every day", "i have an apple", "they were happy yesterday when we arrived"]
    batch = (tok(wrong), tok(right, add_bos=True))
    model = GecModel()
    opt = model.configure_optimizers()
    model.train()
    for step in range(4):
        loss = model.training_step(batch, step)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"loss after 4 steps: {loss.item():.4f}")
    model.eval()
    print("hyp ids:", model.correct(tok(wrong[:2]))[:, 1:6].tolist())
