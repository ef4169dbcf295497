"""Held-out 15: a text-line OCR model in the TrOCR / PARSeq mould: a convolutional patch encoder
over the line image, an autoregressive nn.TransformerDecoder over the character tokens, teacher
forcing in training and greedy decoding at inference. Training batches come from a Hugging
Face tokenizer (`labels`, `decoder_attention_mask` as int64, 1 = real token, right padding).

Source: conventions.md §1 (the HF attention_mask is int64, 1 = keep; nn.MultiheadAttention takes
only bool / float masks, True = padding), `maskcheck explain MC518` (`~` on an integer 0/1 mask
gives -2 / -1). The padding mask is made with `~` on the tokenizer's int64 mask, which is
bitwise NOT, not a logical one: nn.TransformerDecoder rejects the int64 result.
"""

from typing import Dict, Optional

import torch
from torch import nn


class PatchEncoder(nn.Module):
    """Line image (B, 1, 32, W) -> visual tokens (B, W // 4, d_model)."""

    def __init__(self, d_model: int):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, d_model // 2, 3, padding=1), nn.GELU(), nn.MaxPool2d(2),
                                  nn.Conv2d(d_model // 2, d_model, 3, padding=1), nn.GELU(), nn.MaxPool2d(2))
        self.pool = nn.AdaptiveAvgPool2d((1, None))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.pool(self.stem(images)).squeeze(2).transpose(1, 2)


class OCRModel(nn.Module):
    def __init__(self, vocab_size: int = 100, d_model: int = 64, nhead: int = 4, num_layers: int = 2,
                 max_len: int = 64, bos_id: int = 1, eos_id: int = 2, pad_id: int = 0):
        super().__init__()
        self.bos_id, self.eos_id, self.pad_id = bos_id, eos_id, pad_id
        self.encoder = PatchEncoder(d_model)
        self.enc_pos = nn.Parameter(torch.randn(1, 512, d_model) * 0.02)
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        self.dec_pos = nn.Parameter(torch.randn(1, max_len, d_model) * 0.02)
        layer = nn.TransformerDecoderLayer(d_model, nhead, 4 * d_model, dropout=0.1, batch_first=True, norm_first=True)
        self.decoder = nn.TransformerDecoder(layer, num_layers)
        self.head = nn.Linear(d_model, vocab_size)

    def encode(self, images: torch.Tensor) -> torch.Tensor:
        memory = self.encoder(images)
        return memory + self.enc_pos[:, : memory.shape[1]]

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor,
               tgt_key_padding_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        n = tgt_in.shape[1]
        tgt_mask = nn.Transformer.generate_square_subsequent_mask(n, device=tgt_in.device, dtype=torch.bool)
        x = self.embed(tgt_in) + self.dec_pos[:, :n]
        x = self.decoder(x, memory, tgt_mask=tgt_mask, tgt_key_padding_mask=tgt_key_padding_mask, tgt_is_causal=True)
        return self.head(x)

    def forward(self, images: torch.Tensor, batch: Dict[str, torch.Tensor]) -> torch.Tensor:
        """Teacher forcing: labels = [BOS, c1, ..., cn, EOS, PAD...]; the loss ignores the padding."""
        labels = batch["labels"]
        decoder_attention_mask = batch["decoder_attention_mask"]
        tgt_in, tgt_out = labels[:, :-1], labels[:, 1:]
        tgt_key_padding_mask = ~decoder_attention_mask[:, :-1]  # expect: MC518 ocr
        logits = self.decode(tgt_in, self.encode(images), tgt_key_padding_mask=tgt_key_padding_mask)
        return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1), ignore_index=self.pad_id)

    @torch.no_grad()
    def greedy_decode(self, images: torch.Tensor, max_new_tokens: int = 32) -> torch.Tensor:
        memory = self.encode(images)
        tokens = torch.full((images.shape[0], 1), self.bos_id, dtype=torch.long, device=images.device)
        finished = torch.zeros(images.shape[0], dtype=torch.bool, device=images.device)
        for _ in range(max_new_tokens):
            next_token = self.decode(tokens, memory)[:, -1].argmax(-1)
            next_token = next_token.masked_fill(finished, self.pad_id)
            tokens = torch.cat([tokens, next_token[:, None]], dim=1)
            finished |= next_token == self.eos_id
            if finished.all():
                break
        return tokens
