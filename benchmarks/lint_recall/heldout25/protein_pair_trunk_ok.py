"""A single-sequence protein folding trunk (ESMFold / Evoformer style) with a distogram head.

A single representation s (batch, L, c_s) and a pair representation z (batch, L, L, c_z) are
refined by blocks of: gated self-attention on s with a bias from z, an outer-product-mean
update of z from s, a triangle multiplicative update and triangle self-attention on z. Proteins
of different lengths are right-padded; `seq_mask` (batch, L) is True at real residues and
`pair_mask` = seq_mask_i AND seq_mask_j. The pair mask is right for multiplying updates and for
weighting pair losses; an attention softmax over keys must only hide padded *keys*: a padded
residue's query row still has real keys to look at, and must, or its row is empty.

Source: Biohub/esm#299 (ESM3 / ESMC attention mask built from the padding flags of both
residues) and pytorch/pytorch#103749 (a fully masked query row softmaxes to NaN);
conventions.md §3 items 5 and 22.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

NUM_AA = 21  # 20 amino acids + padding (0)


class SingleAttentionWithPairBias(nn.Module):
    def __init__(self, c_s, c_z, heads=4):
        super().__init__()
        self.heads, self.head_dim = heads, c_s // heads
        self.norm_s = nn.LayerNorm(c_s)
        self.norm_z = nn.LayerNorm(c_z)
        self.qkv = nn.Linear(c_s, 3 * c_s, bias=False)
        self.pair_bias = nn.Linear(c_z, heads, bias=False)
        self.gate = nn.Linear(c_s, c_s)
        self.out = nn.Linear(c_s, c_s)

    def forward(self, s, z, seq_mask):
        b, n, c = s.shape
        pair_keep = seq_mask[:, :, None] & seq_mask[:, None, :]
        x = self.norm_s(s)
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        bias = self.pair_bias(self.norm_z(z)).permute(0, 3, 1, 2) * pair_keep[:, None]
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim) + bias
        scores = scores.masked_fill(~seq_mask[:, None, None, :], float("-inf"))
        attn = scores.softmax(dim=-1)
        o = (attn @ v).transpose(1, 2).reshape(b, n, c)
        return self.out(torch.sigmoid(self.gate(x)) * o)


class OuterProductMean(nn.Module):
    def __init__(self, c_s, c_z, c_hidden=8):
        super().__init__()
        self.norm = nn.LayerNorm(c_s)
        self.left = nn.Linear(c_s, c_hidden)
        self.right = nn.Linear(c_s, c_hidden)
        self.out = nn.Linear(c_hidden * c_hidden, c_z)

    def forward(self, s, seq_mask):
        m = seq_mask[..., None].to(s.dtype)
        x = self.norm(s)
        a, b = self.left(x) * m, self.right(x) * m
        outer = torch.einsum("bic,bjd->bijcd", a, b).flatten(-2)
        return self.out(outer) * (m[:, :, None] * m[:, None, :])


class TriangleMultiplicationOutgoing(nn.Module):
    def __init__(self, c_z, c_hidden=16):
        super().__init__()
        self.norm_in = nn.LayerNorm(c_z)
        self.a_proj, self.a_gate = nn.Linear(c_z, c_hidden), nn.Linear(c_z, c_hidden)
        self.b_proj, self.b_gate = nn.Linear(c_z, c_hidden), nn.Linear(c_z, c_hidden)
        self.norm_out = nn.LayerNorm(c_hidden)
        self.out = nn.Linear(c_hidden, c_z)
        self.gate = nn.Linear(c_z, c_z)

    def forward(self, z, pair_mask):
        mask = pair_mask[..., None].to(z.dtype)
        x = self.norm_in(z)
        a = torch.sigmoid(self.a_gate(x)) * self.a_proj(x) * mask
        b = torch.sigmoid(self.b_gate(x)) * self.b_proj(x) * mask
        update = torch.einsum("bikc,bjkc->bijc", a, b)
        return torch.sigmoid(self.gate(x)) * self.out(self.norm_out(update)) * mask


class TriangleAttentionStartingNode(nn.Module):
    """For each row i: z_ij attends over k to z_ik, with a bias from z_jk (AF2 Algorithm 13)."""

    def __init__(self, c_z, heads=4, c_hidden=8):
        super().__init__()
        self.heads, self.c_hidden = heads, c_hidden
        self.norm = nn.LayerNorm(c_z)
        self.q = nn.Linear(c_z, heads * c_hidden, bias=False)
        self.k = nn.Linear(c_z, heads * c_hidden, bias=False)
        self.v = nn.Linear(c_z, heads * c_hidden, bias=False)
        self.bias = nn.Linear(c_z, heads, bias=False)
        self.gate = nn.Linear(c_z, heads * c_hidden)
        self.out = nn.Linear(heads * c_hidden, c_z)

    def forward(self, z, seq_mask):
        b, n, _, _ = z.shape
        x = self.norm(z)

        def heads(t):
            return t.view(b, n, n, self.heads, self.c_hidden).permute(0, 1, 3, 2, 4)

        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.c_hidden)
        scores = scores + self.bias(x).permute(0, 3, 1, 2)[:, None]
        key_bias = torch.where(seq_mask[:, None, None, None, :], 0.0, torch.finfo(scores.dtype).min)
        attn = (scores + key_bias).softmax(dim=-1)
        o = (attn @ v).permute(0, 1, 3, 2, 4).reshape(b, n, n, -1)
        return self.out(torch.sigmoid(self.gate(x)) * o)


class Transition(nn.Module):
    def __init__(self, c, n=2):
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(c), nn.Linear(c, n * c), nn.ReLU(), nn.Linear(n * c, c))

    def forward(self, x):
        return self.net(x)


class TrunkBlock(nn.Module):
    def __init__(self, c_s, c_z):
        super().__init__()
        self.single_attn = SingleAttentionWithPairBias(c_s, c_z)
        self.single_transition = Transition(c_s)
        self.outer_product_mean = OuterProductMean(c_s, c_z)
        self.tri_mul = TriangleMultiplicationOutgoing(c_z)
        self.tri_att = TriangleAttentionStartingNode(c_z)
        self.pair_transition = Transition(c_z)

    def forward(self, s, z, seq_mask):
        pair_mask = seq_mask[:, :, None] & seq_mask[:, None, :]
        s = s + self.single_attn(s, z, seq_mask)
        s = s + self.single_transition(s)
        z = z + self.outer_product_mean(s, seq_mask)
        z = z + self.tri_mul(z, pair_mask)
        z = z + self.tri_att(z, seq_mask)
        z = z + self.pair_transition(z)
        return s, z


class FoldingTrunk(nn.Module):
    def __init__(self, c_s=32, c_z=16, num_blocks=2, max_relpos=8, num_bins=16):
        super().__init__()
        self.max_relpos = max_relpos
        self.embed_aa = nn.Embedding(NUM_AA, c_s, padding_idx=0)
        self.pair_left = nn.Linear(c_s, c_z)
        self.pair_right = nn.Linear(c_s, c_z)
        self.relpos = nn.Linear(2 * max_relpos + 1, c_z)
        self.blocks = nn.ModuleList(TrunkBlock(c_s, c_z) for _ in range(num_blocks))
        self.distogram_head = nn.Linear(c_z, num_bins)
        self.plddt_head = nn.Sequential(nn.LayerNorm(c_s), nn.Linear(c_s, 1))

    def forward(self, aatype, residue_index):
        seq_mask = aatype != 0
        s = self.embed_aa(aatype)
        offset = (residue_index[:, :, None] - residue_index[:, None, :]).clamp(-self.max_relpos, self.max_relpos)
        z = self.pair_left(s)[:, :, None] + self.pair_right(s)[:, None, :]
        z = z + self.relpos(F.one_hot(offset + self.max_relpos, 2 * self.max_relpos + 1).to(s.dtype))
        for block in self.blocks:
            s, z = block(s, z, seq_mask)
        logits = self.distogram_head(z)
        distogram_logits = logits + logits.transpose(1, 2)
        plddt = torch.sigmoid(self.plddt_head(s).squeeze(-1)) * seq_mask
        return {"single": s, "pair": z, "distogram_logits": distogram_logits, "plddt": plddt, "seq_mask": seq_mask}


def distogram_loss(distogram_logits, coords, seq_mask, min_bin=2.0, max_bin=22.0):
    """Cross-entropy over distance bins, averaged over real residue pairs only."""
    num_bins = distogram_logits.shape[-1]
    boundaries = torch.linspace(min_bin, max_bin, num_bins - 1)
    dist = torch.cdist(coords, coords)
    true_bins = torch.bucketize(dist, boundaries)
    pair_mask = (seq_mask[:, :, None] & seq_mask[:, None, :]).to(distogram_logits.dtype)
    errors = F.cross_entropy(distogram_logits.permute(0, 3, 1, 2), true_bins, reduction="none")
    return (errors * pair_mask).sum() / pair_mask.sum().clamp(min=1.0)


def mean_plddt(plddt, seq_mask):
    return plddt.sum(-1) / seq_mask.sum(-1).clamp(min=1)


def contact_map(distogram_logits, seq_mask, contact_bins=4):
    """P(distance < ~8 A) for real pairs; padded pairs are 0."""
    probs = distogram_logits.softmax(-1)[..., :contact_bins].sum(-1)
    return probs * (seq_mask[:, :, None] & seq_mask[:, None, :])


def batch_proteins(sequences):
    alphabet = "ACDEFGHIKLMNPQRSTVWY"
    n = max(map(len, sequences))
    aatype = torch.zeros(len(sequences), n, dtype=torch.long)
    residue_index = torch.arange(n)[None].repeat(len(sequences), 1)
    for i, seq in enumerate(sequences):
        aatype[i, : len(seq)] = torch.tensor([alphabet.index(a) + 1 for a in seq])
    return aatype, residue_index


if __name__ == "__main__":
    torch.manual_seed(0)
    model = FoldingTrunk().eval()
    seqs = ["MKTAYIA", "GSHMLEDPVR"]
    aatype, residue_index = batch_proteins(seqs)
    with torch.no_grad():
        out = model(aatype, residue_index)
        alone = model(*batch_proteins(seqs[:1]))
    n = len(seqs[0])
    print("single rep finite:", bool(out["single"].isfinite().all()))
    print("protein 0 pair rep: batched vs alone max |diff| =", (out["pair"][0, :n, :n] - alone["pair"][0]).abs().max().item())
    print("mean pLDDT", [round(x, 4) for x in mean_plddt(out["plddt"], out["seq_mask"]).tolist()])
    contacts = contact_map(out["distogram_logits"], out["seq_mask"])
    print("contacts on padded pairs:", contacts[0, n:, :].abs().sum().item())
    model.train()
    coords = torch.randn(2, aatype.shape[1], 3) * 6
    loss = distogram_loss(model(aatype, residue_index)["distogram_logits"], coords, aatype != 0)
    loss.backward()
    print("distogram loss", round(loss.item(), 4))
