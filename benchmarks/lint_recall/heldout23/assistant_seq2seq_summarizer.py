"""Encoder-decoder summarizer on nn.TransformerEncoder / nn.TransformerDecoder (assistant-written).

The way a coding assistant lays such a module out: a typed config dataclass, a model class with
``encode`` / ``decode`` / ``forward`` / ``generate`` methods, Args/Returns docstrings on each,
module-level logging and a ``main()`` that sanity-checks the model. Inputs follow the Hugging Face
convention: ``attention_mask`` is a (batch, src_len) bool tensor, True for real tokens.

Source: conventions.md section 1 (direction cheat-sheet: HF attention_mask True = keep,
nn.Transformer* key_padding_mask True = padding), seed self_attention_mask_guide.txt section 2
(key_padding_mask: True 表示 padding), pytorch/pytorch PR #141694 (key_padding_mask docs).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
import torch.nn as nn

logger = logging.getLogger(__name__)


@dataclass
class SummarizerConfig:
    """Hyper-parameters of :class:`Summarizer`."""

    vocab_size: int = 64
    d_model: int = 32
    nhead: int = 4
    num_layers: int = 2
    dim_feedforward: int = 64
    dropout: float = 0.1
    max_positions: int = 64
    pad_token_id: int = 0
    bos_token_id: int = 1


class Summarizer(nn.Module):
    """A small sequence-to-sequence transformer."""

    def __init__(self, config: SummarizerConfig) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
        self.embed_positions = nn.Embedding(config.max_positions, config.d_model)
        enc_layer = nn.TransformerEncoderLayer(config.d_model, config.nhead, config.dim_feedforward, config.dropout, batch_first=True)
        dec_layer = nn.TransformerDecoderLayer(config.d_model, config.nhead, config.dim_feedforward, config.dropout, batch_first=True)
        self.encoder = nn.TransformerEncoder(enc_layer, config.num_layers, enable_nested_tensor=False)
        self.decoder = nn.TransformerDecoder(dec_layer, config.num_layers)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size)

    def _embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        return self.embed_tokens(input_ids) + self.embed_positions(positions)

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Encode the source.

        Args:
            input_ids: Source token ids of shape ``(batch, src_len)``.
            attention_mask: Bool tensor of shape ``(batch, src_len)``, True for real tokens.

        Returns:
            Encoder states of shape ``(batch, src_len, d_model)``.
        """
        return self.encoder(self._embed(input_ids), src_key_padding_mask=~attention_mask)

    def decode(self, decoder_input_ids: torch.Tensor, memory: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Run the decoder over the encoder states.

        Args:
            decoder_input_ids: Target token ids of shape ``(batch, tgt_len)``.
            memory: Encoder states from :meth:`encode`.
            attention_mask: The source mask passed to :meth:`encode` (True for real tokens).

        Returns:
            Logits of shape ``(batch, tgt_len, vocab_size)``.
        """
        tgt_len = decoder_input_ids.shape[1]
        tgt_mask = nn.Transformer.generate_square_subsequent_mask(tgt_len, device=decoder_input_ids.device, dtype=torch.bool)
        hidden = self.decoder(
            self._embed(decoder_input_ids),
            memory,
            tgt_mask=tgt_mask,
            tgt_key_padding_mask=decoder_input_ids == self.config.pad_token_id,
            memory_key_padding_mask=attention_mask,  # expect: MC502 typed
        )
        return self.lm_head(hidden)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, decoder_input_ids: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits of shape ``(batch, tgt_len, vocab_size)``."""
        return self.decode(decoder_input_ids, self.encode(input_ids, attention_mask), attention_mask)

    @torch.no_grad()
    def generate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int = 5) -> torch.Tensor:
        """Greedy decoding.

        Args:
            input_ids: Source token ids of shape ``(batch, src_len)``.
            attention_mask: Bool tensor of shape ``(batch, src_len)``, True for real tokens.
            max_new_tokens: Number of tokens to generate.

        Returns:
            Generated ids of shape ``(batch, max_new_tokens + 1)``, starting with BOS.
        """
        memory = self.encode(input_ids, attention_mask)
        out = torch.full((input_ids.shape[0], 1), self.config.bos_token_id, dtype=torch.long, device=input_ids.device)
        for _ in range(max_new_tokens):
            next_token = self.decode(out, memory, attention_mask)[:, -1].argmax(-1, keepdim=True)
            out = torch.cat([out, next_token], dim=1)
        return out


def main() -> None:
    """Check that padding a source does not change its summary logits."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    torch.manual_seed(0)
    model = Summarizer(SummarizerConfig()).eval()
    input_ids = torch.tensor([[5, 9, 13, 17, 21, 25], [7, 11, 15, 0, 0, 0]])
    attention_mask = input_ids != model.config.pad_token_id
    decoder_input_ids = torch.tensor([[1, 30, 31], [1, 32, 33]])
    with torch.no_grad():
        batched = model(input_ids, attention_mask, decoder_input_ids)
        alone = model(input_ids[1:, :3], attention_mask[1:, :3], decoder_input_ids[1:])
    logger.info("padded vs unpadded source: max |diff| = %.3g (expect ~1e-6)", (batched[1:] - alone).abs().max().item())
    logger.info("greedy summaries: %s", model.generate(input_ids, attention_mask).tolist())


if __name__ == "__main__":
    main()
