"""Sweep maskcheck over masks real library code builds, and count false alarms and misses.

    python benchmarks/real_masks.py [--part dev|held-out|all] [--json OUT]

Needs torch and transformers (the pinned test extra) at benchmark time only.

What is swept:
- every model config the installed transformers registers (CONFIG_MAPPING), instantiated
  with its defaults; its text config says which builders apply: `create_causal_mask` always,
  `create_sliding_window_causal_mask` when it has a sliding window, `create_chunked_causal_mask`
  when it has an attention chunk size, `create_bidirectional_mask` (and the sliding-window
  one) for encoders; for every attention implementation whose builder returns a tensor
  (sdpa, eager; flash gives a 2-D mask or None: counted, not analysed; HF's flex path
  builds a BlockMask through torch.compile, too slow here, so flex is swept directly below);
  padding none / left / right, packed sequences (position_ids restart), one decode step
  with a cache; float32 / float16 / bfloat16 embeddings.
- FlexAttention mask_mods (torch.nn.attention.flex_attention.create_mask on the CPU):
  causal, sliding window, prefix-LM, document (packed), chunked, each alone and combined with
  padding, plus and_masks / or_masks combinations.

Every built mask is checked against an oracle written from the config (what each real-token
query must attend: causal, window, chunk, document, padding, cache offset). A mask the oracle
accepts is a correct mask: any error or warning maskcheck reports on it is a false alarm.
Injected bugs derived from correct masks must be caught (a finding of warning or error):
an all-padding sequence, inverted polarity, and an additive mask built with -1e9 for float16
queries. Identical masks (same builder, window/chunk, implementation, scenario, dtype) are
analysed once: many configs share them.

Dev / held-out: model types are split by a stable hash of their name. Tuning looked only at
the dev part (and at masks written by hand in tests/); the held-out part was run after the
code was frozen. Figures on the dev part are upper bounds.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import logging
import math
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import maskcheck
from maskcheck.model import Severity, TensorReport

L = 8  # sequence length of the prefill masks
PAST = 5  # cached positions before the decode step
BATCH = 2
LEFT_PAD, RIGHT_REAL = 3, 5  # sequence 0: 3 pad tokens on the left / 5 real tokens


def part_of(model_type: str) -> str:
    digest = hashlib.sha256(model_type.encode()).digest()
    return "dev" if digest[0] % 2 == 0 else "held-out"


# ------------------------------------------------------------------------------ oracle

@dataclass(frozen=True)
class Spec:
    """What a mask must be, from the config: the oracle's inputs."""

    kind: str  # causal | sliding | chunked | bidirectional | bidirectional-sliding
    window: int | None = None
    chunk: int | None = None


@dataclass
class Scenario:
    name: str  # none | left | right | packed | decode
    attention_mask: Any  # (N, S_total) int, 1 = real
    position_ids: Any  # (N, L_q)
    past: int = 0
    documents: Any = None  # (N, S) document id per key, for packed


def scenarios(torch: Any) -> list[Scenario]:
    ones = torch.ones(BATCH, L, dtype=torch.long)
    pos = torch.arange(L)[None].expand(BATCH, -1)
    left = ones.clone()
    left[0, :LEFT_PAD] = 0
    right = ones.clone()
    right[0, RIGHT_REAL:] = 0
    docs = torch.tensor([[0] * 3 + [1] * 3 + [2] * 2, [0] * 5 + [1] * 3])
    packed_pos = torch.stack([_restart_positions(d) for d in docs])
    decode_mask = torch.ones(BATCH, PAST + 1, dtype=torch.long)
    decode_mask[0, :2] = 0  # a left-padded prompt, then one generated token
    return [
        Scenario("none", ones, pos),
        Scenario("left", left, pos),
        Scenario("right", right, pos),
        Scenario("packed", None, packed_pos, documents=docs),
        Scenario("decode", decode_mask, torch.full((BATCH, 1), PAST), past=PAST),
    ]


def _restart_positions(doc: Any) -> Any:
    import torch

    out = torch.zeros_like(doc)
    for i in range(1, doc.shape[0]):
        out[i] = 0 if doc[i] != doc[i - 1] else out[i - 1] + 1
    return out


