"""Causal DNA language model over aligned haplotype windows of one reference region.

A batch holds haplotypes of many individuals over the same reference window, so assembly
gaps (runs of N in the reference) sit at the same columns for every row. The causal bias is
a buffer built once; gap columns are hidden as keys for the whole batch, and gap bases are
not predicted.

Source: masked_fill_inplace.txt, section 与模型缓冲区的配合 (seed)
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

BASES = {"A": 0, "C": 1, "G": 2, "T": 3, "N": 4}
N_ID = BASES["N"]


class CausalSelfAttention(nn.Module):
    def __init__(self, dim, heads, window):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.register_buffer("bias", torch.triu(torch.full((window, window), float("-inf")), diagonal=1))

    def forward(self, x, gap):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        bias = self.bias.masked_fill_(gap[None, :], float("-inf"))  # expect: MC524 genomics
        scores = q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5 + bias
        return self.proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d))


class HaplotypeLM(nn.Module):
    def __init__(self, window=48, dim=32, heads=4, depth=2):
        super().__init__()
        self.embed = nn.Embedding(len(BASES), dim)
        self.pos = nn.Parameter(torch.zeros(window, dim))
        self.attn = nn.ModuleList(CausalSelfAttention(dim, heads, window) for _ in range(depth))
        self.norm = nn.ModuleList(nn.LayerNorm(dim) for _ in range(depth))
        self.head = nn.Linear(dim, 4)

    def forward(self, tokens):
        gap = (tokens == N_ID).all(dim=0)
        x = self.embed(tokens) + self.pos
        for attn, norm in zip(self.attn, self.norm):
            x = x + attn(norm(x), gap)
        return self.head(x)


def region_batch(num_haplotypes, window, generator):
    ref = torch.randint(0, 4, (window,), generator=generator)
    start = int(torch.randint(4, window - 8, (1,), generator=generator))
    ref[start : start + 6] = N_ID
    haps = ref.repeat(num_haplotypes, 1)
    snps = (torch.rand(haps.shape, generator=generator) < 0.05) & (haps != N_ID)
    return torch.where(snps, torch.randint(0, 4, haps.shape, generator=generator), haps)


if __name__ == "__main__":
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    model = HaplotypeLM()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(8):
        tokens = region_batch(6, 48, g)
        logits = model(tokens)[:, :-1]
        target = tokens[:, 1:].masked_fill(tokens[:, 1:] == N_ID, -100)
        loss = F.cross_entropy(logits.reshape(-1, 4), target.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.3f}")
