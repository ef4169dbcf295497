"""Held-out 16: a PaLM-pytorch-style decoder (lucidrains): parallel attention + feed-forward blocks
from one fused projection, multi-query attention (one key/value head shared by all query heads),
rotary embeddings, SwiGLU, tied output embedding, and batched sampling of left-padded prompts with
a bool `mask` (True = real token). The attention kernel is bound once in `__init__` with
`functools.partial`, and the forward adds the padding mask at the call when there is one.

Source: nari-labs/dia PR #170 (`RuntimeError: _scaled_dot_product_attention: Explicit attn_mask
should not be set when is_causal=True`), huggingface/transformers#37807 (why HF passes
`is_causal=False` whenever a mask is given), conventions.md §2.7 (MATH raises, the CPU flash kernel
ANDs the flag and the mask). The partial fixes `is_causal=True` and the padded call adds
`attn_mask`.
"""

from functools import partial

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel


def exists(val):
    return val is not None


class RotaryEmbedding(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim)), persistent=False)

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        freqs = positions[..., None].float() * self.inv_freq
        return torch.cat((freqs, freqs), dim=-1)


def apply_rotary_pos_emb(pos: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    x1, x2 = t.chunk(2, dim=-1)
    return t * pos.cos() + torch.cat((-x2, x1), dim=-1) * pos.sin()


class ParallelTransformerBlock(nn.Module):
    def __init__(self, dim: int, dim_head: int = 16, heads: int = 4, ff_mult: int = 4):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        attn_inner_dim, ff_inner_dim = dim_head * heads, dim * ff_mult
        self.fused_dims = (attn_inner_dim, dim_head, dim_head, ff_inner_dim * 2)
        self.heads = heads
        self.rotary_emb = RotaryEmbedding(dim_head)
        self.fused_attn_ff_proj = nn.Linear(dim, sum(self.fused_dims), bias=False)
        self.attn_out = nn.Linear(attn_inner_dim, dim, bias=False)
        self.ff_out = nn.Linear(ff_inner_dim, dim, bias=False)
        self.attend = partial(F.scaled_dot_product_attention, is_causal=True)  # expect: MC506 partial

    def forward(self, x: torch.Tensor, mask=None, positions=None) -> torch.Tensor:
        b, n, _ = x.shape
        q, k, v, ff = self.fused_attn_ff_proj(self.norm(x)).split(self.fused_dims, dim=-1)
        q = q.view(b, n, self.heads, -1).transpose(1, 2)  # (b, h, n, d)
        k, v = k[:, None], v[:, None]  # one shared key / value head
        pos = self.rotary_emb(positions if exists(positions) else torch.arange(n, device=x.device))
        if pos.dim() == 3:
            pos = pos[:, None]
        q, k = apply_rotary_pos_emb(pos, q), apply_rotary_pos_emb(pos, k)
        k, v = k.expand(-1, self.heads, -1, -1), v.expand(-1, self.heads, -1, -1)
        if exists(mask):
            out = self.attend(q, k, v, attn_mask=mask[:, None, None, :])  # also: MC506
        else:
            out = self.attend(q, k, v)
        out = out.transpose(1, 2).reshape(b, n, -1)
        x_ff, gate = ff.chunk(2, dim=-1)
        return self.attn_out(out) + self.ff_out(F.silu(gate) * x_ff)


class PaLM(nn.Module):
    def __init__(self, num_tokens: int = 64, dim: int = 64, depth: int = 2, heads: int = 4):
        super().__init__()
        self.token_emb = nn.Embedding(num_tokens, dim)
        self.blocks = nn.ModuleList([ParallelTransformerBlock(dim, heads=heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.to_logits = nn.Linear(dim, num_tokens, bias=False)
        self.to_logits.weight = self.token_emb.weight

    def forward(self, x: torch.Tensor, mask=None) -> torch.Tensor:
        positions = (mask.long().cumsum(-1) - 1).clamp(min=0) if exists(mask) else None
        x = self.token_emb(x)
        for block in self.blocks:
            x = x + block(x, mask=mask, positions=positions)
        return self.to_logits(self.norm(x))

    @torch.no_grad()
    def generate(self, prompts: torch.Tensor, mask: torch.Tensor, steps: int) -> torch.Tensor:
        out = prompts
        for _ in range(steps):
            logits = self(out, mask=mask)[:, -1]
            out = torch.cat((out, logits.argmax(-1, keepdim=True)), dim=-1)
            mask = F.pad(mask, (0, 1), value=True)
        return out[:, prompts.shape[1]:]


if __name__ == "__main__":
    torch.manual_seed(0)
    model = PaLM().eval()
    prompts = torch.tensor([[0, 0, 5, 6, 7], [8, 9, 10, 11, 12]])
    mask = torch.tensor([[False, False, True, True, True], [True] * 5])
    with torch.no_grad():
        batch, alone = model(prompts, mask=mask), model(prompts[:1, 2:])
        print("default CPU kernel, left-padded prompt vs alone:", float((batch[0, 2:] - alone[0]).abs().max()))
        with sdpa_kernel(SDPBackend.MATH):
            try:
                print("MATH kernel, padded vs alone:", float((model(prompts, mask=mask)[0, 2:] - alone[0]).abs().max()))
            except RuntimeError as err:
                print("MATH kernel:", err)
