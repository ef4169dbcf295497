"""Held-out 7: a PyTorch Lightning translation module around nn.Transformer, with a label-smoothed
loss and a greedy decoder.

Source: pytorch/pytorch#29546 and rasbt/LLMs-from-scratch#1061 (look-ahead mask in the wrong
triangle for its convention: here a `tril(...).bool()` keep-mask handed to nn.Transformer's
`tgt_mask`, which means True = masked), conventions.md section 1 (a tokenizer attention_mask passed
straight as `*_key_padding_mask`, here named `src_attention_mask`), the seed article's gradient
warning on `masked_fill_` (here on the output of `log_softmax`, which autograd saves).
Surroundings: LightningModule hooks, a static mask helper, keyword hand-off to nn.Transformer,
in-place fill inside a loss helper.
"""

from typing import Any, Dict

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn


class TranslationModule(pl.LightningModule):
    def __init__(self, src_vocab: int, tgt_vocab: int, d_model: int = 512, nhead: int = 8,
                 pad_id: int = 0, label_smoothing: float = 0.1, lr: float = 5e-4) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.src_embed = nn.Embedding(src_vocab, d_model, padding_idx=pad_id)
        self.tgt_embed = nn.Embedding(tgt_vocab, d_model, padding_idx=pad_id)
        self.transformer = nn.Transformer(d_model, nhead, num_encoder_layers=3, num_decoder_layers=3,
                                          batch_first=True)
        self.generator = nn.Linear(d_model, tgt_vocab)

    @staticmethod
    def look_ahead(size: int, device: torch.device) -> torch.Tensor:
        return torch.tril(torch.ones(size, size, device=device)).bool()  # expect: MC521|MC511 method

    def forward(self, src: torch.Tensor, src_attention_mask: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        tgt_mask = self.look_ahead(tgt_in.size(1), tgt_in.device)
        tgt_pad = tgt_in == self.hparams.pad_id
        hidden = self.transformer(
            self.src_embed(src),
            self.tgt_embed(tgt_in),
            tgt_mask=tgt_mask,  # also: MC521
            src_key_padding_mask=src_attention_mask == 0,
            tgt_key_padding_mask=tgt_pad,
            memory_key_padding_mask=src_attention_mask,  # expect: MC502 keyword
        )
        return self.generator(hidden)

    def smoothed_nll(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        lprobs = F.log_softmax(logits, dim=-1)
        pad = target.eq(self.hparams.pad_id).unsqueeze(-1)
        lprobs.masked_fill_(pad, 0.0)  # expect: MC505 method
        nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
        smooth = -lprobs.mean(dim=-1)
        eps = self.hparams.label_smoothing
        return ((1.0 - eps) * nll + eps * smooth).sum() / (~pad).sum()

    def training_step(self, batch: Dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        logits = self(batch["input_ids"], batch["attention_mask"], batch["labels"][:, :-1])
        loss = self.smoothed_nll(logits, batch["labels"][:, 1:])
        self.log("train/loss", loss, prog_bar=True)
        return loss

    @torch.no_grad()
    def greedy(self, src: torch.Tensor, src_attention_mask: torch.Tensor, bos: int, max_len: int = 64) -> torch.Tensor:
        out = torch.full((src.size(0), 1), bos, dtype=torch.long, device=src.device)
        for _ in range(max_len):
            nxt = self(src, src_attention_mask, out)[:, -1].argmax(-1, keepdim=True)
            out = torch.cat([out, nxt], dim=1)
        return out

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr, betas=(0.9, 0.98))
