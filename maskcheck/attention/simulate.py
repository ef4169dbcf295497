"""`simulate`: build the right mask for each API for a described batch, run the real calls on
every path, and run the common mistakes to show what each one does on this torch.

Batch: sequence 0 is full, sequences 1.. have `pad` padding tokens (left or right). `keep` is
(N, L, S) bool, True = may attend: padding (keys), then --causal, --window, --block.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from maskcheck.attention.call import DTYPES, AttentionCall, Reference, reference
from maskcheck.attention.findings import call_findings
from maskcheck.attention.paths import PathResult, PathsResult, first_line, run_all_paths
from maskcheck.attention.sim_spec import APIS, MISTAKES, BatchSpec, check_choices
from maskcheck.errors import UsageError
from maskcheck.model import Finding

__all__ = ["APIS", "MISTAKES", "BatchSpec", "Scenario", "Simulation", "simulate", "to_json"]

@dataclass
class Scenario:
    name: str  # mha | sdpa | sdpa-additive | hf | eager | a mistake
    title: str
    code: str  # how the mask is built and passed
    result: PathsResult | None
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None  # the mask could not even be built (torch refused)
    verdict: list[str] = field(default_factory=list)


@dataclass
class Simulation:
    spec: BatchSpec
    keep: torch.Tensor  # (N, L, S) bool
    lengths: list[int]
    scenarios: list[Scenario]
    mistakes: list[Scenario]
    torch_version: str
    fix_code: str


def mask_value(spec: BatchSpec, dtype: torch.dtype) -> float:
    """The --mask-value as the float that is run: exactly what was asked, never "corrected".

    `inf` stays +inf and `nan` stays NaN (the runs then show what they do); a number too big
    for a Python float (1e400) is +-inf, which `mask_value_note` says.
    """
    v = spec.mask_value.strip().lower()
    if v in ("-inf", "-infinity"):
        return -math.inf
    if v in ("finfo", "finfo.min", "min"):
        return float(torch.finfo(dtype).min)
    try:
        return float(v)
    except ValueError:
        raise UsageError(f"--mask-value takes -inf, finfo or a number, not {spec.mask_value!r}")\
            from None


def mask_value_note(spec: BatchSpec, value: float) -> str | None:
    """Why the value run is not the one a reader expects, in one line; None when it is."""
    text = spec.mask_value.strip()
    said = f"--mask-value {text}"
    if math.isinf(value) and text.lower().lstrip("+-") not in ("inf", "infinity"):
        said += f" (too big for a float: {_lit(value)} is run)"
    if math.isnan(value):
        return f"{said} is NaN: every score it is added to becomes NaN"
    if value >= 0:
        return (f"{said} is not negative: adding it raises (or keeps) the masked scores "
                "instead of removing them")
    return None if said.endswith(text) else said


def build_keep(spec: BatchSpec) -> tuple[torch.Tensor, list[int]]:
    n, s_len = spec.batch, spec.seq
    lengths = [s_len] + [s_len - spec.pad] * (n - 1)
    real = torch.zeros(n, s_len, dtype=torch.bool)
    for b, length in enumerate(lengths):
        if spec.padding_side == "right":
            real[b, :length] = True
        else:
            real[b, s_len - length:] = True
    keep = real[:, None, :].expand(n, s_len, s_len).clone()
    i = torch.arange(s_len)[:, None]
    j = torch.arange(s_len)[None, :]
    structure = torch.ones(s_len, s_len, dtype=torch.bool)
    if spec.causal:
        structure &= j <= i
    if spec.window is not None:
        structure &= (i - j < spec.window) if spec.causal else ((i - j).abs() < spec.window)
    if spec.block is not None:
        structure &= (i // spec.block) == (j // spec.block)
    return keep & structure, lengths


def real_tokens(spec: BatchSpec, keep: torch.Tensor) -> torch.Tensor:
    """(N, S) bool: the real (non-padding) tokens."""
    n, s_len = spec.batch, spec.seq
    lengths = [s_len] + [s_len - spec.pad] * (n - 1)
    real = torch.zeros(n, s_len, dtype=torch.bool)
    for b, length in enumerate(lengths):
        sl = slice(0, length) if spec.padding_side == "right" else slice(s_len - length, s_len)
        real[b, sl] = True
    return real


def structure_mask(spec: BatchSpec) -> torch.Tensor:
    """(L, S) bool True = may attend: causal/window/block, shared by the batch."""
    keep, _ = build_keep(BatchSpec(**{**spec.__dict__, "pad": 0}))
    return keep[0]


@dataclass
class Inputs:
    q: torch.Tensor  # (N, H, L, D)
    k: torch.Tensor
    v: torch.Tensor
    x: torch.Tensor  # (N, L, E) for MHA
    mha_weights: dict[str, torch.Tensor]


def make_inputs(spec: BatchSpec, device: torch.device, dtype: torch.dtype) -> Inputs:
    g = torch.Generator().manual_seed(spec.seed)
    n, h, s_len, d = spec.batch, spec.heads, spec.seq, spec.dim

    def rnd(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(device=device, dtype=dtype)

    q, k, v = rnd(n, h, s_len, d), rnd(n, h, s_len, d), rnd(n, h, s_len, d)
    e = h * d
    x = rnd(n, s_len, e)
    with torch.random.fork_rng():
        torch.manual_seed(spec.seed)
        mha = torch.nn.MultiheadAttention(e, h, batch_first=True)
    weights = {"in_proj_weight": mha.in_proj_weight, "in_proj_bias": mha.in_proj_bias,
               "out_proj_weight": mha.out_proj.weight, "out_proj_bias": mha.out_proj.bias}
    weights = {k_: w.detach().to(device=device, dtype=dtype) for k_, w in weights.items()}
    return Inputs(q, k, v, x, weights)


def _mha_call(inp: Inputs, spec: BatchSpec, kpm: torch.Tensor | None,
              am: torch.Tensor | None) -> AttentionCall:
    return AttentionCall("mha", inp.x, inp.x, inp.x, attn_mask=am, key_padding_mask=kpm,
                         kwargs={"num_heads": spec.heads, "batch_first": True},
                         weights=inp.mha_weights, aliases={"key": "query", "value": "query"})


def _sdpa_call(inp: Inputs, mask: torch.Tensor | None, api: str = "sdpa") -> AttentionCall:
    return AttentionCall(api, inp.q, inp.k, inp.v, attn_mask=mask)  # type: ignore[arg-type]


def _structured(spec: BatchSpec) -> bool:
    return spec.causal or spec.window is not None or spec.block is not None


def _scenario(name: str, title: str, code: str, call: AttentionCall | None,
              ref: Reference | None = None, *, only_manual: bool = False,
              error: str | None = None) -> Scenario:
    if call is None:
        return Scenario(name, title, code, None, error=error)
    result = run_all_paths(call, ref=ref, only_manual=only_manual)
    return Scenario(name, title, code, result, call_findings(result))


def correct_scenarios(spec: BatchSpec, inp: Inputs, keep: torch.Tensor,
                      dtype: torch.dtype, apis: tuple[str, ...]) -> list[Scenario]:
    dev = inp.q.device
    real = real_tokens(spec, keep).to(dev)
    struct = structure_mask(spec).to(dev)
    keep4 = keep[:, None].to(dev)
    value = mask_value(spec, dtype)
    out: list[Scenario] = []
    if "mha" in apis:
        am = ~struct if _structured(spec) else None
        code = "key_padding_mask = ~real_tokens            # (N, S) bool, True = padding\n"
        code += ("attn_mask = ~allowed                      # (L, S) bool, True = may NOT attend\n"
                 if am is not None else "")
        code += ("out, w = mha(x, x, x, key_padding_mask=key_padding_mask"
                 + (", attn_mask=attn_mask" if am is not None else "") + ")")
        out.append(_scenario("mha", "nn.MultiheadAttention (bool, True = masked)", code,
                             _mha_call(inp, spec, ~real, am)))
    if "sdpa" in apis:
        out.append(_scenario(
            "sdpa", "F.scaled_dot_product_attention, bool mask (True = may attend)",
            "attn_mask = keep[:, None]                  # (N, 1, L, S) bool, True = may attend\n"
            "F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)",
            _sdpa_call(inp, keep4)))
    if "sdpa-additive" in apis:
        out.append(_additive_scenario(spec, inp, keep4, dtype, value))
    if "hf" in apis:
        am2 = real.to(torch.int64)
        as_sdpa = am2.to(torch.bool)[:, None, None, :] & struct
        out.append(_scenario(
            "hf", "Hugging Face 2-D attention_mask (int, 1 = real token), sdpa attention",
            "attention_mask = real_tokens.long()        # (N, S) int64, 1 = real token\n"
            "# what the sdpa attention receives, built by maskcheck the way HF 5.x does:\n"
            "attn_mask = attention_mask.bool()[:, None, None, :] & allowed   # (N,1,L,S) bool",
            _sdpa_call(inp, as_sdpa)))
    if "eager" in apis:
        fmin = torch.finfo(dtype).min
        eager = torch.zeros(keep4.shape, dtype=dtype, device=dev).masked_fill(~keep4, fmin)
        out.append(_scenario(
            "eager", "Hugging Face eager 4-D mask (0 / finfo.min, added to the scores)",
            "mask = torch.where(keep[:, None], 0.0, torch.finfo(dtype).min)  # (N,1,L,S)\n"
            "w = torch.softmax(q @ k.transpose(-2, -1) * scale + mask, -1, dtype=torch.float32)",
            _sdpa_call(inp, eager, "manual"), only_manual=True))
    return out


def _additive_scenario(spec: BatchSpec, inp: Inputs, keep4: torch.Tensor, dtype: torch.dtype,
                       value: float) -> Scenario:
    code = (f"attn_mask = torch.zeros(N, 1, L, S, dtype=q.dtype).masked_fill(~keep[:, None], "
            f"{_lit(value)})\nF.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)")
    title = f"F.scaled_dot_product_attention, additive mask ({_short(value)})"
    add, error = _try(lambda: torch.zeros(keep4.shape, dtype=dtype, device=keep4.device)
                      .masked_fill(~keep4, value))
    # Judged against the mask that was meant (keep), whatever value was given: a reference
    # computed from the additive mask itself would call any value "correct".
    meant = reference(_sdpa_call(inp, keep4))
    scen = _scenario("sdpa-additive", title, code, None if add is None else _sdpa_call(inp, add),
                     meant, error=error)
    note = mask_value_note(spec, value)
    if note is not None:
        scen.verdict.append(note)
    if add is not None:
        scen.findings.extend(_mask_findings(add, spec.dtype))
    return scen


def _mask_findings(mask: torch.Tensor, query_dtype: str) -> list[Finding]:
    """What `inspect --api sdpa` says about the mask as built (NaN, +inf, a weak value)."""
    from dataclasses import replace

    from maskcheck.analysis import analyze_source
    from maskcheck.attention.replay import to_numpy
    from maskcheck.io.base import ArraySource

    array, dtype = to_numpy(mask)
    report = analyze_source(ArraySource("attn_mask", array, dtype=dtype), api="sdpa",
                            query_dtype=query_dtype)
    return [replace(f, tensor="attn_mask") for f in report.findings if f.code != "MC051"]


def _short(value: float) -> str:
    return _lit(value) if math.isinf(value) or math.isnan(value) else f"{value:g}"


def _lit(value: float) -> str:
    """`value` as Python source that evaluates to it (pasteable into the snippet)."""
    if math.isnan(value):
        return "float('nan')"
    if math.isinf(value):
        return "float('-inf')" if value < 0 else "float('inf')"
    for name in ("float16", "bfloat16", "float32", "float64"):
        if value == float(torch.finfo(getattr(torch, name)).min):
            return f"torch.finfo(torch.{name}).min"
    return repr(value)


def _try(build: Callable[[], torch.Tensor]) -> tuple[torch.Tensor | None, str | None]:
    try:
        return build(), None
    except Exception as e:  # torch refusing to build the mask is the result
        return None, f"{type(e).__name__}: {first_line(e)}"


def mistake_scenarios(spec: BatchSpec, inp: Inputs, keep: torch.Tensor, dtype: torch.dtype,
                      which: tuple[str, ...]) -> list[Scenario]:
    dev = inp.q.device
    real = real_tokens(spec, keep).to(dev)
    struct = structure_mask(spec).to(dev)
    keep4 = keep[:, None].to(dev)
    sdpa_ref = reference(_sdpa_call(inp, keep4))
    mha_ref = reference(_mha_call(inp, spec, ~real, ~struct if _structured(spec) else None))
    out: list[Scenario] = []
    for name in which:
        if name == "mha-mask-into-sdpa":
            wrong = (~real)[:, None, None, :] | (~struct if _structured(spec) else False)
            out.append(_scenario(
                name, "MHA-convention mask (True = masked) handed to SDPA",
                "attn_mask = key_padding_mask[:, None, None, :]   # True = padding (MHA style)\n"
                "F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)  # reads True = keep",
                _sdpa_call(inp, torch.as_tensor(wrong).expand(keep4.shape)), sdpa_ref))
        elif name == "hf-mask-into-mha":
            hf = real.to(torch.int64)
            scen = _scenario(
                name, "Hugging Face attention_mask (1 = real token) handed to MHA",
                "mha(x, x, x, key_padding_mask=attention_mask)          # int64: refused\n"
                "mha(x, x, x, key_padding_mask=attention_mask.bool())   # runs: 1 now = masked",
                _mha_call(inp, spec, hf.bool(), None), mha_ref)
            refused = _mha_int_refusal(inp, spec, hf)
            scen.verdict.append(f"int64 key_padding_mask: {refused}")
            out.append(scen)
        elif name == "float01-into-sdpa":
            out.append(_scenario(
                name, "float 0/1 keep mask handed to SDPA (added, not multiplied)",
                "attn_mask = keep[:, None].float()           # 1 = keep, 0 = masked\n"
                "F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)  # adds 0 or 1",
                _sdpa_call(inp, keep4.to(dtype)), sdpa_ref))
        elif name == "fp16-minus-1e9":
            out.append(_fp16_minus_1e9(inp, keep4))
        elif name == "summed-finfo-min":
            out.append(_summed_finfo_min(spec, inp, keep4, real, struct, dtype))
    return out


def _mha_int_refusal(inp: Inputs, spec: BatchSpec, hf: torch.Tensor) -> str:
    from maskcheck.attention.paths import build_mha

    call = _mha_call(inp, spec, hf, None)
    try:
        mha = build_mha(call)
        with torch.no_grad():
            mha(inp.x, inp.x, inp.x, key_padding_mask=hf)
    except Exception as e:
        return f"{type(e).__name__}: {first_line(e)}"
    return "accepted by this torch"


def _fp16_minus_1e9(inp: Inputs, keep4: torch.Tensor) -> Scenario:
    half = torch.float16
    code = ("scores = scores.masked_fill(~keep, -1e9)          # fp16 scores\n"
            "mask = (~keep).half() * -1e9                      # or: an additive mask in fp16")
    q, k, v = (t.to(half) for t in (inp.q, inp.k, inp.v))
    scores = q @ k.transpose(-2, -1)
    # The mistake is the point here: run it to show what torch does with it.
    _, fill_err = _try(lambda: scores.masked_fill(~keep4, -1e9))  # maskcheck: ignore[MC501]
    mask, _ = _try(lambda: (~keep4).to(half) * -1e9)
    assert mask is not None
    call = AttentionCall("manual", q, k, v, attn_mask=mask)
    scen = _scenario("fp16-minus-1e9", "-1e9 as the masked value in fp16", code, call,
                     reference(AttentionCall("sdpa", q, k, v, attn_mask=keep4)))
    scen.verdict.append(f"masked_fill(~keep, -1e9) on fp16 scores: {fill_err or 'accepted'}")
    vals = sorted({float(x) for x in mask.flatten().tolist()})
    scen.verdict.append(f"(~keep).half() * -1e9 holds {vals}: -1e9 is not representable in "
                        "fp16" if any(math.isinf(x) for x in vals) else
                        f"(~keep).half() * -1e9 holds {vals}")
    return scen


def _summed_finfo_min(spec: BatchSpec, inp: Inputs, keep4: torch.Tensor, real: torch.Tensor,
                      struct: torch.Tensor, dtype: torch.dtype) -> Scenario:
    fdt = dtype if dtype != torch.float64 else torch.float32
    fmin = torch.finfo(fdt).min
    dev = inp.q.device
    s_len = spec.seq
    causal = torch.ones(s_len, s_len, dtype=torch.bool, device=dev).tril() & struct
    causal_plane = torch.zeros(s_len, s_len, dtype=fdt, device=dev).masked_fill(~causal, fmin)
    pad_plane = torch.zeros(real.shape, dtype=fdt, device=dev).masked_fill(~real, fmin)
    summed = causal_plane[None, None] + pad_plane[:, None, None, :]
    q, k, v = (t.to(fdt) for t in (inp.q, inp.k, inp.v))
    intended = real[:, None, None, :] & causal
    scen = _scenario(
        "summed-finfo-min", f"causal and padding finfo.min planes summed ({str(fdt)[6:]})",
        "causal = torch.triu(torch.full((L, L), torch.finfo(dtype).min), 1)\n"
        "padding = (1 - attention_mask[:, None, None, :]) * torch.finfo(dtype).min\n"
        "mask = causal + padding          # overlaps overflow to -inf",
        AttentionCall("manual", q, k, v, attn_mask=summed),
        reference(AttentionCall("sdpa", q, k, v, attn_mask=intended)))
    n_inf = int(torch.isneginf(summed).sum())
    scen.verdict.append(f"the summed mask holds {n_inf} -inf cell(s) where both planes mask "
                        "(finfo.min + finfo.min overflows)" if n_inf else
                        "no cell is masked by both planes in this batch (add --causal and "
                        "--pad with --padding-side left to see the overflow)")
    return scen


def fix_code(api: str, spec: BatchSpec) -> str:
    structure: list[str] = []
    if spec.causal:
        structure.append("allowed &= j <= i                                   # causal")
    if spec.window is not None:
        structure.append(f"allowed &= (i - j) < {spec.window}" if spec.causal else
                         f"allowed &= (i - j).abs() < {spec.window}")
    if spec.block is not None:
        structure.append(f"allowed &= (i // {spec.block}) == (j // {spec.block})  # blocks")
    head = ["import torch", "",
            "# real_tokens: (N, S) bool, True = a real token (e.g. attention_mask.bool())"]
    if structure:
        head += ["i = torch.arange(L)[:, None]; j = torch.arange(S)[None, :]",
                 "allowed = torch.ones(L, S, dtype=torch.bool)", *structure]
    allowed = " & allowed" if structure else ""
    if api == "mha":
        body = ["key_padding_mask = ~real_tokens                       # True = padding"]
        if structure:
            body.append("attn_mask = ~allowed                                  # True = masked")
        body.append("out, _ = mha(x, x, x, key_padding_mask=key_padding_mask"
                    + (", attn_mask=attn_mask" if structure else "") + ", need_weights=False)")
    elif api in ("hf",):
        body = ["attention_mask = real_tokens.long()                   # 1 = real token",
                "out = model(input_ids, attention_mask=attention_mask)  # the model adds causal"]
    elif api == "eager":
        body = [f"keep = real_tokens[:, None, None, :]{allowed}",
                "mask = torch.where(keep, 0.0, torch.finfo(q.dtype).min).to(q.dtype)",
                "# never add two such masks: compose the bool masks, then convert once"]
    else:
        body = [f"attn_mask = real_tokens[:, None, None, :]{allowed}     # True = may attend",
                "out = torch.nn.functional.scaled_dot_product_attention(q, k, v, "
                "attn_mask=attn_mask)"]
    tail = ["# with this batch some query rows see no key (see the runs above); keep their",
            "# outputs out of the loss, or let each pad query attend to itself:",
            "#   keep = keep | torch.eye(L, dtype=torch.bool)   # (N, 1, L, S) per-batch mask"] \
        if spec.pad and ((spec.causal and spec.padding_side == "left") or spec.pad == spec.seq) \
        else []
    return "\n".join(head + body + tail)


def simulate(spec: BatchSpec, *, api: str = "all", mistake: str = "all") -> Simulation:
    from maskcheck.attention.replay import resolve_device

    spec.validate()
    check_choices(api, mistake)
    device = resolve_device(spec.device)
    dtype = DTYPES[spec.dtype]
    keep, lengths = build_keep(spec)
    inp = make_inputs(spec, device, dtype)
    apis = APIS if api == "all" else (api,)
    scenarios = [] if mistake not in ("all", "none") else \
        correct_scenarios(spec, inp, keep, dtype, apis)
    which = MISTAKES if mistake == "all" else (() if mistake == "none" else (mistake,))
    mistakes = mistake_scenarios(spec, inp, keep, dtype, which)
    fix_api = "sdpa" if api in ("all", "sdpa-additive") else api
    return Simulation(spec, keep, lengths, scenarios, mistakes, str(torch.__version__),
                      fix_code(fix_api, spec))


def path_weights(p: PathResult, batch: int, head: int) -> list[list[float]] | None:
    """The (L, S) weights of one (batch, head) of a path, when it has them."""
    w = p.weights
    if w is None or w.dim() < 2:
        return None
    if w.dim() == 4:
        w = w[min(batch, w.shape[0] - 1), min(head, w.shape[1] - 1)]
    elif w.dim() == 3:
        w = w[min(head, w.shape[0] - 1)]
    return [[float(x) for x in row] for row in w.tolist()]


def to_json(sim: Simulation) -> dict[str, Any]:
    def scen(s: Scenario) -> dict[str, Any]:
        return {"name": s.name, "title": s.title, "code": s.code, "error": s.error,
                "verdict": s.verdict,
                "runs": [r.to_json() for r in s.result.runs] if s.result else [],
                "findings": [f.to_json() for f in s.findings]}

    return {"spec": dict(sim.spec.__dict__), "torch": sim.torch_version,
            "lengths": sim.lengths, "keep": sim.keep.to(torch.int8).tolist(),
            "scenarios": [scen(s) for s in sim.scenarios],
            "mistakes": [scen(s) for s in sim.mistakes], "fix": sim.fix_code}
