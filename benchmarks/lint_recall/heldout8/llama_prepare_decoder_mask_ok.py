"""Held-out 8 (correct twin): Llama decoder mask preparation as transformers 4.33 wrote it (module-level
`_make_causal_mask` / `_expand_mask` helpers, `LlamaModel._prepare_decoder_attention_mask`).

Source: huggingface/transformers PR #26421 ("Fix attention computation when padding mask is not
null": the causal helper and the padding helper each fill with `torch.finfo(dtype).min`, and the
two are summed, so a key hidden by both becomes -inf; a left-padded row that is fully masked turns
into NaN after softmax; the reviewer confirms "the attention mask ends up having -inf and
torch.finfo(dtype).min").
Surroundings: module-level helpers returning the filled masks, a method combining them under a
conditional expression, past_key_values_length.
"""

from typing import Optional

import torch
from torch import nn


def _make_causal_mask(input_ids_shape: torch.Size, dtype: torch.dtype, device: torch.device,
                      past_key_values_length: int = 0):
    """Make causal mask used for uni-directional self-attention."""
    bsz, tgt_len = input_ids_shape
    mask = torch.full((tgt_len, tgt_len), torch.finfo(dtype).min, device=device)
    mask_cond = torch.arange(mask.size(-1), device=device)
    mask.masked_fill_(mask_cond < (mask_cond + 1).view(mask.size(-1), 1), 0)
    mask = mask.to(dtype)
    if past_key_values_length > 0:
        mask = torch.cat([torch.zeros(tgt_len, past_key_values_length, dtype=dtype, device=device), mask], dim=-1)
    return mask[None, None, :, :].expand(bsz, 1, tgt_len, tgt_len + past_key_values_length)


def _expand_mask(mask: torch.Tensor, dtype: torch.dtype, tgt_len: Optional[int] = None):
    """Expands attention_mask from `[bsz, seq_len]` to `[bsz, 1, tgt_seq_len, src_seq_len]`."""
    bsz, src_len = mask.size()
    tgt_len = tgt_len if tgt_len is not None else src_len
    expanded_mask = mask[:, None, None, :].expand(bsz, 1, tgt_len, src_len).to(dtype)
    inverted_mask = 1.0 - expanded_mask
    return inverted_mask.masked_fill(inverted_mask.to(torch.bool), torch.finfo(dtype).min)


class LlamaModel(nn.Module):
    def __init__(self, vocab_size: int = 32000, hidden_size: int = 4096, padding_idx: int = 0):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab_size, hidden_size, padding_idx)
        self.layers = nn.ModuleList()

    def _prepare_decoder_attention_mask(self, attention_mask, input_shape, inputs_embeds, past_key_values_length):
        # create causal mask
        # [bsz, seq_len] -> [bsz, 1, tgt_seq_len, src_seq_len]
        combined_attention_mask = None
        if input_shape[-1] > 1:
            combined_attention_mask = _make_causal_mask(
                input_shape,
                inputs_embeds.dtype,
                device=inputs_embeds.device,
                past_key_values_length=past_key_values_length,
            )

        if attention_mask is not None:
            # [bsz, seq_len] -> [bsz, 1, tgt_seq_len, src_seq_len]
            expanded_attn_mask = _expand_mask(attention_mask, inputs_embeds.dtype, tgt_len=input_shape[-1]).to(
                inputs_embeds.device
            )
            combined_attention_mask = (
                expanded_attn_mask
                if combined_attention_mask is None
                else combined_attention_mask.masked_fill(expanded_attn_mask.bool(), torch.finfo(inputs_embeds.dtype).min)
            )

        return combined_attention_mask

    def forward(self, input_ids, attention_mask=None, past_key_values=None):
        batch_size, seq_length = input_ids.shape
        past_key_values_length = past_key_values[0][0].shape[2] if past_key_values is not None else 0
        inputs_embeds = self.embed_tokens(input_ids)
        if attention_mask is None:
            attention_mask = torch.ones((batch_size, seq_length + past_key_values_length), dtype=torch.bool,
                                        device=inputs_embeds.device)
        attention_mask = self._prepare_decoder_attention_mask(
            attention_mask, (batch_size, seq_length), inputs_embeds, past_key_values_length
        )
        hidden_states = inputs_embeds
        for idx, decoder_layer in enumerate(self.layers):
            past_key_value = past_key_values[idx] if past_key_values is not None else None
            hidden_states = decoder_layer(hidden_states, attention_mask=attention_mask,
                                          past_key_value=past_key_value)[0]
        return hidden_states
