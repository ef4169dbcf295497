"""Held-out 16: a diffusers-style `Attention` module with a pluggable processor (`AttnProcessor`,
the classic `baddbmm` path with `get_attention_scores`), `prepare_attention_mask` that turns the
text encoder's bool keep-mask into an additive bias repeated per head, and a
`BasicTransformerBlock` (self-attention, cross-attention over the padded prompt, GEGLU
feed-forward). Pipelines load it with `torch_dtype=torch.float16`. The bias value is a read-only
`mask_fill_value` property of the `Attention` module.

Source: huggingface/lerobot PR #710 (a float32-sized negative constant in eager attention under
AMP: "value cannot be converted to type at::Half without overflow"), espnet/espnet PR #4584 (the
float32 minimum used as the fill of bfloat16 scores raised the same error). The property returns
`torch.finfo(torch.float32).min`, and `prepare_attention_mask` fills a bias of the hidden states'
dtype with it.
"""

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    def __init__(self, query_dim: int, cross_attention_dim: Optional[int] = None, heads: int = 4, dim_head: int = 16):
        super().__init__()
        inner_dim = heads * dim_head
        cross_attention_dim = cross_attention_dim or query_dim
        self.heads, self.scale = heads, dim_head ** -0.5
        self.to_q = nn.Linear(query_dim, inner_dim, bias=False)
        self.to_k = nn.Linear(cross_attention_dim, inner_dim, bias=False)
        self.to_v = nn.Linear(cross_attention_dim, inner_dim, bias=False)
        self.to_out = nn.ModuleList([nn.Linear(inner_dim, query_dim), nn.Dropout(0.0)])
        self.processor = AttnProcessor()

    @property
    def mask_fill_value(self) -> float:
        """Bias for the masked keys: the most negative finite value."""
        return torch.finfo(torch.float32).min  # expect: MC517 property

    def head_to_batch_dim(self, tensor: torch.Tensor) -> torch.Tensor:
        b, n, dim = tensor.shape
        tensor = tensor.reshape(b, n, self.heads, dim // self.heads).permute(0, 2, 1, 3)
        return tensor.reshape(b * self.heads, n, dim // self.heads)

    def batch_to_head_dim(self, tensor: torch.Tensor) -> torch.Tensor:
        bh, n, dim = tensor.shape
        tensor = tensor.reshape(bh // self.heads, self.heads, n, dim).permute(0, 2, 1, 3)
        return tensor.reshape(bh // self.heads, n, dim * self.heads)

    def prepare_attention_mask(self, attention_mask: Optional[torch.Tensor], target_length: int,
                               dtype: torch.dtype) -> Optional[torch.Tensor]:
        if attention_mask is None:
            return None
        if attention_mask.dtype == torch.bool:  # (batch, key_len) keep-mask -> additive bias
            bias = torch.zeros(attention_mask.shape, dtype=dtype, device=attention_mask.device)
            attention_mask = bias.masked_fill(~attention_mask, self.mask_fill_value)  # also: MC517
        attention_mask = attention_mask[:, None, :].expand(-1, target_length, -1)
        return attention_mask.repeat_interleave(self.heads, dim=0)

    def get_attention_scores(self, query, key, attention_mask=None) -> torch.Tensor:
        if attention_mask is None:
            baddbmm_input = torch.empty(query.shape[0], query.shape[1], key.shape[1], dtype=query.dtype)
            beta = 0
        else:
            baddbmm_input, beta = attention_mask, 1
        scores = torch.baddbmm(baddbmm_input, query, key.transpose(-1, -2), beta=beta, alpha=self.scale)
        return scores.float().softmax(dim=-1).to(query.dtype)

    def forward(self, hidden_states, encoder_hidden_states=None, attention_mask=None) -> torch.Tensor:
        return self.processor(self, hidden_states, encoder_hidden_states, attention_mask)


class AttnProcessor:
    def __call__(self, attn: Attention, hidden_states, encoder_hidden_states=None, attention_mask=None):
        sequence_length = hidden_states.shape[1]
        attention_mask = attn.prepare_attention_mask(attention_mask, sequence_length, hidden_states.dtype)
        query = attn.head_to_batch_dim(attn.to_q(hidden_states))
        context = hidden_states if encoder_hidden_states is None else encoder_hidden_states
        key = attn.head_to_batch_dim(attn.to_k(context))
        value = attn.head_to_batch_dim(attn.to_v(context))
        attention_probs = attn.get_attention_scores(query, key, attention_mask)
        hidden_states = attn.batch_to_head_dim(torch.bmm(attention_probs, value))
        return attn.to_out[1](attn.to_out[0](hidden_states))


class GEGLU(nn.Module):
    def __init__(self, dim_in: int, dim_out: int):
        super().__init__()
        self.proj = nn.Linear(dim_in, dim_out * 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x, gate = self.proj(x).chunk(2, dim=-1)
        return x * F.gelu(gate)


class BasicTransformerBlock(nn.Module):
    def __init__(self, dim: int = 64, cross_attention_dim: int = 32, heads: int = 4):
        super().__init__()
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn1 = Attention(dim, heads=heads, dim_head=dim // heads)
        self.attn2 = Attention(dim, cross_attention_dim, heads=heads, dim_head=dim // heads)
        self.ff = nn.Sequential(GEGLU(dim, 4 * dim), nn.Linear(4 * dim, dim))

    def forward(self, hidden_states, encoder_hidden_states, encoder_attention_mask=None) -> torch.Tensor:
        hidden_states = hidden_states + self.attn1(self.norm1(hidden_states))
        hidden_states = hidden_states + self.attn2(self.norm2(hidden_states), encoder_hidden_states,
                                                   attention_mask=encoder_attention_mask)
        return hidden_states + self.ff(self.norm3(hidden_states))


if __name__ == "__main__":
    torch.manual_seed(0)
    block = BasicTransformerBlock().eval()
    latents, prompt_embeds = torch.randn(2, 16, 64), torch.randn(2, 8, 32)
    keep = torch.ones(2, 8, dtype=torch.bool)
    keep[1, 5:] = False
    with torch.no_grad():
        ref = block(latents, prompt_embeds, keep)
        print("float32: padded prompt == prompt alone:", torch.allclose(ref[1:], block(latents[1:], prompt_embeds[1:, :5]), atol=1e-5))
        block = block.to(torch.float16)
        try:
            out = block(latents.half(), prompt_embeds.half(), keep)
            print("float16 finite:", bool(torch.isfinite(out).all()), "max diff to float32:", float((out.float() - ref).abs().max()))
        except RuntimeError as err:
            print("float16:", err)
