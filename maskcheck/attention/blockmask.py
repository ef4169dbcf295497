"""A FlexAttention `BlockMask` as a dense token-level keep-mask, bounded in size.

A BlockMask says, per (batch, head, query block), which key blocks are computed: "full" blocks
(every cell kept, `mask_mod` not evaluated) and partial blocks (`mask_mod` decides per cell);
a block in neither list is skipped, so all its cells are masked. The keep-mask here is exactly
that reading: kept = (full block) or (partial block and mask_mod(b, h, q, kv)).
`mask_mod` is evaluated with torch's own `create_mask`; when it cannot be evaluated outside
its original context, partial blocks are counted as kept and the note says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from maskcheck.errors import MaskcheckError

MAX_CELLS = 1 << 24  # 16 M bools: 16 MiB; bigger masks are expanded for batch 0, head 0 only


@dataclass
class ExpandedBlockMask:
    keep: torch.Tensor  # bool (B, H, L, S) on the CPU, True = attend
    block_size: tuple[int, int]
    full_blocks: int
    partial_blocks: int
    skipped_blocks: int
    partial_where: list[tuple[int, int, int, int]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def evidence(self) -> list[str]:
        bq, bk = self.block_size
        total = self.full_blocks + self.partial_blocks + self.skipped_blocks
        lines = [f"BlockMask of {bq}x{bk} blocks: {self.full_blocks} full, "
                 f"{self.partial_blocks} partial (mask_mod decides per cell), "
                 f"{self.skipped_blocks} skipped, of {total}"]
        if self.partial_where:
            shown = ", ".join(f"(b{b},h{h},q{q},kv{k})" for b, h, q, k in self.partial_where[:8])
            more = self.partial_blocks - min(8, len(self.partial_where))
            lines.append(f"partial blocks (batch, head, query block, key block): {shown}"
                         + (f" and {more} more" if more > 0 else ""))
        return lines + self.notes


def is_block_mask(obj: Any) -> bool:
    return type(obj).__name__ == "BlockMask" and hasattr(obj, "kv_indices")


def _blocks_dense(num: torch.Tensor, idx: torch.Tensor, ncols: int) -> torch.Tensor:
    """(…, q_blocks, ncols) bool from a (num_blocks, indices) pair."""
    cols = torch.arange(idx.shape[-1], device=idx.device)
    valid = cols < num.unsqueeze(-1)
    dense = torch.zeros(*idx.shape[:-1], ncols + 1, dtype=torch.bool, device=idx.device)
    dense.scatter_(-1, torch.where(valid, idx.long(), ncols).clamp(max=ncols), True)
    return dense[..., :ncols]


def _to_tokens(blocks: torch.Tensor, bq: int, bk: int, l_len: int, s_len: int) -> torch.Tensor:
    return blocks.repeat_interleave(bq, -2).repeat_interleave(bk, -1)[..., :l_len, :s_len]


def expand_block_mask(block_mask: Any, max_cells: int = MAX_CELLS) -> ExpandedBlockMask:
    if not is_block_mask(block_mask):
        raise MaskcheckError(f"not a FlexAttention BlockMask: {type(block_mask).__name__}")
    l_len, s_len = (int(x) for x in block_mask.seq_lengths)
    bs = block_mask.BLOCK_SIZE
    bq, bk = (int(bs[0]), int(bs[1])) if isinstance(bs, tuple) else (int(bs), int(bs))
    num, idx = block_mask.kv_num_blocks.detach().cpu(), block_mask.kv_indices.detach().cpu()
    notes: list[str] = []
    b_len, h_len = int(num.shape[0]), int(num.shape[1])
    if b_len * h_len * l_len * s_len > max_cells:
        if l_len * s_len > max_cells:
            raise MaskcheckError(f"BlockMask of {l_len}x{s_len} tokens is too large to expand "
                                 f"(more than {max_cells} cells)")
        notes.append(f"expanded for batch 0, head 0 only ({b_len}x{h_len} x {l_len}x{s_len} "
                     f"is more than {max_cells} cells)")
        b_len = h_len = 1
    ncols = max(int(idx.shape[-1]), math.ceil(s_len / bk))
    partial = _blocks_dense(num[:b_len, :h_len], idx[:b_len, :h_len], ncols)
    full = torch.zeros_like(partial)
    if block_mask.full_kv_num_blocks is not None and block_mask.full_kv_indices is not None:
        fnum = block_mask.full_kv_num_blocks.detach().cpu()[:b_len, :h_len]
        fidx = block_mask.full_kv_indices.detach().cpu()[:b_len, :h_len]
        full = _blocks_dense(fnum, fidx, ncols)
    partial = partial & ~full
    q_blocks = math.ceil(l_len / bq)
    k_blocks = math.ceil(s_len / bk)
    partial, full = partial[..., :q_blocks, :k_blocks], full[..., :q_blocks, :k_blocks]
    keep = _to_tokens(full, bq, bk, l_len, s_len)
    partial_tok = _to_tokens(partial, bq, bk, l_len, s_len)
    if bool(partial_tok.any()):
        mod = _evaluate_mask_mod(block_mask, b_len, h_len, l_len, s_len, notes)
        keep = keep | (partial_tok & mod) if mod is not None else keep | partial_tok
    n_partial = int(partial.sum())
    n_full = int(full.sum())
    skipped = int(partial.numel()) - n_partial - n_full
    where = [(int(a), int(b), int(c), int(d)) for a, b, c, d in
             torch.nonzero(partial)[:8].tolist()]
    return ExpandedBlockMask(keep.expand(b_len, h_len, l_len, s_len).contiguous(), (bq, bk),
                             n_full, n_partial, skipped, where, notes)


def _evaluate_mask_mod(block_mask: Any, b_len: int, h_len: int, l_len: int, s_len: int,
                       notes: list[str]) -> torch.Tensor | None:
    from torch.nn.attention.flex_attention import create_mask, noop_mask

    mod = getattr(block_mask, "mask_mod", None)
    if mod is None or mod is noop_mask:
        return torch.ones(1, 1, l_len, s_len, dtype=torch.bool)
    try:
        dense = create_mask(mod, b_len, h_len, l_len, s_len,
                            device=block_mask.kv_indices.device)
        return dense.to(device="cpu", dtype=torch.bool)
    except Exception as e:  # a mask_mod bound to state that is gone, or not vmappable
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        notes.append(f"mask_mod could not be evaluated ({first}): partial blocks are "
                     "counted as kept")
        return None


def block_mask_source(block_mask: Any, name: str) -> Any:
    """An ArraySource holding the token-level keep-mask (bool, True = attend)."""
    from maskcheck.io.base import ArraySource

    expanded = expand_block_mask(block_mask)
    return ArraySource(name, expanded.keep.numpy(), dtype="bool")


def analyze_block_mask(block_mask: Any, *, api: str = "auto", name: str = "block_mask",
                       **kwargs: Any) -> Any:
    """`maskcheck.analyze` for a BlockMask: the dense verdict plus its block structure."""
    from maskcheck.analysis import analyze_source
    from maskcheck.io.base import ArraySource

    expanded = expand_block_mask(block_mask)
    source = ArraySource(name, expanded.keep.numpy(), dtype="bool")
    report = analyze_source(source, api="flex" if api == "auto" else api, **kwargs)
    report.evidence.extend(expanded.evidence())
    report.params["block_size"] = list(expanded.block_size)
    report.params["blocks"] = {"full": expanded.full_blocks, "partial": expanded.partial_blocks,
                               "skipped": expanded.skipped_blocks}
    return report
