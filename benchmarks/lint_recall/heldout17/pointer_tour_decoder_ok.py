"""Attention-model tour construction for routing, Kool et al. style, in small functional helpers (correct twin).

Source: the seed article on `masked_fill_` (`masked_fill` returns a new tensor and leaves the
original unchanged; only the underscore form works in place: its first example prints the
untouched `attn_scores` after `masked_fill`). The pointer logits are "masked" with a
`masked_fill` whose result is thrown away, so visited cities and padding stay selectable.
Twin: `logits = logits.masked_fill(blocked, float("-inf"))`.
"""

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def pad_instances(coords: list[Tensor]) -> tuple[Tensor, Tensor]:
    """List of (n_i, 2) city coordinates -> (B, N, 2) padded coords and (B, N) bool, True = real city."""
    n = max(c.shape[0] for c in coords)
    out = torch.zeros(len(coords), n, 2)
    real = torch.zeros(len(coords), n, dtype=torch.bool)
    for i, c in enumerate(coords):
        out[i, : len(c)], real[i, : len(c)] = c, True
    return out, real


def glimpse(query: Tensor, keys: Tensor, values: Tensor, blocked: Tensor, heads: int) -> Tensor:
    """Multi-head attention of the decoder context over the cities; `blocked` (B, N) True = unavailable."""
    b, n, d = keys.shape
    q = query.view(b, heads, 1, d // heads)
    k = keys.view(b, n, heads, -1).transpose(1, 2)
    v = values.view(b, n, heads, -1).transpose(1, 2)
    keep = ~blocked[:, None, None, :]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep).reshape(b, d)


def pointer_log_probs(logits: Tensor, blocked: Tensor, clip: float = 10.0) -> Tensor:
    logits = clip * torch.tanh(logits)
    logits = logits.masked_fill(blocked, float("-inf"))
    return F.log_softmax(logits, dim=-1)


class TourModel(nn.Module):
    def __init__(self, dim: int = 64, heads: int = 4, layers: int = 2):
        super().__init__()
        self.heads = heads
        self.embed = nn.Linear(2, dim)
        enc = nn.TransformerEncoderLayer(dim, heads, 2 * dim, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(enc, layers, enable_nested_tensor=False)
        self.kvl = nn.Linear(dim, 3 * dim, bias=False)
        self.ctx = nn.Linear(3 * dim, dim, bias=False)
        self.first_placeholder = nn.Parameter(torch.randn(2 * dim) * 0.1)

    def encode(self, coords: Tensor, real: Tensor) -> Tensor:
        return self.encoder(self.embed(coords), src_key_padding_mask=~real)

    @torch.no_grad()
    def greedy_tour(self, coords: Tensor, real: Tensor) -> Tensor:
        h = self.encode(coords, real)
        graph = (h * real[..., None]).sum(1) / real.sum(1, keepdim=True)
        k, v, logit_k = self.kvl(h).chunk(3, dim=-1)
        b, n, d = h.shape
        blocked = ~real  # padding cities can never be chosen
        last = self.first_placeholder.expand(b, -1)
        tour = []
        for _ in range(n):
            done = blocked.all(dim=-1, keepdim=True)
            step_blocked = blocked.masked_fill(done, False)  # finished instances idle; ignored later
            query = self.ctx(torch.cat([graph, last], dim=-1))
            g = glimpse(query, k, v, step_blocked, self.heads)
            logits = torch.einsum("bd,bnd->bn", g, logit_k) / d**0.5
            nxt = pointer_log_probs(logits, step_blocked).argmax(-1)
            tour.append(nxt)
            blocked = blocked.scatter(1, nxt[:, None], True)
            if len(tour) == 1:
                first = h[torch.arange(b), nxt]
            last = torch.cat([first, h[torch.arange(b), nxt]], dim=-1)
        return torch.stack(tour, dim=1)


def tour_length(coords: Tensor, tour: Tensor, real: Tensor) -> Tensor:
    steps = real.sum(1)
    ordered = coords.gather(1, tour[..., None].expand(-1, -1, 2))
    legs = (ordered.roll(-1, dims=1) - ordered).norm(dim=-1)
    idx = torch.arange(tour.shape[1])[None, :]
    closing = (ordered[torch.arange(len(tour)), steps - 1] - ordered[:, 0]).norm(dim=-1)
    return (legs * (idx < steps[:, None] - 1)).sum(1) + closing


if __name__ == "__main__":
    torch.manual_seed(0)
    coords, real = pad_instances([torch.rand(10, 2), torch.rand(7, 2)])
    model = TourModel().eval()
    tours = model.greedy_tour(coords, real)
    for i, n in enumerate(real.sum(1).tolist()):
        visited = tours[i, :n].tolist()
        valid = sorted(visited) == list(range(n))
        print(f"instance {i}: tour {visited} valid={valid}")
    print("lengths:", tour_length(coords, tours, real).tolist())
