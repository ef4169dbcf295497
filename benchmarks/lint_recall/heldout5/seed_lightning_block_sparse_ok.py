"""Held-out 5 twin (seed): the block-sparse Lightning module with its masks built right.

Source: the seed guide's recipes corrected: the block mask starts at -inf and the blocks are opened
with 0, the causal mask keeps the diagonal (diagonal=1), and MHA's padding masks are True at padding.
"""

import pytorch_lightning as pl
import torch
import torch.nn as nn
import torch.nn.functional as F

NEG_INF = float("-inf")


def block_sparse_bias(seq_len: int, block: int) -> torch.Tensor:
    bias = torch.full((seq_len, seq_len), NEG_INF)
    for start in range(0, seq_len, block):
        bias[start:start + block, start:start + block] = 0
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
        return torch.triu(torch.full((n, n), NEG_INF, device=self.device), diagonal=1)

    def forward(self, tokens: torch.Tensor, attention_mask: torch.Tensor, causal: bool = False) -> torch.Tensor:
        x = self.embed(tokens)
        n = x.size(1)
        bias = self._lookahead(n) if causal else block_sparse_bias(n, self.block).to(x.device)
        padding = attention_mask == 0
        out, _ = self.attn(x, x, x, attn_mask=bias, key_padding_mask=padding)
        out = self.context(out, src_key_padding_mask=~attention_mask.bool())
        return self.head(out)

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        logits = self(batch["input_ids"], batch["attention_mask"], causal=True)
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), batch["input_ids"][:, 1:].flatten())
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)
