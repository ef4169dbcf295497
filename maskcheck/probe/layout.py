"""Probe batches as plain data: which material sequence sits in each row, how long it is,
and on which side its padding goes. No torch: plans and reports read the same layouts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Side = Literal["left", "right"]
SIDES: tuple[Side, ...] = ("right", "left")


@dataclass(frozen=True)
class Layout:
    """One probe batch: row r holds the first `lengths[r]` tokens of material sequence
    `rows[r]`, padded to `seq` on `side`. A length of 0 is an all-padding row."""

    rows: tuple[int, ...]
    lengths: tuple[int, ...]
    seq: int
    side: Side

    @property
    def batch(self) -> int:
        return len(self.rows)

    def offset(self, row: int) -> int:
        """Layout index of the row's first real token."""
        return 0 if self.side == "right" else self.seq - self.lengths[row]

    def position(self, row: int, token: int) -> int:
        """Layout index of real token `token` of the row."""
        return self.offset(row) + token

    def token(self, row: int, position: int) -> int | None:
        """Real-token index at a layout position, or None for a pad."""
        t = position - self.offset(row)
        return t if 0 <= t < self.lengths[row] else None

    def is_real(self, row: int, position: int) -> bool:
        return self.token(row, position) is not None

    def keep(self) -> list[list[bool]]:
        return [[self.is_real(r, k) for k in range(self.seq)] for r in range(self.batch)]

    def padded(self, row: int) -> bool:
        return self.lengths[row] < self.seq

    def describe(self) -> str:
        pads = [self.seq - n for n in self.lengths]
        return f"batch {self.batch} x seq {self.seq}, pads {pads} ({self.side})"


def pad_amounts(batch: int, pad: int) -> list[int]:
    """One unpadded sequence and the others padded by different amounts up to `pad`
    (pad, pad - 1, ..., 1, pad, ...)."""
    if pad <= 0:
        return [0] * batch
    return [0] + [pad - (i % pad) for i in range(batch - 1)]


def base_layout(batch: int, seq: int, pad: int, side: Side) -> Layout:
    lengths = tuple(seq - p for p in pad_amounts(batch, pad))
    return Layout(tuple(range(batch)), lengths, seq, side)


def with_extra_padding(layout: Layout, extra: int) -> Layout:
    """The same sequences padded by `extra` more positions each."""
    return Layout(layout.rows, layout.lengths, layout.seq + extra, layout.side)


def with_empty_row(layout: Layout) -> Layout:
    """The batch plus one all-padding sequence (the seed's first boundary case)."""
    return Layout((*layout.rows, layout.rows[0]), (*layout.lengths, 0), layout.seq, layout.side)


def alone(row: int, length: int) -> Layout:
    """One sequence as a batch of one, without padding."""
    return Layout((row,), (length,), length, "right")


def length_one(batch: int) -> Layout:
    """Every sequence cut to its first token: length 1."""
    return Layout(tuple(range(batch)), (1,) * batch, 1, "right")


def perturbed_positions(seq: int, limit: int | None) -> list[int]:
    """The layout positions whose content the sweep changes: all, or `limit` spread evenly
    (both ends always included)."""
    if limit is None or limit >= seq:
        return list(range(seq))
    if limit <= 1:
        return [seq - 1]
    picked = {round(i * (seq - 1) / (limit - 1)) for i in range(limit)}
    return sorted(picked)
