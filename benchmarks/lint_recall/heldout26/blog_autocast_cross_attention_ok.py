"""Blog post snippet grown into a script: "Mixed precision for a cross-attention block with torch.autocast".

The post's Perceiver-style cross-attention: latents attend to a padded context; the scores are
computed under `torch.autocast(device, dtype=torch.float16)` (CUDA when present, the CPU's
float16 autocast otherwise), the context padding is filled before the softmax, and the softmax is
taken in float32. The context keep mask is built in a loop over a Python list of lengths. The
demo compares the autocast block with the float32 reference.

Source: huggingface/lerobot PR #710 (a float32-sized negative constant used to mask float16
attention weights under AMP), conventions.md §2.3 (finfo.min per dtype: fp16 -65504) and §3
item 19.
"""
import torch
from torch import nn

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"


class LatentCrossAttention(nn.Module):
    def __init__(self, d=32, ctx_dim=24, heads=4, n_latents=6, amp=True):
        super().__init__()
        self.h, self.dh, self.amp = heads, d // heads, amp
        self.latents = nn.Parameter(torch.randn(n_latents, d))
        self.to_q = nn.Linear(d, d, bias=False)
        self.to_kv = nn.Linear(ctx_dim, 2 * d, bias=False)
        self.out = nn.Linear(d, d)

    def forward(self, ctx, ctx_keep):
        b, s, _ = ctx.shape
        q = self.to_q(self.latents).view(1, -1, self.h, self.dh).transpose(1, 2)
        k, v = self.to_kv(ctx).view(b, s, 2, self.h, self.dh).permute(2, 0, 3, 1, 4)
        with torch.autocast(device, dtype=torch.float16, enabled=self.amp):
            sim = q @ k.transpose(-2, -1) * self.dh**-0.5
            sim = sim.masked_fill(~ctx_keep[:, None, None, :], torch.finfo(sim.dtype).min)
            attn = sim.float().softmax(dim=-1)
            y = attn.to(v.dtype) @ v
        y = y.transpose(1, 2).reshape(b, -1, self.h * self.dh)
        return self.out(y.float())


ctx_lens = [7, 3, 5]
S = max(ctx_lens)
ctx = torch.randn(len(ctx_lens), S, 24, device=device)
ctx_keep = torch.zeros(len(ctx_lens), S, dtype=torch.bool, device=device)
for i, n in enumerate(ctx_lens):
    ctx_keep[i, :n] = True

block = LatentCrossAttention(amp=False).to(device).eval()
with torch.no_grad():
    ref = block(ctx, ctx_keep)
    block.amp = True
    out = block(ctx, ctx_keep)
    junk = ctx.masked_fill(~ctx_keep[..., None], 5.0)
    out_junk = block(junk, ctx_keep)
print("autocast vs float32:", (out - ref).abs().max().item())
print("padding content changes the latents by:", (out_junk - out).abs().max().item())