def oracle(spec: Spec, sc: Scenario, n: int, q_len: int, s_len: int) -> np.ndarray:
    """(N, Lq, S) bool: what each query may attend, from the config alone."""
    q_pos = np.arange(q_len)[:, None] + sc.past  # absolute query positions
    k_pos = np.arange(s_len)[None, :]
    if spec.kind.startswith("bidirectional"):
        base = np.ones((q_len, s_len), bool)
        if spec.kind == "bidirectional-sliding" and spec.window:
            base &= np.abs(q_pos - k_pos) < spec.window  # HF: |q - kv| < window (half each side)
    else:
        base = k_pos <= q_pos
        if spec.kind == "sliding" and spec.window:
            base &= q_pos - k_pos < spec.window
        if spec.kind == "chunked" and spec.chunk:
            base &= q_pos // spec.chunk == k_pos // spec.chunk
    out = np.broadcast_to(base, (n, q_len, s_len)).copy()
    if sc.attention_mask is not None:
        real = sc.attention_mask.numpy().astype(bool)[:, :s_len]
        out &= real[:, None, :]
    if sc.documents is not None:
        d = sc.documents.numpy()
        out &= d[:, :, None] == d[:, None, :]
    return out


def real_queries(sc: Scenario, n: int, q_len: int) -> np.ndarray:
    if sc.attention_mask is None:
        return np.ones((n, q_len), bool)
    real: np.ndarray = sc.attention_mask.numpy().astype(bool)[:, -q_len:]
    return real


def kept_of(mask: Any) -> np.ndarray:
    """A HF/flex mask as bool "may attend" (N, ..., L, S): bool as is, float 0 = kept."""
    import torch

    m = mask.detach().cpu()
    if m.dtype == torch.bool:
        return np.asarray(m.numpy())
    return np.asarray((m.to(torch.float32) == 0).numpy())


# ------------------------------------------------------------------------------ results

@dataclass
class Tally:
    configs: int = 0
    configs_failed: int = 0
    built: int = 0
    not_tensor: int = 0
    builder_errors: int = 0
    oracle_mismatch: int = 0
    analysed: int = 0
    false_error: int = 0
    false_warning: int = 0
    info: int = 0
    wrong_convention: int = 0
    pattern_missing: int = 0
    injected: Counter[str] = field(default_factory=Counter)
    missed: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)

    def note(self, what: str) -> None:
        if len(self.examples) < 400:
            self.examples.append(what)

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if not isinstance(v, Counter)}
        out["injected"] = dict(self.injected)
        out["missed"] = dict(self.missed)
        return out


def severities(report: TensorReport) -> list[Severity]:
    return [f.severity for f in report.findings]


def judge_correct(t: Tally, key: str, mask: Any, api: str, want_tags: set[str]) -> None:
    """A mask the oracle accepted: no error, no warning; right convention and tags."""
    import torch

    report = maskcheck.analyze(mask, api=api, name="attention_mask" if api == "eager"
                               else "attn_mask")
    t.analysed += 1
    sev = severities(report)
    want_conv = "bool-true-keep" if mask.dtype == torch.bool else "additive"
    if report.convention != want_conv:
        t.wrong_convention += 1
        t.note(f"convention {report.convention} != {want_conv}: {key}")
    if Severity.ERROR in sev:
        t.false_error += 1
        t.note(f"false error {key}: {[(f.code, f.message[:90]) for f in report.findings]}")
    elif Severity.WARNING in sev:
        t.false_warning += 1
        t.note(f"false warning {key}: {[(f.code, f.message[:90]) for f in report.findings]}")
    elif sev:
        t.info += 1
    if not want_tags <= set(report.pattern):
        t.pattern_missing += 1
        t.note(f"tags {report.pattern} lack {sorted(want_tags - set(report.pattern))}: {key}")


