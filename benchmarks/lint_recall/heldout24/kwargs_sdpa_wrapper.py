"""Causal LM whose attention goes through a profiling wrapper that forwards **kwargs to SDPA.

`ProfiledSDPA` times every call and forwards extra keyword arguments unchanged to
F.scaled_dot_product_attention; it was written for a causal model, so it sets
`is_causal=self.is_causal`. `DecoderBlock` passes the padding of the (right-padded) batch as
`attn_mask`: bool (B, 1, 1, S), True = real key that may be attended to.

Source: pytorch/pytorch#131254, conventions.md §2.7 and §5 item 8 (`is_causal=True` together
with an explicit `attn_mask`: the MATH backend raises "Explicit attn_mask should not be set
when is_causal=True", the default CPU kernel silently ANDs the two).
"""
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

PAD_ID = 0


class ProfiledSDPA(nn.Module):
    def __init__(self, is_causal: bool = True):
        super().__init__()
        self.is_causal = is_causal
        self.calls = 0
        self.seconds = 0.0

    def forward(self, q, k, v, **sdpa_kwargs):
        start = time.perf_counter()
        out = F.scaled_dot_product_attention(q, k, v, is_causal=self.is_causal, **sdpa_kwargs)  # expect: MC506 kwargs
        self.calls += 1
        self.seconds += time.perf_counter() - start
        return out


class DecoderBlock(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln = nn.LayerNorm(dim)
        self.attn = ProfiledSDPA(is_causal=True)

    def forward(self, x, keep):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln(x)).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        y = self.attn(q, k, v, attn_mask=keep[:, None, None, :])  # also: MC506
        return x + self.proj(y.transpose(1, 2).reshape(b, t, d))


class TinyCausalLM(nn.Module):
    def __init__(self, vocab: int = 40, dim: int = 32, heads: int = 4, layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, padding_idx=PAD_ID)
        self.blocks = nn.ModuleList(DecoderBlock(dim, heads) for _ in range(layers))
        self.head = nn.Linear(dim, vocab)

    def forward(self, input_ids):
        keep = input_ids != PAD_ID
        x = self.embed(input_ids)
        for block in self.blocks:
            x = block(x, keep)
        return self.head(x)


if __name__ == "__main__":
    torch.manual_seed(0)
    model = TinyCausalLM().eval()
    ids = torch.tensor([[3, 9, 4, 0, 0], [5, 8, 2, 7, 6]])
    with torch.no_grad():
        default = model(ids)
        print("default kernel: ok,", sum(b.attn.calls for b in model.blocks), "attention calls")
        with sdpa_kernel(SDPBackend.MATH):
            math_out = model(ids)
    real = ids != PAD_ID
    print("MATH vs default on real tokens:", (math_out - default)[real].abs().max().item())
