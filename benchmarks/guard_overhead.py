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


def model_ratios(model: torch.nn.Module, length: int, rounds: int, reps: int
                 ) -> tuple[float, float, float, float]:
    """ms per plain forward, then guard/plain with the same batch every forward, with a new
    padding length every forward, and guard(check_output=True)/plain with new padding:
    medians over rounds of the ratio measured within each round."""
    ids = torch.randint(1, 1000, (2, length))

    def batch(k: int) -> torch.Tensor:
        am = torch.ones(2, length, dtype=torch.long)
        am[1, : length // 4 + k] = 0  # left padding
        return am

    def timed(ctx: Callable[[], object] | None, vary: bool) -> float:
        t0 = time.process_time()  # CPU time of this process: other processes' load is
        for i in range(reps):        # not counted (torch runs on 1 thread here)
            am = batch(i if vary else 0)
            with torch.no_grad():
                if ctx is None:
                    model(input_ids=ids, attention_mask=am)
                else:
                    with ctx():  # type: ignore[attr-defined]
                        model(input_ids=ids, attention_mask=am)
        return (time.process_time() - t0) / reps

    timed(None, False)
    timed(lambda: maskcheck.guard(), False)
    plain_s, same, new, out = [], [], [], []
    for _ in range(rounds):
        p_same = timed(None, False)
        same.append(timed(lambda: maskcheck.guard(), False) / p_same)
        p_new = timed(None, True)
        new.append(timed(lambda: maskcheck.guard(), True) / p_new)
        out.append(timed(lambda: maskcheck.guard(check_output=True), True) / p_new)
        plain_s.append(p_same)
    return (statistics.median(plain_s) * 1e3, statistics.median(same), statistics.median(new),
            statistics.median(out))


def models() -> None:
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    print(f"torch {torch.__version__}, 1 CPU thread; Llama forward passes, batch 2, left "
          "padding; process CPU time; ratios = median over rounds of (guarded / plain) in the "
          "same round")
    print(f"{'model':<40}{'plain ms':>9}{'same batch':>12}{'new padding':>13}"
          f"{'+check_output':>15}")
    for hidden, layers, heads, length, rounds, reps in ((512, 4, 8, 256, 5, 3),
                                                         (32, 2, 4, 8, 5, 40)):
        for impl in ("sdpa", "eager"):
            model = _llama(hidden, layers, heads, impl)
            ms, same, new, out = model_ratios(model, length, rounds, reps)
            label = f"llama h{hidden} x{layers} L={length} {impl}"
            print(f"{label:<40}{ms:>9.2f}{same:>11.3f}x{new:>12.3f}x{out:>14.3f}x")


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
