"""Evoformer-lite trunk for antibody Fv structure: residue attention with pair bias,
outgoing triangle multiplicative update and a distogram head (IgFold / AlphaFold 2 layout).

Heavy and light chains are concatenated with a chain-break offset in the
relative positions; the batch holds Fv regions of different lengths.

Source: pytorch/pytorch#103749 (conventions.md section 3 item 5), Biohub/esm#299
(item 22); conventions.md section 2.3.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

AA = "ACDEFGHIKLMNPQRSTVWY"
CHAIN_BREAK = 32
N_BINS = 24


def encode_fv(heavy, light):
    seqs = [h + l for h, l in zip(heavy, light)]
    n = max(len(s) for s in seqs)
    aatype = torch.zeros(len(seqs), n, dtype=torch.long)
    residue_index = torch.zeros(len(seqs), n, dtype=torch.long)
    seq_mask = torch.zeros(len(seqs), n)
    for b, (h, l) in enumerate(zip(heavy, light)):
        s = h + l
        aatype[b, : len(s)] = torch.tensor([AA.index(c) for c in s])
        residue_index[b, : len(s)] = torch.cat([torch.arange(len(h)), torch.arange(len(l)) + len(h) + CHAIN_BREAK])
        seq_mask[b, : len(s)] = 1.0
    return aatype, residue_index, seq_mask


class RelPos(nn.Module):
    def __init__(self, c_z, max_rel=32):
        super().__init__()
        self.max_rel = max_rel
        self.linear = nn.Linear(2 * max_rel + 2, c_z)

    def forward(self, residue_index):
        d = residue_index[:, :, None] - residue_index[:, None, :]
        d = torch.clamp(d + self.max_rel, 0, 2 * self.max_rel)
        far = (residue_index[:, :, None] - residue_index[:, None, :]).abs() > CHAIN_BREAK // 2
        d = torch.where(far, torch.full_like(d, 2 * self.max_rel + 1), d)
        return self.linear(F.one_hot(d, 2 * self.max_rel + 2).float())


class TriangleMultiplicationOutgoing(nn.Module):
    def __init__(self, c_z, c_hidden=16):
        super().__init__()
        self.layer_norm_in = nn.LayerNorm(c_z)
        self.linear_a = nn.Linear(c_z, 2 * c_hidden)
        self.linear_b = nn.Linear(c_z, 2 * c_hidden)
        self.layer_norm_out = nn.LayerNorm(c_hidden)
        self.linear_z = nn.Linear(c_hidden, c_z)
        self.linear_g = nn.Linear(c_z, c_z)

    def forward(self, z, pair_mask):
        z_in = self.layer_norm_in(z)
        mask = pair_mask[..., None]
        a = F.glu(self.linear_a(z_in), dim=-1) * mask
        b = F.glu(self.linear_b(z_in), dim=-1) * mask
        x = torch.einsum("bikc,bjkc->bijc", a, b)
        return torch.sigmoid(self.linear_g(z_in)) * self.linear_z(self.layer_norm_out(x))


class AttentionWithPairBias(nn.Module):
    def __init__(self, c_s, c_z, heads=4):
        super().__init__()
        self.heads = heads
        self.c = c_s // heads
        self.norm_s = nn.LayerNorm(c_s)
        self.norm_z = nn.LayerNorm(c_z)
        self.qkv = nn.Linear(c_s, 3 * c_s, bias=False)
        self.pair_bias = nn.Linear(c_z, heads, bias=False)
        self.gate = nn.Linear(c_s, c_s)
        self.out = nn.Linear(c_s, c_s)

    def forward(self, s, z, seq_mask):
        b, n, _ = s.shape
        s_in = self.norm_s(s)
        q, k, v = self.qkv(s_in).view(b, n, 3, self.heads, self.c).permute(2, 0, 3, 1, 4)
        logits = torch.einsum("bhic,bhjc->bhij", q, k) / self.c ** 0.5
        logits = logits + self.pair_bias(self.norm_z(z)).permute(0, 3, 1, 2)
        pair_mask = seq_mask[:, :, None] * seq_mask[:, None, :]
        logits = logits.masked_fill(pair_mask[:, None] == 0, float("-inf"))  # expect: MC507 pair
        attn = torch.softmax(logits, dim=-1)
        o = torch.einsum("bhij,bhjc->bhic", attn, v).transpose(1, 2).reshape(b, n, -1)
        return self.out(torch.sigmoid(self.gate(s_in)) * o)


class TrunkBlock(nn.Module):
    def __init__(self, c_s, c_z):
        super().__init__()
        self.seq_attn = AttentionWithPairBias(c_s, c_z)
        self.seq_transition = nn.Sequential(nn.LayerNorm(c_s), nn.Linear(c_s, 2 * c_s), nn.ReLU(), nn.Linear(2 * c_s, c_s))
        self.outer = nn.Linear(c_s, c_z)
        self.tri_out = TriangleMultiplicationOutgoing(c_z)

    def forward(self, s, z, seq_mask):
        pair_mask = seq_mask[:, :, None] * seq_mask[:, None, :]
        s = s + self.seq_attn(s, z, seq_mask)
        s = s + self.seq_transition(s)
        p = self.outer(s)
        z = z + (p[:, :, None] * p[:, None, :]) * pair_mask[..., None]
        z = z + self.tri_out(z, pair_mask)
        return s, z


class FvTrunk(nn.Module):
    def __init__(self, c_s=32, c_z=16, blocks=2):
        super().__init__()
        self.embed = nn.Embedding(len(AA), c_s)
        self.relpos = RelPos(c_z)
        self.blocks = nn.ModuleList([TrunkBlock(c_s, c_z) for _ in range(blocks)])
        self.distogram = nn.Linear(c_z, N_BINS)

    def forward(self, aatype, residue_index, seq_mask):
        s = self.embed(aatype)
        z = self.relpos(residue_index)
        for block in self.blocks:
            s, z = block(s, z, seq_mask)
        logits = self.distogram(z)
        return logits + logits.transpose(1, 2)


def distogram_loss(logits, ca, seq_mask):
    d = torch.cdist(ca, ca)
    bins = torch.linspace(2.0, 22.0, N_BINS - 1)
    target = torch.bucketize(d, bins)
    pair = seq_mask[:, :, None] * seq_mask[:, None, :]
    nll = F.cross_entropy(logits.permute(0, 3, 1, 2), target, reduction="none")
    return (nll * pair).sum() / pair.sum().clamp(min=1.0)


if __name__ == "__main__":
    torch.manual_seed(0)
    heavy = ["EVQLVESGGGLVQ", "QVQLQESGPG", "EVKLLESG"]
    light = ["DIQMTQSPSS", "EIVLTQSPGTLS", "DIVMTQ"]
    aatype, residue_index, seq_mask = encode_fv(heavy, light)
    ca = torch.cumsum(torch.randn(aatype.size(0), aatype.size(1), 3) * 2.2, dim=1)
    model = FvTrunk()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(2):
        loss = distogram_loss(model(aatype, residue_index, seq_mask), ca, seq_mask)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("distogram loss", round(loss.item(), 4))
