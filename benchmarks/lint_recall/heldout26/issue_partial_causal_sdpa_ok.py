"""Issue repro: "Explicit attn_mask should not be set when is_causal=True" only with the math kernel.

The reporter's tiny GPT block: `functools.partial` fixes the keyword arguments of
`functional.scaled_dot_product_attention` (`from torch.nn import functional`) once, the block
hands it a (batch, 1, 1, seq) keep mask for the right padding of the batch, and the demo runs the
same forward with the default CPU kernel, which they say works, and under
`sdpa_kernel(SDPBackend.MATH)`, the reference kernel.

Source: pytorch/pytorch#131254 (is_causal and a mask given together; the hint wins or the mask is
dropped depending on the path), conventions.md §2.7 (is_causal=True + attn_mask: MATH raises, the
CPU flash kernel ANDs both) and §5 item 8.
"""
import functools

import torch
from torch import nn
from torch.nn import functional
from torch.nn.attention import SDPBackend, sdpa_kernel

torch.manual_seed(0)

sdpa = functools.partial(functional.scaled_dot_product_attention, dropout_p=0.0, is_causal=False)


class Block(nn.Module):
    def __init__(self, d=32, h=4):
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.o = nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, keep):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.h, d // self.h).transpose(1, 2) for z in (q, k, v))
        y = sdpa(q, k, v, attn_mask=keep[:, None, None, :] & torch.ones(t, t, dtype=torch.bool).tril())
        x = x + self.o(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab=50, d=32, n_layer=2, block_size=16):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(block_size, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(n_layer))
        self.head = nn.Linear(d, vocab)

    def forward(self, idx, keep):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for blk in self.blocks:
            x = blk(x, keep)
        return self.head(x)


model = TinyGPT().eval()
idx = torch.tensor([[3, 9, 4, 1, 8, 2], [7, 7, 5, 0, 0, 0]])
keep = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]]).bool()

with torch.no_grad():
    ref = model(idx, keep)
    print("default kernel:", ref.shape, "finite:", torch.isfinite(ref).all().item())
    idx2 = idx.clone()
    idx2[0, -1] = 11
    print("position 0 moved when the last token changed:", (model(idx2, keep) - ref)[0, 0].abs().max().item())
    try:
        with sdpa_kernel(SDPBackend.MATH):
            out = model(idx, keep)
        print("math kernel vs default:", (out - ref)[keep].abs().max().item())
    except RuntimeError as err:
        print("math kernel:", err)
