"""ESMFold-style folding trunk with a distogram head, trained on synthetic backbones.

Laid out after facebookresearch/esm's ``esm/esmfold/v1`` (``RelativePosition``, the gated
``Attention`` with a pair bias, ``SequenceToPair``, ``PairToSequence``, ``ResidueMLP``, the
triangular multiplicative updates, ``TriangularSelfAttentionBlock``, ``FoldingTrunk``); batches
of proteins of different lengths are padded and carry a residue ``mask``.

Source: pytorch/pytorch#103749 and Biohub/esm#299 (conventions.md §3 items 5 and 22),
conventions.md §2.3.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

restypes = "ACDEFGHIKLMNPQRSTVWY"


@dataclass
class FoldingTrunkConfig:
    sequence_state_dim: int = 64
    pairwise_state_dim: int = 32
    sequence_head_width: int = 16
    num_blocks: int = 2
    position_bins: int = 16
    distogram_bins: int = 16
    max_distance: float = 24.0


def batch_encode_sequences(sequences: list[str]):
    L = max(len(s) for s in sequences)
    aatype = torch.full((len(sequences), L), len(restypes), dtype=torch.long)
    for i, seq in enumerate(sequences):
        aatype[i, : len(seq)] = torch.tensor([restypes.index(a) for a in seq])
    mask = aatype != len(restypes)
    residx = torch.arange(L).expand(len(sequences), -1) * mask
    return aatype, mask, residx


class RelativePosition(nn.Module):
    def __init__(self, bins: int, pairwise_state_dim: int):
        super().__init__()
        self.bins = bins
        self.embedding = nn.Embedding(2 * bins + 2, pairwise_state_dim)

    def forward(self, residue_index: torch.Tensor, mask: torch.Tensor | None = None):
        diff = residue_index[:, None, :] - residue_index[:, :, None]
        diff = diff.clamp(-self.bins, self.bins) + self.bins + 1
        if mask is not None:
            diff = diff.masked_fill(~(mask[:, None, :] & mask[:, :, None]), 0)
        return self.embedding(diff)


class Attention(nn.Module):
    def __init__(self, embed_dim: int, num_heads: int, head_width: int):
        super().__init__()
        self.num_heads, self.head_width = num_heads, head_width
        self.proj = nn.Linear(embed_dim, 3 * num_heads * head_width, bias=False)
        self.o_proj = nn.Linear(num_heads * head_width, embed_dim)
        self.g_proj = nn.Linear(embed_dim, num_heads * head_width)
        self.rescale_factor = head_width**-0.5

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, bias=None):
        B, L, _ = x.shape
        t = self.proj(x).view(B, L, self.num_heads, 3 * self.head_width).permute(0, 2, 1, 3)
        q, k, v = t.chunk(3, dim=-1)
        a = torch.einsum("...qc,...kc->...qk", self.rescale_factor * q, k)
        if bias is not None:
            a = a + bias.permute(0, 3, 1, 2)
        if mask is not None:
            a = a.masked_fill(~mask[:, None], float("-inf"))  # expect: MC507 esmfold
        a = F.softmax(a, dim=-1)
        y = torch.einsum("...hqk,...hkc->...qhc", a, v).reshape(B, L, -1)
        return self.o_proj(self.g_proj(x).sigmoid() * y), a


class SequenceToPair(nn.Module):
    def __init__(self, sequence_state_dim: int, inner_dim: int, pairwise_state_dim: int):
        super().__init__()
        self.layernorm = nn.LayerNorm(sequence_state_dim)
        self.proj = nn.Linear(sequence_state_dim, inner_dim * 2)
        self.o_proj = nn.Linear(2 * inner_dim, pairwise_state_dim)

    def forward(self, sequence_state: torch.Tensor) -> torch.Tensor:
        q, k = self.proj(self.layernorm(sequence_state)).chunk(2, dim=-1)
        prod = q[:, None, :, :] * k[:, :, None, :]
        diff = q[:, None, :, :] - k[:, :, None, :]
        return self.o_proj(torch.cat([prod, diff], dim=-1))


class PairToSequence(nn.Module):
    def __init__(self, pairwise_state_dim: int, num_heads: int):
        super().__init__()
        self.layernorm = nn.LayerNorm(pairwise_state_dim)
        self.linear = nn.Linear(pairwise_state_dim, num_heads, bias=False)

    def forward(self, pairwise_state: torch.Tensor) -> torch.Tensor:
        return self.linear(self.layernorm(pairwise_state))


class ResidueMLP(nn.Module):
    def __init__(self, embed_dim: int, inner_dim: int):
        super().__init__()
        layers = [nn.LayerNorm(embed_dim), nn.Linear(embed_dim, inner_dim), nn.ReLU()]
        self.mlp = nn.Sequential(*layers, nn.Linear(inner_dim, embed_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(x)


class TriangleMultiplicativeUpdate(nn.Module):
    def __init__(self, c_z: int, outgoing: bool):
        super().__init__()
        self.equation = "bikc,bjkc->bijc" if outgoing else "bkic,bkjc->bijc"
        self.layer_norm_in, self.layer_norm_out = nn.LayerNorm(c_z), nn.LayerNorm(c_z)
        self.linear_a, self.linear_b = nn.Linear(c_z, 2 * c_z), nn.Linear(c_z, 2 * c_z)
        self.linear_g, self.linear_z = nn.Linear(c_z, c_z), nn.Linear(c_z, c_z)

    def forward(self, z: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        mask = mask.unsqueeze(-1).to(z.dtype)
        z = self.layer_norm_in(z)
        a_p, a_g = self.linear_a(z).chunk(2, dim=-1)
        b_p, b_g = self.linear_b(z).chunk(2, dim=-1)
        x = torch.einsum(self.equation, mask * a_g.sigmoid() * a_p, mask * b_g.sigmoid() * b_p)
        return self.linear_z(self.layer_norm_out(x)) * self.linear_g(z).sigmoid()


class TriangularSelfAttentionBlock(nn.Module):
    def __init__(self, cfg: FoldingTrunkConfig):
        super().__init__()
        s_dim, z_dim = cfg.sequence_state_dim, cfg.pairwise_state_dim
        num_heads = s_dim // cfg.sequence_head_width
        self.layernorm_1 = nn.LayerNorm(s_dim)
        self.sequence_to_pair = SequenceToPair(s_dim, z_dim // 2, z_dim)
        self.pair_to_sequence = PairToSequence(z_dim, num_heads)
        self.seq_attention = Attention(s_dim, num_heads, cfg.sequence_head_width)
        self.tri_mul_out = TriangleMultiplicativeUpdate(z_dim, outgoing=True)
        self.tri_mul_in = TriangleMultiplicativeUpdate(z_dim, outgoing=False)
        self.mlp_seq, self.mlp_pair = ResidueMLP(s_dim, 4 * s_dim), ResidueMLP(z_dim, 4 * z_dim)

    def forward(self, sequence_state, pairwise_state, mask: torch.Tensor):
        tri_mask = mask.unsqueeze(2) & mask.unsqueeze(1)
        bias = self.pair_to_sequence(pairwise_state)
        y, _ = self.seq_attention(self.layernorm_1(sequence_state), mask=tri_mask, bias=bias)
        sequence_state = self.mlp_seq(sequence_state + y)
        pairwise_state = pairwise_state + self.sequence_to_pair(sequence_state)
        pairwise_state = pairwise_state + self.tri_mul_out(pairwise_state, mask=tri_mask)
        pairwise_state = pairwise_state + self.tri_mul_in(pairwise_state, mask=tri_mask)
        return sequence_state, self.mlp_pair(pairwise_state)


class FoldingTrunk(nn.Module):
    def __init__(self, cfg: FoldingTrunkConfig):
        super().__init__()
        self.pairwise_positional_embedding = RelativePosition(
            cfg.position_bins, cfg.pairwise_state_dim
        )
        self.blocks = nn.ModuleList(
            TriangularSelfAttentionBlock(cfg) for _ in range(cfg.num_blocks)
        )

    def forward(self, seq_feats, pair_feats, residx: torch.Tensor, mask: torch.Tensor):
        s_s, s_z = seq_feats, pair_feats + self.pairwise_positional_embedding(residx, mask=mask)
        for block in self.blocks:
            s_s, s_z = block(s_s, s_z, mask)
        return s_s, s_z


class DistogramFolder(nn.Module):
    def __init__(self, cfg: FoldingTrunkConfig):
        super().__init__()
        self.cfg = cfg
        self.embedding = nn.Embedding(len(restypes) + 1, cfg.sequence_state_dim)
        self.trunk = FoldingTrunk(cfg)
        self.distogram_head = nn.Linear(cfg.pairwise_state_dim, cfg.distogram_bins)

    def forward(self, aatype: torch.Tensor, mask: torch.Tensor, residx: torch.Tensor):
        s_s = self.embedding(aatype)
        s_z = s_s.new_zeros(*aatype.shape, aatype.shape[1], self.cfg.pairwise_state_dim)
        _, s_z = self.trunk(s_s, s_z, residx, mask)
        logits = self.distogram_head(s_z)
        return logits + logits.transpose(1, 2)


def synthetic_protein(rng: random.Random):
    seq = "".join(rng.choice(restypes) for _ in range(rng.randint(16, 40)))
    coords, direction = [torch.zeros(3)], torch.tensor([1.0, 0.0, 0.0])
    for aa in seq[1:]:
        turn = 1.2 if aa in "AELMQKRH" else 0.4
        rot = torch.tensor(
            [
                [math.cos(turn), -math.sin(turn), 0.0],
                [math.sin(turn), math.cos(turn), 0.0],
                [0.0, 0.0, 1.0],
            ]
        )
        direction = rot @ direction + torch.tensor([0.0, 0.0, 0.3 * (rng.random() - 0.5)])
        coords.append(coords[-1] + 3.8 * direction / direction.norm())
    return seq, torch.stack(coords)


def distogram_targets(coords: list[torch.Tensor], L: int, cfg: FoldingTrunkConfig):
    target = torch.zeros(len(coords), L, L, dtype=torch.long)
    for i, x in enumerate(coords):
        d = torch.cdist(x, x).clamp(max=cfg.max_distance - 1e-3)
        target[i, : len(x), : len(x)] = (d / cfg.max_distance * cfg.distogram_bins).long()
    return target


def main() -> None:
    torch.manual_seed(0)
    rng, cfg = random.Random(0), FoldingTrunkConfig()
    model = DistogramFolder(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(40):
        seqs, coords = zip(*(synthetic_protein(rng) for _ in range(8)))
        aatype, mask, residx = batch_encode_sequences(list(seqs))
        target = distogram_targets(list(coords), aatype.shape[1], cfg)
        logits = model(aatype, mask, residx)
        pair_mask = mask[:, :, None] & mask[:, None, :]
        loss = F.cross_entropy(logits[pair_mask], target[pair_mask])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 10 == 0:
            print(f"step {step} distogram loss {loss.item():.3f}")
    model.eval()
    seqs, coords = zip(*(synthetic_protein(rng) for _ in range(16)))
    aatype, mask, residx = batch_encode_sequences(list(seqs))
    with torch.no_grad():
        logits = model(aatype, mask, residx)
        alone = model(*batch_encode_sequences([seqs[0]]))
    pair_mask = mask[:, :, None] & mask[:, None, :]
    target = distogram_targets(list(coords), aatype.shape[1], cfg)
    pred, n = logits.argmax(-1), len(seqs[0])
    gap = (alone[0] - logits[0, :n, :n]).abs().max().item()
    print(f"distogram accuracy {(pred == target)[pair_mask].float().mean().item():.3f}")
    print(f"first protein alone vs batched: {gap:.2e}")


if __name__ == "__main__":
    main()
