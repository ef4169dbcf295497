"""Replay every committed capture (fixtures/captures) on CUDA with every SDPA backend / MHA
path, in the captured dtype and in float16/bfloat16, and print one table.

    python benchmarks/cuda_replay.py            # needs a CUDA device; exits 0 without one

Prints per capture and dtype: each path's status, NaN rows, zero rows, max error vs the
float64 reference and weight on masked keys, torch's default backend, and the findings.
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from maskcheck.attention.replay import replay_file  # noqa: E402


def rows(rs: list[tuple[int, ...]]) -> str:
    return str(len(rs)) if rs else "-"


def main() -> int:
    warnings.simplefilter("ignore")
    if not torch.cuda.is_available():
        print(f"no CUDA device (torch {torch.__version__}); nothing to do")
        return 0
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"{torch.cuda.get_device_name(0)}")
    captures = sorted((ROOT / "fixtures" / "captures").glob("*.safetensors"))
    print(f"{'capture':<38}{'dtype':<10}{'path':<14}{'status':<7}{'nan':>5}{'zero':>5}"
          f"{'max err':>11}{'masked w':>10}  note")
    for cap in captures:
        for dtype in (None, "float16", "bfloat16"):
            t0 = time.perf_counter()
            try:
                res = replay_file(str(cap), device="cuda", dtype=dtype)
            except Exception as e:  # report and go on: this script is run once, unattended
                print(f"{cap.name:<38}{dtype or 'as-is':<10}ERROR {type(e).__name__}: {e}")
                continue
            for r in res.report.runs or []:
                note = r.error or ""
                if r.extra.get("picked"):
                    note = f"picks {r.extra['picked']}"
                if "fast_path_ran" in r.extra:
                    note = f"fast path ran: {r.extra['fast_path_ran']}"
                err = "-" if r.max_abs_err is None else f"{r.max_abs_err:.3g}"
                mw = "-" if r.masked_weight is None else f"{r.masked_weight:.3g}"
                print(f"{cap.name:<38}{r.dtype:<10}{r.path:<14}{r.status:<7}"
                      f"{rows(r.nan_rows):>5}{rows(r.zero_rows):>5}{err:>11}{mw:>10}  "
                      f"{note[:80]}")
            codes = sorted({f.code for f in res.report.all_findings()})
            print(f"{'':<38}findings: {', '.join(codes) or 'none'}  "
                  f"({time.perf_counter() - t0:.2f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
