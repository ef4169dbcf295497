"""Blog post snippet grown into a script: "Caching the causal mask with register_buffer".

The post registers the look-ahead mask once (`nn.Transformer.generate_square_subsequent_mask`,
0 / -inf) as a buffer of a tiny character-level model and, when a line is shorter than the
block and padded, fills the padded columns from that buffer in forward. A reader's follow-up
runs lines one at a time (batch of one), as the post does, and runs the first line again at
the end.

Source: seed masked_fill_inplace.txt (section 与模型缓冲区的配合: a `register_buffer` mask
changed with `masked_fill_` inside forward; section 张量共享内存风险: in-place writes change
every name that shares the tensor).
"""
import torch
from torch import nn

torch.manual_seed(0)

chars = sorted(set("hello world, short line.~"))
stoi = {c: i for i, c in enumerate(chars)}
PAD = stoi["~"]
BLOCK = 12


class CharLM(nn.Module):
    def __init__(self, vocab, d=24, h=3):
        super().__init__()
        self.h = h
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(BLOCK, d) * 0.1)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.head = nn.Linear(d, vocab)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(BLOCK))

    def forward(self, idx):
        b, t = idx.shape
        pad = idx[0] == PAD
        x = self.emb(idx) + self.pos[:t]
        q, k, v = self.qkv(x).view(b, t, 3, self.h, -1).permute(2, 0, 3, 1, 4)
        m = self.mask.masked_fill_(pad[None, :], float("-inf"))  # expect: MC524 buffer
        att = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5 + m[:t, :t]
        y = att.softmax(-1) @ v
        y = y.transpose(1, 2).reshape(b, t, -1)
        return self.head(x + self.proj(y))


def encode(line):
    ids = [stoi[c] for c in line[:BLOCK]]
    return torch.tensor([ids + [PAD] * (BLOCK - len(ids))])


model = CharLM(len(chars)).eval()
lines = ["hello world,", "short line.", "hello world,"]
with torch.no_grad():
    outs = [model(encode(s)) for s in lines]
print("same line, first vs third call:", (outs[0] - outs[2]).abs().max().item())
print("buffer -inf count:", torch.isinf(model.mask).sum().item(), "of", BLOCK * (BLOCK - 1) // 2, "above the diagonal")