def judge_bug(t: Tally, kind: str, key: str, mask: Any, api: str,
              query_dtype: str | None = None, must: str | None = None) -> None:
    report = maskcheck.analyze(mask, api=api, name="attention_mask" if api == "eager"
                               else "attn_mask", query_dtype=query_dtype)
    t.injected[kind] += 1
    hits = [f for f in report.findings if f.severity in (Severity.ERROR, Severity.WARNING)
            and (must is None or f.code == must)]
    if not hits:
        t.missed[kind] += 1
        t.note(f"missed {kind}: {key}: {report.convention} {report.pattern} "
               f"{[(f.code, f.severity.value) for f in report.findings]}")


# ------------------------------------------------------------------------------ HF sweep

def text_config(cfg: Any) -> Any:
    try:
        return cfg.get_text_config(decoder=True)
    except Exception:  # several text configs, or none: the config itself
        return cfg


def specs_for(tc: Any) -> list[tuple[str, Spec]]:
    """(builder name, oracle spec) pairs the config calls for."""
    out: list[tuple[str, Spec]] = [("create_causal_mask", Spec("causal"))]
    window = _attr(tc, "sliding_window")
    if isinstance(window, int) and window > 0:
        out.append(("create_sliding_window_causal_mask", Spec("sliding", window=window)))
    chunk = _attr(tc, "attention_chunk_size")
    if isinstance(chunk, int) and chunk > 0:
        out.append(("create_chunked_causal_mask", Spec("chunked", chunk=chunk)))
    if _attr(tc, "is_decoder") is False or _attr(tc, "is_encoder_decoder"):
        out.append(("create_bidirectional_mask", Spec("bidirectional")))
    return out


def _attr(cfg: Any, name: str) -> Any:
    try:
        return getattr(cfg, name, None)
    except Exception:  # per-layer attributes of heterogeneous configs refuse a global read
        return None


def shrink(spec: Spec, model_type: str) -> Spec:
    """Windows and chunks small enough to show in an L=8 mask (configs say 4096), 2..5 wide
    by a stable hash of the model type, so that configs give different masks."""
    size = 2 + hashlib.sha256(model_type.encode()).digest()[1] % 4
    if spec.kind == "sliding":
        return Spec("sliding", window=size)
    if spec.kind == "chunked":
        return Spec("chunked", chunk=size)
    return spec


def build_hf(torch: Any, mu: Any, tc: Any, builder: str, spec: Spec, impl: str,
             sc: Scenario, dtype: Any) -> Any:
    from transformers import DynamicCache

    tc._attn_implementation = impl
    if spec.kind == "sliding":
        tc.sliding_window = spec.window
    if spec.kind == "chunked":
        tc.attention_chunk_size = spec.chunk
    q_len = sc.position_ids.shape[1]
    embeds = torch.zeros(BATCH, q_len, 8, dtype=dtype)
    cache = None
    if sc.past:
        cache = DynamicCache()
        kv = torch.zeros(BATCH, 1, sc.past, 4, dtype=dtype)
        for layer in range(max(1, _attr(tc, "num_hidden_layers") or 1)):
            cache.update(kv, kv, layer)
    fn = getattr(mu, builder)
    kwargs: dict[str, Any] = {"config": tc, "inputs_embeds": embeds,
                              "attention_mask": sc.attention_mask}
    if builder.startswith("create_bidirectional"):
        return fn(**kwargs, allow_is_bidirectional_skip=False)
    return fn(**kwargs, cache=cache, position_ids=sc.position_ids, allow_is_causal_skip=False)


def want_tags(spec: Spec, sc: Scenario) -> set[str]:
    tags: set[str] = set()
    if sc.name == "decode":
        return tags
    if spec.kind == "causal":
        tags.add("causal")
    elif spec.kind == "sliding":
        tags.add("sliding-window")
    elif spec.kind == "chunked":
        tags |= {"block-diagonal", "causal"}
    if sc.name in ("left", "right"):
        tags.add(f"padding-{sc.name}")
    if sc.name == "packed" and spec.kind == "causal":
        tags = {"block-diagonal", "causal"}
    return tags


