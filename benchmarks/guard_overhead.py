"""Overhead of maskcheck.guard(): on whole transformers models (forward passes) and per
F.scaled_dot_product_attention / nn.MultiheadAttention call (CPU), with and without the guard.

    python benchmarks/guard_overhead.py            # both parts
    python benchmarks/guard_overhead.py models     # the model part only (needs transformers)

Model part: a tiny-config Llama built from its config class (random init, no download) at a
realistic size (hidden 512, 4 layers, 8 heads, L = 256, batch 2, left padding) and at the
tiny size the tests use (hidden 32, 2 layers, L = 8), on the sdpa and eager implementations.
Plain and guarded forwards are interleaved, timed in process CPU time (torch on one thread),
and each ratio is the median of per-round ratios, so load from other processes on a shared
machine distorts the ratios as little as it can.

Two numbers matter: "same mask" (the usual case: one mask object reused by every layer, its
analysis cached on identity + version) and "new mask" (a fresh mask tensor every call, so every
call analyses the mask).
"""

# ruff: noqa: B023  (closures are called inside the loop iteration that defines them)
from __future__ import annotations

import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import maskcheck
import maskcheck.attention.guard


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


def _llama(hidden: int, layers: int, heads: int, impl: str) -> torch.nn.Module:
    import transformers

    cfg = transformers.LlamaConfig(
        vocab_size=1000, hidden_size=hidden, intermediate_size=hidden * 8 // 3,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
        max_position_embeddings=1024)
    cfg._attn_implementation = impl
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).eval()


class TimedGuard(maskcheck.attention.guard.guard):  # type: ignore[name-defined,misc]
    """A guard that adds the CPU time spent in its own handlers (not the attention call)."""

    spent = 0.0

    def _handle(self, seen: object, run: Callable[[], object]) -> object:
        t0 = time.process_time()
        inner = [0.0]

        def timed_run() -> object:
            t1 = time.process_time()
            out = run()
            inner[0] = time.process_time() - t1
            return out

        out = super()._handle(seen, timed_run)
        TimedGuard.spent += time.process_time() - t0 - inner[0]
        return out


def model_ratios(model: torch.nn.Module, length: int, rounds: int, reps: int
                 ) -> tuple[float, float, float, float, float]:
    """ms per plain forward; guard/plain with one guard block per forward (every forward
    analyses its new mask), with one block around all forwards of the round (the same batch:
    later forwards reuse the analysis), guard(check_output=True)/plain with a block per
    forward: medians over rounds of the ratio measured within each round; and the CPU ms per
    forward spent inside maskcheck's handlers (block per forward)."""
    ids = torch.randint(1, 1000, (2, length))
    am = torch.ones(2, length, dtype=torch.long)
    am[1, : length // 4] = 0  # left padding

    def forward() -> None:
        with torch.no_grad():
            model(input_ids=ids, attention_mask=am.clone())  # a new mask object each time

    def timed(ctx: Callable[[], object] | None, one_block: bool = False) -> float:
        t0 = time.process_time()  # CPU time of this process: other processes' load is
        if one_block and ctx is not None:  # not counted (torch runs on 1 thread here)
            with ctx():  # type: ignore[attr-defined]
                for _ in range(reps):
                    forward()
        else:
            for _ in range(reps):
                if ctx is None:
                    forward()
                else:
                    with ctx():  # type: ignore[attr-defined]
                        forward()
        return (time.process_time() - t0) / reps

    timed(None)
    timed(lambda: maskcheck.guard(check_output=True))  # first-use imports out of the way
    plain_s, per, held, out, own = [], [], [], [], []
    for _ in range(rounds):
        p = timed(None)
        per.append(timed(lambda: maskcheck.guard()) / p)
        held.append(timed(lambda: maskcheck.guard(), one_block=True) / p)
        out.append(timed(lambda: maskcheck.guard(check_output=True)) / p)
        TimedGuard.spent = 0.0
        timed(lambda: TimedGuard())
        own.append(TimedGuard.spent / reps)
        plain_s.append(p)
    return (statistics.median(plain_s) * 1e3, statistics.median(per), statistics.median(held),
            statistics.median(out), statistics.median(own) * 1e3)


def models() -> None:
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    print(f"torch {torch.__version__}, 1 CPU thread; Llama forward passes, batch 2, left "
          "padding; process CPU time; ratios = median over rounds of (guarded / plain) in the "
          "same round")
    print(f"{'model':<36}{'plain ms':>9}{'block/forward':>15}{'one block':>11}"
          f"{'+check_output':>15}{'handler ms':>12}")
    for hidden, layers, heads, length, rounds, reps in ((512, 4, 8, 256, 7, 3),
                                                         (32, 2, 4, 8, 7, 40)):
        for impl in ("sdpa", "eager"):
            model = _llama(hidden, layers, heads, impl)
            ms, per, held, out, own = model_ratios(model, length, rounds, reps)
            label = f"llama h{hidden} x{layers} L={length} {impl}"
            print(f"{label:<36}{ms:>9.2f}{per:>14.3f}x{held:>10.3f}x{out:>14.3f}x"
                  f"{own:>12.2f}")


def main() -> None:
    if sys.argv[1:] == ["models"]:
        models()
        return
    models()
    print()
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
