"""Profiled side-channel attack on AES power traces (ASCAD-style, Hamming-weight model).

Traces of one AES-128 encryption round are cut around the third S-box with a
jittered trigger, so windows differ in length and are padded. A patch
transformer learns the Hamming weight of the S-box output on the profiling
set; the attack phase ranks the 256 key-byte guesses by accumulated
log-likelihood over the attack traces.

Source: seed masked_fill_inplace.txt (梯度计算风险, 适用场景)
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


def _gf_mul(a, b):
    p = 0
    for _ in range(8):
        if b & 1:
            p ^= a
        hi = a & 0x80
        a = (a << 1) & 0xFF
        if hi:
            a ^= 0x1B
        b >>= 1
    return p


def build_sbox():
    inv = [0] + [next(y for y in range(1, 256) if _gf_mul(x, y) == 1) for x in range(1, 256)]
    sbox = []
    for x in inv:
        s = x
        for shift in range(1, 5):
            s ^= ((x << shift) | (x >> (8 - shift))) & 0xFF
        sbox.append(s ^ 0x63)
    return torch.tensor(sbox)


SBOX = build_sbox()
HW = torch.tensor([bin(i).count("1") for i in range(256)])
TARGET_BYTE = 2
POI = 180


def acquire(n_traces, key_byte, seed=0, min_len=320, max_len=400):
    g = torch.Generator().manual_seed(seed)
    plaintexts = torch.randint(256, (n_traces,), generator=g)
    leak = HW[SBOX[plaintexts ^ key_byte]].float()
    traces = []
    for i in range(n_traces):
        n = int(torch.randint(min_len, max_len + 1, (1,), generator=g))
        jitter = int(torch.randint(-6, 7, (1,), generator=g))
        t = 0.6 * torch.randn(n, generator=g)
        t[POI + jitter : POI + jitter + 4] += 0.8 * (leak[i] - 4.0)
        traces.append(t)
    return traces, plaintexts


def pad_traces(traces, patch):
    n = max(len(t) for t in traces)
    n = (n + patch - 1) // patch * patch
    x = torch.zeros(len(traces), n)
    sample_keep = torch.zeros(len(traces), n, dtype=torch.bool)
    for i, t in enumerate(traces):
        x[i, : len(t)] = t
        sample_keep[i, : len(t)] = True
    patch_keep = sample_keep.view(len(traces), -1, patch).any(-1)
    return x, patch_keep


class MaskedSoftmax(nn.Module):
    def forward(self, scores, keep):
        probs = torch.softmax(scores, dim=-1)
        probs = probs.masked_fill(~keep, 0.0)
        return probs / probs.sum(dim=-1, keepdim=True).clamp_min(1e-12)


class TraceAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.softmax = MaskedSoftmax()

    def forward(self, x, patch_keep):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) * (d // self.heads) ** -0.5
        attn = self.softmax(scores, patch_keep[:, None, None, :])
        return self.out((attn @ v).transpose(1, 2).reshape(b, n, d))


class TraceTransformer(nn.Module):
    def __init__(self, patch=16, dim=48, heads=4, depth=2, max_patches=32):
        super().__init__()
        self.patch = patch
        self.embed = nn.Conv1d(1, dim, kernel_size=patch, stride=patch)
        self.pos = nn.Parameter(torch.zeros(1, max_patches, dim))
        self.attn = nn.ModuleList(TraceAttention(dim, heads) for _ in range(depth))
        self.mlp = nn.ModuleList(nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim)) for _ in range(depth))
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(depth))
        self.head = nn.Linear(dim, 9)

    def forward(self, traces, patch_keep):
        x = self.embed(traces.unsqueeze(1)).transpose(1, 2)
        x = x + self.pos[:, : x.shape[1]]
        for norm, attn, mlp in zip(self.norms, self.attn, self.mlp):
            x = x + attn(norm(x), patch_keep)
            x = x + mlp(x)
        w = patch_keep.unsqueeze(-1).float()
        return self.head((x * w).sum(1) / w.sum(1))


@torch.no_grad()
def key_rank(model, traces, plaintexts, true_key):
    model.eval()
    x, keep = pad_traces(traces, model.patch)
    log_p = F.log_softmax(model(x, keep), dim=-1)
    guesses = torch.arange(256)
    hw = HW[SBOX[plaintexts[:, None] ^ guesses[None, :]]]
    scores = log_p.gather(1, hw).sum(0)
    return int((scores > scores[true_key]).sum())


def main():
    torch.manual_seed(0)
    key = 0x4D
    prof_traces, prof_pt = acquire(2000, key_byte=0x2B, seed=1)
    labels = HW[SBOX[prof_pt ^ 0x2B]]
    attack_traces, attack_pt = acquire(300, key_byte=key, seed=2)
    model = TraceTransformer()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(5):
        model.train()
        perm = torch.randperm(len(prof_traces))
        for i in range(0, len(perm), 100):
            idx = perm[i : i + 100]
            x, keep = pad_traces([prof_traces[j] for j in idx], model.patch)
            loss = F.cross_entropy(model(x, keep), labels[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"epoch {epoch} loss {loss.item():.3f} key rank {key_rank(model, attack_traces, attack_pt, key)}")


if __name__ == "__main__":
    main()