def sweep_hf(part: str, tally: dict[str, Tally]) -> None:
    import torch
    import transformers.masking_utils as mu
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    seen: set[tuple[Any, ...]] = set()
    dtypes = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    for model_type in sorted(CONFIG_MAPPING.keys()):
        where = part_of(model_type)
        if part not in ("all", where):
            continue
        t = tally[where]
        t.configs += 1
        try:
            tc = text_config(CONFIG_MAPPING[model_type]())
        except Exception:
            t.configs_failed += 1
            continue
        for builder, raw_spec in specs_for(tc):
            spec = shrink(raw_spec, model_type)
            for impl in ("sdpa", "eager", "flash_attention_2"):
                for sc in scenarios(torch):
                    if builder.startswith("create_bidirectional") and sc.name in (
                            "packed", "decode"):
                        continue
                    for dname, dtype in dtypes.items():
                        key = (builder, spec, impl, sc.name, dname)
                        if key in seen:
                            continue
                        seen.add(key)
                        label = f"{model_type}:{builder}:{impl}:{sc.name}:{dname}"
                        one_hf_mask(t, torch, mu, tc, builder, spec, impl, sc, dtype, label)


def one_hf_mask(t: Tally, torch: Any, mu: Any, tc: Any, builder: str, spec: Spec, impl: str,
                sc: Scenario, dtype: Any, label: str) -> None:
    try:
        with _quiet():
            mask = build_hf(torch, mu, tc, builder, spec, impl, sc, dtype)
    except Exception as e:  # a builder that does not take this scenario
        t.builder_errors += 1
        t.note(f"builder raised {type(e).__name__}: {str(e)[:80]}: {label}")
        return
    t.built += 1
    if not isinstance(mask, torch.Tensor) or mask.dim() != 4:
        t.not_tensor += 1
        return
    n, _, q_len, s_len = mask.shape
    kept = kept_of(mask)  # (N, 1|H, Lq, S)
    want = oracle(spec, sc, n, q_len, s_len)
    real = real_queries(sc, n, q_len)
    got = kept[:, 0]
    if not np.array_equal(got[real], want[real]):
        t.oracle_mismatch += 1
        t.note(f"oracle mismatch on real rows: {label}")
        return
    api = "eager" if mask.is_floating_point() else "sdpa"
    judge_correct(t, label, mask, api, want_tags(spec, sc))
    inject_bugs(t, torch, mask, api, label)


def inject_bugs(t: Tally, torch: Any, mask: Any, api: str, label: str) -> None:
    # an all-padding sequence: every key of sequence 1 hidden
    m = mask.clone()
    if m.dtype == torch.bool:
        m[1] = False
    else:
        m[1] = torch.finfo(m.dtype).min
    judge_bug(t, "all-padding sequence", label, m, api)
    # inverted polarity
    inv = ~mask if mask.dtype == torch.bool else torch.where(
        mask == 0, torch.finfo(mask.dtype).min, torch.zeros((), dtype=mask.dtype))
    judge_bug(t, "inverted polarity", label, inv, api)
    # -1e9 for float16 queries (masked_fill(-1e9) in float32, then cast: -inf)
    if mask.dtype == torch.float32 and bool((mask != 0).any()):
        bad = torch.zeros_like(mask).masked_fill(mask != 0, -1e9)
        judge_bug(t, "fp16 -1e9", label, bad, api, query_dtype="float16", must="MC020")


# ------------------------------------------------------------------------------ flex sweep

