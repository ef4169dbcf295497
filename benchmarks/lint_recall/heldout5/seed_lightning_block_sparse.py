"""Held-out 5 (seed): a Lightning module for a block-sparse encoder built from the seed guide's recipes.

Source: seed article "解密PyTorch中的Self-Attention Mask机制" (/work/shared/seeds): its `create_block_mask`
(torch.zeros, blocks set to 0, then `mask[mask == 0] = float('-inf')`), its causal mask
`torch.triu(torch.ones(sz, sz) * float('-inf'), diagonal=1)` and its key_padding_mask (True = padding)
next to a tokenizer's attention_mask (1 = real token).
Surroundings: a module-level builder with a constant, a method of a LightningModule, the forward that
feeds nn.MultiheadAttention and an nn.TransformerEncoder, a training step.
"""

import pytorch_lightning as pl
import torch
import torch.nn as nn
import torch.nn.functional as F

NEG_INF = float("-inf")


def block_sparse_bias(seq_len: int, block: int) -> torch.Tensor:
    bias = torch.zeros(seq_len, seq_len)
    for start in range(0, seq_len, block):
        bias[start:start + block, start:start + block] = 0
    bias[bias == 0] = NEG_INF  # expect: MC504 constant
    return bias


class BlockSparseEncoder(pl.LightningModule):
    def __init__(self, vocab: int, d_model: int = 256, n_heads: int = 4, block: int = 16,
                 lr: float = 3e-4) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.embed = nn.Embedding(vocab, d_model)
        self.attn = nn.MultiheadAttention(d_model, n_heads, batch_first=True)
        layer = nn.TransformerEncoderLayer(d_model, n_heads, 4 * d_model, batch_first=True)
        self.context = nn.TransformerEncoder(layer, num_layers=2)
        self.head = nn.Linear(d_model, vocab)
        self.block = block

    def _lookahead(self, n: int) -> torch.Tensor:
        return torch.triu(torch.full((n, n), NEG_INF, device=self.device))  # expect: MC503 method

    def forward(self, tokens: torch.Tensor, attention_mask: torch.Tensor, causal: bool = False) -> torch.Tensor:
        x = self.embed(tokens)
        n = x.size(1)
        bias = self._lookahead(n) if causal else block_sparse_bias(n, self.block).to(x.device)
        out, _ = self.attn(x, x, x, attn_mask=bias, key_padding_mask=attention_mask)  # expect: MC502 method
        keep = attention_mask.bool()
        out = self.context(out, src_key_padding_mask=keep)  # expect: MC511 method
        return self.head(out)

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        logits = self(batch["input_ids"], batch["attention_mask"], causal=True)
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), batch["input_ids"][:, 1:].flatten())
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)
