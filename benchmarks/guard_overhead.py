"""Per-call overhead of maskcheck.guard() on F.scaled_dot_product_attention and
nn.MultiheadAttention (CPU), with and without the guard, at a few sizes.

    /work/venv/bin/python benchmarks/guard_overhead.py

Two numbers matter: "same mask" (the usual case: one mask object reused by every layer, its
analysis cached on identity + version) and "new mask" (a fresh mask tensor every call, so every
call analyses the mask).
"""

# ruff: noqa: B023  (closures are called inside the loop iteration that defines them)
from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import maskcheck


def per_call_us(fn: Callable[[], object], n: int) -> float:
    for _ in range(3):
        fn()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e6


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    print(f"torch {torch.__version__}, 1 CPU thread; microseconds per call (best of 3)")
    print(f"{'call':<34}{'plain':>10}{'guard':>10}{'guard,new mask':>16}{'+check_output':>15}")
    for n, h, length, d in ((1, 2, 16, 16), (4, 8, 128, 64), (8, 16, 512, 64)):
        q = torch.randn(n, h, length, d)
        keep = torch.ones(n, 1, length, length, dtype=torch.bool).tril()
        iters = max(5, 2000 // (length // 16) ** 2)

        def plain() -> object:
            return F.scaled_dot_product_attention(q, q, q, attn_mask=keep)

        def fresh() -> object:
            return F.scaled_dot_product_attention(q, q, q, attn_mask=keep.clone())

        base = per_call_us(plain, iters)
        with maskcheck.guard():
            same = per_call_us(plain, iters)
            new = per_call_us(fresh, iters)
        with maskcheck.guard(check_output=True):
            out = per_call_us(plain, iters)
        print(f"{f'sdpa N={n} H={h} L={length} D={d}':<34}{base:>10.1f}{same:>10.1f}"
              f"{new:>16.1f}{out:>15.1f}")
    for n, length, e, h in ((2, 16, 32, 2), (8, 128, 256, 8)):
        mha = torch.nn.MultiheadAttention(e, h, batch_first=True)
        x = torch.randn(n, length, e)
        pad = torch.zeros(n, length, dtype=torch.bool)
        pad[-1, length // 2:] = True
        iters = max(5, 1000 // (length // 16) ** 2)

        def call_mha() -> object:
            return mha(x, x, x, key_padding_mask=pad, need_weights=False)

        base = per_call_us(call_mha, iters)
        with maskcheck.guard():
            same = per_call_us(call_mha, iters)
        with maskcheck.guard(check_output=True):
            out = per_call_us(call_mha, iters)
        print(f"{f'mha N={n} L={length} E={e} H={h}':<34}{base:>10.1f}{same:>10.1f}"
              f"{'(new each call)':>16}{out:>15.1f}")
    print("mha masks are canonicalised to new float tensors by nn.MultiheadAttention on every "
          "call, so each call analyses its mask")


if __name__ == "__main__":
    main()
