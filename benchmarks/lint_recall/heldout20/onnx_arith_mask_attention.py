"""Export-friendly text encoder: masks made with arithmetic, no bool ops, for ONNX runtimes.

Some ONNX runtimes and older opsets handle bool tensors, `masked_fill` and `where` poorly, so
this encoder keeps the padding mask as a float 0/1 tensor and applies it with arithmetic only.
The module goes through torch.export as an export smoke test (no onnx package needed).
Bug: the 0/1 keep-mask is multiplied into the logits before softmax (pads get exp(0) weight).
Source: seed self_attention_mask_guide.txt §3 common mistakes ("PyTorch中mask是加法而非乘法": a
mask is added, not multiplied) and Q3 (additive vs multiplicative masks).
"""
import math

import torch
import torch.nn as nn

PAD_ID = 0


class ExportableAttention(nn.Module):
    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.qkv, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x, keep):  # keep: float (B, S), 1.0 = real token, 0.0 = padding
        B, S, D = x.shape
        q, k, v = self.qkv(x).reshape(B, S, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        scores = scores * keep[:, None, None, :]  # expect: MC520 onnx
        probs = torch.softmax(scores, dim=-1)  # also: MC520
        ctx = torch.matmul(probs, v).transpose(1, 2).reshape(B, S, D)
        return self.out(ctx)


class ExportableEncoder(nn.Module):
    def __init__(self, vocab=100, dim=32, layers=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim, padding_idx=PAD_ID)
        self.pos = nn.Embedding(32, dim)
        self.attn = nn.ModuleList([ExportableAttention(dim) for _ in range(layers)])
        self.norm = nn.ModuleList([nn.LayerNorm(dim) for _ in range(layers)])

    def forward(self, input_ids):
        keep = (input_ids != PAD_ID).to(torch.float32)  # arithmetic mask, 1.0 = keep
        x = self.emb(input_ids) + self.pos.weight[: input_ids.shape[1]]
        for attn, norm in zip(self.attn, self.norm):
            x = x + attn(norm(x), keep)
        pooled = (x * keep[:, :, None]).sum(1) / keep.sum(1, keepdim=True).clamp(min=1.0)
        return pooled


if __name__ == "__main__":
    torch.manual_seed(0)
    enc = ExportableEncoder().eval()
    short = torch.tensor([[5, 6, 7]])
    padded = torch.tensor([[5, 6, 7, 0, 0, 0], [8, 9, 10, 11, 12, 13]])
    with torch.no_grad():
        exported = torch.export.export(enc, (padded,)).module()
        drift = (enc(short)[0] - exported(padded)[0]).abs().max().item()
    print("padded vs alone", drift)