def flex_mods(torch: Any) -> dict[str, tuple[Callable[..., Any], set[str], str]]:
    """name -> (mask_mod, expected tags, part)."""
    from torch.nn.attention.flex_attention import and_masks, or_masks

    lengths = torch.tensor([L, RIGHT_REAL])
    doc = torch.tensor([[0] * 3 + [1] * 3 + [2] * 2, [0] * 5 + [1] * 3])

    def causal(b: Any, h: Any, q: Any, kv: Any) -> Any:
        return q >= kv

    def window(b: Any, h: Any, q: Any, kv: Any) -> Any:
        return q - kv < 3

    def prefix(b: Any, h: Any, q: Any, kv: Any) -> Any:
        return kv < 4

    def padding(b: Any, h: Any, q: Any, kv: Any) -> Any:
        return kv < lengths[b]

    def document(b: Any, h: Any, q: Any, kv: Any) -> Any:
        return doc[b, q] == doc[b, kv]

    def chunk(b: Any, h: Any, q: Any, kv: Any) -> Any:
        return q // 3 == kv // 3

    def local(b: Any, h: Any, q: Any, kv: Any) -> Any:
        return (q - kv).abs() <= 1

    def sink(b: Any, h: Any, q: Any, kv: Any) -> Any:
        return kv < 1

    return {
        "causal": (causal, {"causal"}, "dev"),
        "sliding": (and_masks(causal, window), {"sliding-window"}, "dev"),
        "sliding+padding": (and_masks(causal, window, padding), {"sliding-window",
                                                                  "padding-right"}, "dev"),
        "prefix-lm": (or_masks(causal, prefix), {"prefix-lm"}, "dev"),
        "document": (and_masks(causal, document), {"block-diagonal", "causal"}, "dev"),
        "causal+padding": (and_masks(causal, padding), {"causal", "padding-right"}, "held-out"),
        "chunked": (and_masks(causal, chunk), {"block-diagonal", "causal"}, "held-out"),
        "chunked+padding": (and_masks(causal, chunk, padding), {"block-diagonal", "causal",
                                                                "padding-right"}, "held-out"),
        "prefix-lm+padding": (and_masks(or_masks(causal, prefix), padding),
                              {"prefix-lm", "padding-right"}, "held-out"),
        "local+padding": (and_masks(local, padding), {"sliding-window", "padding-right"},
                          "held-out"),
        "sinks+window": (and_masks(causal, or_masks(window, sink)), set(), "held-out"),
        "bidirectional+padding": (padding, {"padding-right"}, "held-out"),
    }


def sweep_flex(part: str, tally: dict[str, Tally]) -> None:
    import torch
    from torch.nn.attention.flex_attention import create_mask

    for name, (mod, tags, where) in flex_mods(torch).items():
        if part not in ("all", where):
            continue
        t = tally[where]
        with _quiet():
            mask = create_mask(mod, BATCH, 1, L, L, device="cpu")
        t.built += 1
        label = f"flex:{name}"
        judge_correct(t, label, mask, "flex", tags)
        inject_bugs(t, torch, mask, "flex", label)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("dev", "held-out", "all"), default="all")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    logging.getLogger("transformers").setLevel(logging.ERROR)
    import transformers

    transformers.logging.set_verbosity_error()
    tally = {"dev": Tally(), "held-out": Tally()}
    start = time.perf_counter()
    sweep_hf(args.part, tally)
    sweep_flex(args.part, tally)
    took = time.perf_counter() - start
    for where, t in tally.items():
        if args.part not in ("all", where):
            continue
        d = t.to_json()
        print(f"== {where}: {t.configs} model configs ({t.configs_failed} failed to build), "
              f"{t.built} masks built, {t.not_tensor} not a 4-D tensor (BlockMask, 2-D, "
              f"None), {t.builder_errors} builder errors, {t.oracle_mismatch} oracle "
              f"mismatches")
        print(f"   correct masks analysed: {t.analysed}: false errors {t.false_error}, false "
              f"warnings {t.false_warning}, info only {t.info}, wrong convention "
              f"{t.wrong_convention}, expected tags missing {t.pattern_missing}")
        for kind, n in sorted(t.injected.items()):
            print(f"   injected {kind}: {n}, missed {t.missed[kind]}")
        shown: Counter[str] = Counter()
        for line in d["examples"]:
            kind = line.split(":")[0].split(" ")[0]
            shown[kind] += 1
            if shown[kind] <= 3:
                print(f"   - {line}")
    print(f"({took:.0f} s on a shared 2-core box)")
    if args.json:
        args.json.write_text(json.dumps({k: v.to_json() for k, v in tally.items()}, indent=1,
                                        default=str))
    bad = sum(t.false_error + t.false_warning for t in tally.values())
    return 1 if bad or not math.isfinite(took) else 0


if __name__ == "__main__":
    raise SystemExit(main())
