"""Greedy speculative decoding: a draft model proposes tokens, the target verifies them in one pass.

Source: conventions.md §1 (SDPA row "is_causal": `tril(diagonal=0)`, aligned top-left when
L != S; use a lower-right mask for KV-cache style alignment) and §2.7, pytorch/pytorch PR #111007
(FlashAttention-2 aligns lower-right, SDPA's is_causal upper-left). The verify step runs several
new queries against keys that include the cache with `is_causal=True`.
"""

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.functional import scaled_dot_product_attention


@dataclass
class LayerCache:
    k: torch.Tensor | None = None
    v: torch.Tensor | None = None

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.k is None:
            self.k, self.v = k, v
        else:
            self.k, self.v = torch.cat([self.k, k], dim=2), torch.cat([self.v, v], dim=2)
        return self.k, self.v

    def crop(self, length: int) -> None:
        self.k, self.v = self.k[:, :, :length], self.v[:, :, :length]


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor, cache: LayerCache, mode: str) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        match mode:
            case "prefill":
                cache.append(k, v)
                out = scaled_dot_product_attention(q, k, v, is_causal=True)
            case "decode":
                k, v = cache.append(k, v)
                out = scaled_dot_product_attention(q, k, v)
            case "verify":
                k, v = cache.append(k, v)
                out = scaled_dot_product_attention(q, k, v, is_causal=True)  # expect: MC510 match
            case _:
                raise ValueError(f"unknown mode {mode!r}")
        return self.o(out.transpose(1, 2).reshape(b, t, d))


class TinyLM(nn.Module):
    def __init__(self, vocab: int = 128, dim: int = 64, heads: int = 4, depth: int = 2, max_pos: int = 256) -> None:
        super().__init__()
        self.emb, self.pos = nn.Embedding(vocab, dim), nn.Embedding(max_pos, dim)
        self.attn = nn.ModuleList(Attention(dim, heads) for _ in range(depth))
        self.mlp = nn.ModuleList(nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 4 * dim), nn.GELU(),
                                               nn.Linear(4 * dim, dim)) for _ in range(depth))
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(depth))
        self.head = nn.Linear(dim, vocab, bias=False)

    def new_cache(self) -> list[LayerCache]:
        return [LayerCache() for _ in self.attn]

    def forward(self, ids: torch.Tensor, cache: list[LayerCache], start: int, mode: str) -> torch.Tensor:
        x = self.emb(ids) + self.pos(torch.arange(start, start + ids.shape[1], device=ids.device))
        for attn, mlp, norm, c in zip(self.attn, self.mlp, self.norms, cache):
            x = x + attn(norm(x), c, mode)
            x = x + mlp(x)
        return self.head(x)


@torch.no_grad()
def greedy(model: TinyLM, prompt: torch.Tensor, n_new: int) -> torch.Tensor:
    cache, ids = model.new_cache(), prompt
    nxt = model(ids, cache, 0, "prefill")[:, -1:].argmax(-1)
    while ids.shape[1] < prompt.shape[1] + n_new:
        ids = torch.cat([ids, nxt], dim=1)
        nxt = model(nxt, cache, ids.shape[1] - 1, "decode")[:, -1:].argmax(-1)
    return ids


@torch.no_grad()
def speculative(target: TinyLM, draft: TinyLM, prompt: torch.Tensor, n_new: int, gamma: int = 4) -> torch.Tensor:
    t_cache, d_cache = target.new_cache(), draft.new_cache()
    t_next = target(prompt, t_cache, 0, "prefill")[:, -1:].argmax(-1)
    draft(prompt, d_cache, 0, "prefill")
    ids = torch.cat([prompt, t_next], dim=1)
    while ids.shape[1] < prompt.shape[1] + n_new:
        n = ids.shape[1]
        proposal, tok = [], ids[:, -1:]
        for i in range(gamma):
            tok = draft(tok, d_cache, n - 1 + i, "decode").argmax(-1)
            proposal.append(tok)
        proposal = torch.cat(proposal, dim=1)
        draft(tok, d_cache, n - 1 + gamma, "decode")  # keep the draft cache complete
        logits = target(torch.cat([ids[:, -1:], proposal], dim=1), t_cache, n - 1, "verify")
        choice = logits.argmax(-1)
        accepted = int((choice[:, :gamma] == proposal).long().cumprod(-1).sum())
        ids = torch.cat([ids, proposal[:, :accepted], choice[:, accepted : accepted + 1]], dim=1)
        for c in t_cache:
            c.crop(ids.shape[1] - 1)
        for c in d_cache:
            c.crop(ids.shape[1] - 1)
    return ids[:, : prompt.shape[1] + n_new]


if __name__ == "__main__":
    torch.manual_seed(0)
    target, draft = TinyLM().eval(), TinyLM(dim=32, depth=1).eval()
    prompt = torch.randint(0, 128, (1, 8))
    ref = greedy(target, prompt, 24)
    spec = speculative(target, draft, prompt, 24)
    print("greedy:     ", ref[0, 8:].tolist())
    print("speculative:", spec[0, 8:].tolist())
    print("identical:", torch.equal(ref, spec))
