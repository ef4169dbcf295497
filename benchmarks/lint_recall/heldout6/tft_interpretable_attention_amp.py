"""Held-out 6: the interpretable multi-head attention of a Temporal Fusion Transformer, trained
through PyTorch Lightning with `precision="16-mixed"`.

Source: unit8co/darts PR #3087 ("Fix _ScaledDotProductAttention float16 overflow in masked_fill under
mixed precision", fixes darts#3081: under autocast `torch.bmm` gives float16 scores and
`attn.masked_fill(mask, -1e9)` raises "value cannot be converted to type at::Half without overflow";
the fix fills with `torch.finfo(attn.dtype).min`).
Surroundings: a scaled-dot-product module whose fill value is a literal in forward, called per head
by an interpretable multi-head module, a decoder mask built by a module-level helper, and the
trainer factory asking for 16-bit mixed precision.
"""

from __future__ import annotations

from typing import Optional, Tuple

import pytorch_lightning as pl
import torch
import torch.nn as nn


def get_decoder_mask(encoder_length: int, decoder_length: int, device: torch.device) -> torch.Tensor:
    """True where a decoder step must not look: every later decoder step (the encoder is visible)."""
    total = encoder_length + decoder_length
    later = torch.triu(torch.ones(decoder_length, total, dtype=torch.bool, device=device),
                       diagonal=encoder_length + 1)
    return later


class _ScaledDotProductAttention(nn.Module):
    def __init__(self, dropout: Optional[float] = None, scale: bool = True) -> None:
        super().__init__()
        self.dropout = nn.Dropout(p=dropout) if dropout is not None else None
        self.softmax = nn.Softmax(dim=2)
        self.scale = scale

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                mask: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        attn = torch.bmm(q, k.permute(0, 2, 1))  # query-key overlap
        if self.scale:
            dimension = torch.sqrt(torch.tensor(k.shape[-1]).to(torch.float32))
            attn = attn / dimension
        if mask is not None:
            attn = attn.masked_fill(mask, -1e9)  # expect: MC501 method
        attn = self.softmax(attn)
        if self.dropout is not None:
            attn = self.dropout(attn)
        output = torch.bmm(attn, v)
        return output, attn


class _InterpretableMultiHeadAttention(nn.Module):
    def __init__(self, n_head: int, d_model: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.n_head = n_head
        self.d_k = self.d_q = self.d_v = d_model // n_head
        self.dropout = nn.Dropout(p=dropout)
        self.v_layer = nn.Linear(d_model, self.d_v)
        self.q_layers = nn.ModuleList([nn.Linear(d_model, self.d_q) for _ in range(n_head)])
        self.k_layers = nn.ModuleList([nn.Linear(d_model, self.d_k) for _ in range(n_head)])
        self.attention = _ScaledDotProductAttention()
        self.w_h = nn.Linear(self.d_v, d_model, bias=False)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                mask: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        heads, attns = [], []
        vs = self.v_layer(v)
        for i in range(self.n_head):
            qs = self.q_layers[i](q)
            ks = self.k_layers[i](k)
            head, attn = self.attention(qs, ks, vs, mask)
            heads.append(self.dropout(head))
            attns.append(attn)
        head = torch.stack(heads, dim=2) if self.n_head > 1 else heads[0]
        attn = torch.stack(attns, dim=2)
        outputs = torch.mean(head, dim=2) if self.n_head > 1 else head
        return self.dropout(self.w_h(outputs)), attn


class TFTAttentionBlock(pl.LightningModule):
    def __init__(self, d_model: int = 64, n_head: int = 4, encoder_length: int = 24) -> None:
        super().__init__()
        self.encoder_length = encoder_length
        self.multihead_attn = _InterpretableMultiHeadAttention(n_head, d_model, dropout=0.1)
        self.head = nn.Linear(d_model, 1)

    def forward(self, embeddings: torch.Tensor) -> torch.Tensor:
        decoder_length = embeddings.shape[1] - self.encoder_length
        mask = get_decoder_mask(self.encoder_length, decoder_length, embeddings.device)
        mask = mask.unsqueeze(0).expand(embeddings.shape[0], -1, -1)
        queries = embeddings[:, self.encoder_length:]
        attn_out, _ = self.multihead_attn(q=queries, k=embeddings, v=embeddings, mask=mask)
        return self.head(attn_out)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def make_trainer(max_epochs: int = 20) -> pl.Trainer:
    return pl.Trainer(max_epochs=max_epochs, precision="16-mixed", accelerator="gpu")
