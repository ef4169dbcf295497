"""PyTorch forum question: "Block-diagonal mask for packed sequences makes MultiheadAttention output NaN".

The poster packs several short sequences into one row (no padding) and wants each token to attend
only inside its own sequence. Their script, top-level and without functions: the sequence lengths
as a Python list, the packed input, the block mask written in a loop over the lengths following a
blog's `create_block_mask` recipe, `nn.MultiheadAttention` (sequence-first) with the float mask
as `attn_mask` and `need_weights=True` to look at the weights, and a check that changing one
sequence does not change the others.

Source: seed self_attention_mask_guide.txt §6 (高级应用, the `create_block_mask` recipe:
`mask = torch.zeros(sz, sz)`, blocks set to 0, then `mask[mask == 0] = float('-inf')`), and §3
(attn_mask: -inf = hidden, 0 = allowed).
"""
import torch
from torch import nn

torch.manual_seed(0)

E, HEADS = 16, 2
seq_lens = [3, 2, 4]
n = sum(seq_lens)

x = torch.randn(n, 1, E)  # (L, N=1, E): three sequences packed into one row

m = torch.zeros(n, n)
start = 0
for L in seq_lens:
    m[start:start + L, start:start + L] = 0
    start += L
m[m == 0] = float("-inf")  # expect: MC504 segloop

mha = nn.MultiheadAttention(E, HEADS)
mha.eval()
with torch.no_grad():
    out, w = mha(x, x, x, attn_mask=m, need_weights=True)
print("output finite:", torch.isfinite(out).all().item())
print("weights of token 0:", w[0, 0].round(decimals=3).tolist())

x2 = x.clone()
x2[-4:] = torch.randn(4, 1, E)  # change only the last sequence
with torch.no_grad():
    out2, _ = mha(x2, x2, x2, attn_mask=m, need_weights=True)
print("first two sequences moved by:", (out2[:5] - out[:5]).abs().max().item())
