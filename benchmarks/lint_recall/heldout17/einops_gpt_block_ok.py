"""Decoder-only transformer in the einops style: rotary embeddings, fused qkv, key padding mask (correct twin).

Source: pytorch/pytorch#131254 (an attn_mask together with the is_causal hint: one of the
two is silently dropped), pytorch/pytorch PR #105342 / #101089 (is_causal is a hint) and
conventions.md §2.7 (`is_causal=True` with an `attn_mask`: the MATH backend raises "Explicit
attn_mask should not be set when is_causal=True", the CPU flash kernel ANDs the two). The key
padding mask is passed as attn_mask and the causal part left to `is_causal=True`.
Twin: the causal triangle is folded into the bool attn_mask (`causal & mask`) and `is_causal` is not passed.
"""

import torch
import torch.nn.functional as F
from einops import rearrange, repeat
from torch import nn


def exists(val):
    return val is not None


class RotaryEmbedding(nn.Module):
    def __init__(self, dim, theta=10000):
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, n, device):
        t = torch.arange(n, device=device).type_as(self.inv_freq)
        freqs = torch.einsum("i , j -> i j", t, self.inv_freq)
        return repeat(freqs, "n d -> n (d r)", r=2)


def rotate_half(x):
    x = rearrange(x, "... (d r) -> ... d r", r=2)
    x1, x2 = x.unbind(dim=-1)
    return rearrange(torch.stack((-x2, x1), dim=-1), "... d r -> ... (d r)")


def apply_rotary(pos, t):
    return t * pos.cos() + rotate_half(t) * pos.sin()


class CausalAttention(nn.Module):
    def __init__(self, dim, heads=8, dim_head=32, dropout=0.0):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.norm = nn.LayerNorm(dim)
        self.to_qkv = nn.Linear(dim, 3 * heads * dim_head, bias=False)
        self.to_out = nn.Linear(heads * dim_head, dim, bias=False)

    def forward(self, x, rotary_pos, mask=None):
        x = self.norm(x)
        q, k, v = rearrange(self.to_qkv(x), "b n (qkv h d) -> qkv b h n d", qkv=3, h=self.heads)
        q, k = apply_rotary(rotary_pos, q), apply_rotary(rotary_pos, k)
        n = q.shape[-2]
        causal = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()
        attn_mask = causal & rearrange(mask, "b j -> b 1 1 j") if exists(mask) else causal
        dropout_p = self.dropout if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p)
        return self.to_out(rearrange(out, "b h n d -> b n (h d)"))


class FeedForward(nn.Sequential):
    def __init__(self, dim, mult=4):
        super().__init__(nn.LayerNorm(dim), nn.Linear(dim, dim * mult), nn.GELU(), nn.Linear(dim * mult, dim))


class Decoder(nn.Module):
    def __init__(self, num_tokens, dim=128, depth=2, heads=4, dim_head=32):
        super().__init__()
        self.token_emb = nn.Embedding(num_tokens, dim)
        self.rotary = RotaryEmbedding(dim_head)
        self.layers = nn.ModuleList(
            [nn.ModuleList([CausalAttention(dim, heads, dim_head), FeedForward(dim)]) for _ in range(depth)]
        )
        self.to_logits = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, num_tokens, bias=False))

    def forward(self, x, mask=None):
        """`mask`: (b, n) bool, True at real tokens (right padding)."""
        pos = self.rotary(x.shape[-1], x.device)
        x = self.token_emb(x)
        for attn, ff in self.layers:
            x = attn(x, pos, mask=mask) + x
            x = ff(x) + x
        return self.to_logits(x)


if __name__ == "__main__":
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    model = Decoder(num_tokens=256).eval()
    seq = torch.randint(0, 256, (2, 10))
    mask = torch.ones(2, 10, dtype=torch.bool)
    mask[1, 6:] = False
    with torch.no_grad():
        logits = model(seq, mask=mask)
        alone = model(seq[1:, :6])
        print("default kernel, padded vs alone:", (logits[1, :6] - alone[0]).abs().max().item())
        try:
            with sdpa_kernel(SDPBackend.MATH):
                math_logits = model(seq, mask=mask)
            print("MATH kernel vs default:", (math_logits - logits).abs().max().item())
        except RuntimeError as err:
            print("MATH kernel:", err)
