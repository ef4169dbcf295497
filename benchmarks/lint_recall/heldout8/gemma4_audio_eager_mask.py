"""Held-out 8: a Gemma-4-style audio encoder attention (softcapped logits, an invalid-logit fill
value from the config, the mask built once by the model for the chosen attention backend).

Source: huggingface/transformers#48818 ("Gemma4 audio tower: attention mask inverted under eager
attention": `Gemma4AudioAttention` applies the mask with
`attn_weights.masked_fill(attention_mask.logical_not(), config.attention_invalid_logits_value)`,
which assumes a bool mask, True = allowed; under eager `create_bidirectional_mask` returns an
additive float mask, 0.0 = allowed and finfo.min = disallowed, so `logical_not()` is True exactly at
the allowed positions and they are the ones filled).
Surroundings: the mask built by a helper that returns bool for sdpa and additive float for eager,
chosen by a config attribute, the fill value read from the config.
"""

from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class Gemma4AudioConfig:
    hidden_size: int = 1024
    num_attention_heads: int = 8
    attention_logit_cap: float = 50.0
    attention_invalid_logits_value: float = -1.0e9
    _attn_implementation: str = "eager"


def create_bidirectional_mask(config: Gemma4AudioConfig, input_embeds: torch.Tensor,
                              attention_mask: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """Padding-only mask: bool (True = attend) for sdpa, additive (0 / finfo.min) for eager."""
    if attention_mask is None:
        return None
    keep = attention_mask[:, None, None, :].bool()
    if config._attn_implementation == "sdpa":
        return keep
    min_dtype = torch.finfo(input_embeds.dtype).min
    return torch.zeros(keep.shape, dtype=input_embeds.dtype, device=keep.device).masked_fill(~keep, min_dtype)


class Gemma4AudioAttention(nn.Module):
    def __init__(self, config: Gemma4AudioConfig):
        super().__init__()
        self.config = config
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.qkv_proj = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=False)
        self.o_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.softcap = config.attention_logit_cap

    def forward(self, hidden_states: torch.Tensor, attention_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        b, n, _ = hidden_states.shape
        q, k, v = (t.view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
                   for t in self.qkv_proj(hidden_states).chunk(3, dim=-1))
        attn_weights = torch.matmul(q, k.transpose(-1, -2)) * self.head_dim ** -0.5
        attn_weights = torch.tanh(attn_weights / self.softcap) * self.softcap
        if attention_mask is not None:
            attn_weights = attn_weights.masked_fill(
                attention_mask.logical_not(), self.config.attention_invalid_logits_value  # expect: MC519|MC511 helper
            )
        attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(attn_weights, v).transpose(1, 2).reshape(b, n, -1)
        return self.o_proj(out)


class Gemma4AudioModel(nn.Module):
    def __init__(self, config: Gemma4AudioConfig, num_layers: int = 4):
        super().__init__()
        self.config = config
        self.input_proj = nn.Linear(128, config.hidden_size)
        self.layers = nn.ModuleList(Gemma4AudioAttention(config) for _ in range(num_layers))

    def forward(self, input_features: torch.Tensor, input_features_mask: Optional[torch.Tensor] = None):
        hidden_states = self.input_proj(input_features)
        attention_mask = create_bidirectional_mask(self.config, hidden_states, input_features_mask)
        for layer in self.layers:
            hidden_states = hidden_states + layer(hidden_states, attention_mask)
        return hidden_states
