"""What the user declared (causal or bidirectional, a window) and what "changes" means.

Pure Python: the report, the renderer and the checks all read the same two facts from here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

IntentKind = Literal["causal", "bidirectional"]

# "Changes" = beyond this fraction of the output scale (see the README's exact rule). 1e-4
# sits far above float32 rounding when only the batch make-up changes and far below any real
# dependency; 1e-2 is about 10 float16 ulps (eps 2**-10). bfloat16 has 8 bits of mantissa
# (eps 2**-7): a stock T5 encoder's eager and sdpa outputs differ by 0.0101 of the scale in
# bfloat16 on torch 2.13, so 1e-2 would be a false alarm; 3e-2 is about 4 bfloat16 ulps.
RELATIVE_TOLERANCE: dict[str, float] = {
    "float32": 1e-4,
    "float16": 1e-2,
    "bfloat16": 3e-2,
}
PROBE_DTYPES: tuple[str, ...] = tuple(RELATIVE_TOLERANCE)
# "No influence at all" (a blind spot) = at most this fraction of the tolerance: a key the
# mask hides changes nothing, bit for bit; a key that is merely far away still moves the output
# by many rounding steps.
BLIND_FRACTION = 1e-2


def tolerance(dtype: str) -> float:
    return RELATIVE_TOLERANCE[dtype]


def blind_threshold(dtype: str) -> float:
    return RELATIVE_TOLERANCE[dtype] * BLIND_FRACTION


@dataclass(frozen=True)
class Intent:
    """`--causal`/`--bidirectional` and `--window W`, over real-token indices of one sequence."""

    kind: IntentKind
    window: int | None = None

    def allows(self, query: int, key: int) -> bool:
        """May real token `query` depend on real token `key` (indices among real tokens)?"""
        if self.kind == "causal" and key > query:
            return False
        return self.window is None or abs(query - key) < self.window

    def excluded_by(self, query: int, key: int) -> Literal["future", "window", None]:
        """Why the intent forbids the pair: a later token (MC070) or beyond the window (MC077)."""
        if self.kind == "causal" and key > query:
            return "future"
        if self.window is not None and abs(query - key) >= self.window:
            return "window"
        return None

    def describe(self) -> str:
        base = "causal" if self.kind == "causal" else "bidirectional"
        return base if self.window is None else f"{base}, window {self.window}"


def relative_change(diff: float, scale: float) -> float:
    """A difference as a fraction of the output scale; inf stays inf."""
    if math.isinf(diff) or math.isnan(diff):
        return math.inf
    return diff / scale
