"""Held-out 14 (correct twin): a graph-attention network (GAT) for molecular property prediction on dense,
padded adjacency matrices. Hyper-parameters live in a `typing.TypedDict` config with defaults in
a module-level dict, and the model is converted with `.half()` for batch screening on GPUs.

Source: NVIDIA/apex#1052 ("RuntimeError: value cannot be converted to type at::Half without
overflow: -1e+09": `masked_fill(mask, -1e9)` on half-precision scores), conventions.md §2.3, and
`maskcheck explain MC501`. Here the -1e9 is the config's `mask_value`, used as the fill of the
edge scores of the half-precision model.
Twin: `mask_value` is -inf, which float16 holds (every atom has a self-loop, so no row is empty).
Surroundings: a `TypedDict` config whose literal default is the fill value.
"""

from typing import TypedDict

import torch
from torch import nn


class GATConfig(TypedDict):
    atom_types: int
    hidden: int
    heads: int
    layers: int
    mask_value: float


DEFAULT_CONFIG: GATConfig = {
    "atom_types": 16,
    "hidden": 64,
    "heads": 4,
    "layers": 2,
    "mask_value": float("-inf"),
}


class GraphAttentionLayer(nn.Module):
    def __init__(self, cfg: GATConfig):
        super().__init__()
        self.cfg = cfg
        self.heads = cfg["heads"]
        self.lin = nn.Linear(cfg["hidden"], cfg["hidden"], bias=False)
        self.att_src = nn.Parameter(torch.randn(cfg["heads"], cfg["hidden"] // cfg["heads"]) * 0.1)
        self.att_dst = nn.Parameter(torch.randn(cfg["heads"], cfg["hidden"] // cfg["heads"]) * 0.1)

    def forward(self, x: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        # x (B, N, hidden); adj (B, N, N) bool, self-loops on every row (padded atoms too)
        b, n, _ = x.shape
        h = self.lin(x).view(b, n, self.heads, -1)
        a_src = (h * self.att_src).sum(-1)
        a_dst = (h * self.att_dst).sum(-1)
        e = nn.functional.leaky_relu(a_dst[:, :, None] + a_src[:, None, :], 0.2)  # (B, N, N, H)
        e = e.masked_fill(~adj[..., None], self.cfg["mask_value"])
        alpha = e.softmax(dim=2)
        out = torch.einsum("bijh,bjhd->bihd", alpha, h)
        return nn.functional.elu(out.reshape(b, n, -1))


class MoleculeGAT(nn.Module):
    def __init__(self, cfg: GATConfig = DEFAULT_CONFIG):
        super().__init__()
        self.embed = nn.Embedding(cfg["atom_types"], cfg["hidden"])
        self.layers = nn.ModuleList(GraphAttentionLayer(cfg) for _ in range(cfg["layers"]))
        self.readout = nn.Linear(cfg["hidden"], 1)

    def forward(self, atoms: torch.Tensor, adj: torch.Tensor, n_atoms: torch.Tensor) -> torch.Tensor:
        x = self.embed(atoms)
        for layer in self.layers:
            x = x + layer(x, adj)
        real = torch.arange(atoms.shape[1], device=atoms.device)[None, :] < n_atoms[:, None]
        x = x * real[..., None].to(x.dtype)
        return self.readout(x.sum(1) / n_atoms[:, None].to(x.dtype)).squeeze(-1)


def screening_model(state_dict: dict) -> MoleculeGAT:
    """Loads trained weights and converts the model to float16 for high-throughput screening."""
    model = MoleculeGAT()
    model.load_state_dict(state_dict)
    return model.half().eval()
