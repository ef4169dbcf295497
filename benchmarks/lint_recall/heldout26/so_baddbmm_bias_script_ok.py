"""Stack Overflow question: "Padding still gets attention weight when I use torch.baddbmm with a bias".

The asker follows the BLOOM/ALiBi pattern: the additive bias (a per-head ALiBi slope times the
key distance, plus the padding) is the `input` of `torch.baddbmm`, so the scores come out with the
bias already added. Top-level script, no functions, as posted: heads folded into the batch axis
with view/expand, a padding mask written as a `torch.tensor([[...]])` literal (True = padding),
the bias filled at the padded keys, `baddbmm`, softmax, and the weights printed.

Source: seed masked_fill_inplace.txt (section 区别 and 作用: `masked_fill()` returns a new
tensor and leaves the original unchanged, only `masked_fill_()` writes in place), seed
self_attention_mask_guide.txt §3 (the padding score must be -inf before the softmax).
"""
import math

import torch

torch.manual_seed(0)

b, t, heads, dh = 2, 5, 2, 4
pad = torch.tensor([[False, False, False, False, False],
                    [False, False, False, True, True]])

x2 = torch.randn(b, t, heads * dh)
q = x2.view(b, t, heads, dh).transpose(1, 2).reshape(b * heads, t, dh)
k = q.clone()
v = torch.randn(b * heads, t, dh)

slopes = torch.tensor([2.0 ** -(8 * (i + 1) / heads) for i in range(heads)])
dist = torch.arange(t)[None, :] - torch.arange(t)[:, None]
alibi = -slopes[:, None, None] * dist.abs()[None].float()  # (heads, t, t)
tmp = alibi[None].expand(b, heads, t, t).clone()
tmp = tmp.masked_fill(pad[:, None, None, :], float("-inf"))
bias = tmp.reshape(b * heads, t, t)

scores = torch.baddbmm(bias, q, k.transpose(1, 2), beta=1.0, alpha=1.0 / math.sqrt(dh))
w = scores.softmax(dim=-1)
out = torch.bmm(w, v)

w = w.view(b, heads, t, t)
print("weight on padded keys, sequence 1:", w[1][..., pad[1]].sum(-1).max().item())
v2 = v.view(b, heads, t, dh).clone()
v2[1, :, 3:] = 100.0
out2 = torch.bmm(w.view(b * heads, t, t), v2.view(b * heads, t, dh))
print("real outputs moved by padded values:", (out2 - out).view(b, heads, t, dh)[1, :, :3].abs().max().item())
