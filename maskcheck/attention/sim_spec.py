"""What `simulate` is asked to build, checked before torch is imported (no torch here).

A bad option is rejected in milliseconds, not after torch's 2-3 s import, and a size that
would take minutes and gigabytes is refused with one line instead of ending in MemoryError.
"""

from __future__ import annotations

from dataclasses import dataclass

from maskcheck.commands.options import parse_device
from maskcheck.errors import UsageError

MISTAKES = ("mha-mask-into-sdpa", "hf-mask-into-mha", "float01-into-sdpa", "fp16-minus-1e9",
            "summed-finfo-min")
APIS = ("mha", "sdpa", "sdpa-additive", "hf", "eager")
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
# Attention weights per call (batch x heads x seq x seq). Every path keeps its weights and a
# float64 reference, and every row is classified: at 2**18 (--seq 256 with the default batch 2
# and heads 2) a run takes about half a minute on one shared core. What simulate shows about
# a convention does not depend on the length: a few tokens show the same behaviour.
MAX_WEIGHTS = 1 << 18
MAX_DIM = 1024


@dataclass(frozen=True)
class BatchSpec:
    seq: int = 5
    pad: int = 0
    batch: int = 2
    padding_side: str = "right"
    causal: bool = False
    window: int | None = None
    block: int | None = None
    heads: int = 2
    dim: int = 8
    dtype: str = "float32"
    device: str = "cpu"
    mask_value: str = "-inf"
    seed: int = 0

    def validate(self) -> None:
        if self.seq < 1 or self.batch < 1 or self.heads < 1 or self.dim < 1:
            raise UsageError("--seq, --batch, --heads and --dim must be at least 1")
        weights = self.batch * self.heads * self.seq * self.seq
        if weights > MAX_WEIGHTS:
            raise UsageError(
                f"--seq {self.seq} --batch {self.batch} --heads {self.heads} make {weights:,} "
                f"attention weights per call; simulate runs at most {MAX_WEIGHTS:,} (e.g. --seq "
                "256 with --batch 2 --heads 2): the behaviour it shows does not depend on length")
        if self.dim > MAX_DIM:
            raise UsageError(f"--dim takes at most {MAX_DIM}, not {self.dim}")
        if not 0 <= self.pad <= self.seq:
            raise UsageError(f"--pad must be between 0 and --seq ({self.seq}), not {self.pad}")
        if self.padding_side not in ("left", "right"):
            raise UsageError(f"--padding-side takes left or right, not {self.padding_side!r}")
        if self.window is not None and self.window < 1:
            raise UsageError("--window must be at least 1")
        if self.block is not None and self.block < 1:
            raise UsageError("--block must be at least 1")
        if self.dtype not in FLOAT_DTYPES:
            raise UsageError(f"--dtype takes {', '.join(FLOAT_DTYPES)}, not {self.dtype!r}")
        parse_device(self.device)


def check_choices(api: str, mistake: str) -> None:
    if api not in ("all", *APIS):
        raise UsageError(f"--api takes all, {', '.join(APIS)}, not {api!r}")
    if mistake not in ("all", "none", *MISTAKES):
        raise UsageError(f"--mistake takes all, none, {', '.join(MISTAKES)}, not {mistake!r}")
