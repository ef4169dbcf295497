"""PyTorch forum question: "Padding mask does nothing in scaled_dot_product_attention (features from numpy)".

The poster's pipeline: variable-length feature sequences come out of a numpy preprocessing step
(a Python list of arrays), are padded in numpy in a loop over the list of lengths, the keep mask
is built in the same loop, and both go through `torch.from_numpy`. A small set-encoder block
runs `F.scaled_dot_product_attention` on them and mean-pools the real frames. Their test: append
random junk frames to one sequence's padding and look at its pooled vector.

Source: pytorch/pytorch#103963 (a 0/1 float mask given to SDPA is an additive bias and masks
nothing), tools.md §0 P1 (float 0/1 mask to SDPA: all-ones float mask == no mask), conventions.md
§2.9 (HF 4-D masks: a 0/1 float mask is added and masks nothing).
"""
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

rng = np.random.default_rng(0)
torch.manual_seed(0)

D, H = 12, 3
lengths = [6, 2, 4, 5]
seqs = [rng.standard_normal((n, D)).astype(np.float32) for n in lengths]


def pad_batch(seqs, filler=0.0):
    T = max(len(s) for s in seqs)
    x2 = np.full((len(seqs), T, D), filler, dtype=np.float32)
    keep = np.zeros((len(seqs), T), dtype=bool)
    for i, s in enumerate(seqs):
        x2[i, : len(s)] = s
        keep[i, : len(s)] = True
    return torch.from_numpy(x2), torch.from_numpy(keep)


class SetEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)

    def forward(self, x, keep):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :].to(q.dtype))  # expect: MC508 numpy
        y = self.proj(y.transpose(1, 2).reshape(b, t, D)) + x
        w = keep[..., None].to(y.dtype)
        return (y * w).sum(1) / w.sum(1)


model = SetEncoder().eval()
x, keep = pad_batch(seqs)
x_junk, _ = pad_batch(seqs, filler=3.0)
with torch.no_grad():
    a = model(x, keep)
    b = model(x_junk, keep)
    tmp = model(*pad_batch(seqs[1:2]))
print("pooled vectors, zero vs junk padding:", np.abs((a - b).numpy()).max(axis=1).round(4))
print("sequence 1 batched vs alone:", float((a[1] - tmp[0]).abs().max()))
