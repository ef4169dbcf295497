"""One attention call as data, what its masks hide, and maskcheck's float64 reference.

`hidden` is the mask as its API *reads* it, per (batch, head, query, key): a bool SDPA mask
hides False, a bool MHA mask hides True, a float mask hides -inf and every value at or below
`ADDITIVE_MASKED_BELOW` (finfo.min included, whatever the dtype). The reference applies that
reading exactly (hidden keys get weight 0), so a row whose keys are all hidden has no defined
answer: the reference returns NaN for it and those rows are left out of `max_abs_err`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import torch

from maskcheck.conventions import ADDITIVE_MASKED_BELOW
from maskcheck.errors import MaskcheckError

CallApi = Literal["sdpa", "mha", "manual"]

DTYPES: dict[str, torch.dtype] = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
}

# Names of the nn.MultiheadAttention parameters a capture file stores (CONTRACT extension).
def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@dataclass
class AttentionCall:
    """SDPA tensors are as passed; MHA tensors are batch-first (N, L, E) with weights."""

    api: CallApi
    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    attn_mask: torch.Tensor | None = None
    key_padding_mask: torch.Tensor | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    weights: dict[str, torch.Tensor] = field(default_factory=dict)
    # "key"/"value" -> "query" when they were the same tensor object (self-attention).
    aliases: dict[str, str] = field(default_factory=dict)

    @property
    def is_causal(self) -> bool:
        return bool(self.kwargs.get("is_causal", False))

    @property
    def num_heads(self) -> int:
        if self.api == "mha":
            return int(self.kwargs["num_heads"])
        return int(self.query.shape[-3]) if self.query.dim() >= 3 else 1

    @property
    def dtype(self) -> str:
        return dtype_name(self.query.dtype)

    @property
    def device(self) -> str:
        return self.query.device.type

    def self_attention(self) -> bool:
        return self.aliases.get("key") == "query" and self.aliases.get("value") == "query"

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v with the aliasing of the original call restored (q is k is v)."""
        q = self.query
        k = q if self.aliases.get("key") == "query" else self.key
        v = q if self.aliases.get("value") == "query" else (
            k if self.aliases.get("value") == "key" else self.value)
        return q, k, v

    def to(self, device: str | torch.device, dtype: torch.dtype | None = None) -> AttentionCall:
        def move(t: torch.Tensor | None, floating: bool) -> torch.Tensor | None:
            if t is None:
                return None
            if dtype is not None and floating and t.is_floating_point():
                return t.to(device=device, dtype=dtype)
            return t.to(device=device)

        return replace(
            self,
            query=move(self.query, True),  # type: ignore[arg-type]
            key=move(self.key, True),  # type: ignore[arg-type]
            value=move(self.value, True),  # type: ignore[arg-type]
            attn_mask=move(self.attn_mask, True),
            key_padding_mask=move(self.key_padding_mask, True),
            weights={k: move(w, True) for k, w in self.weights.items()},  # type: ignore[misc]
        )


# ------------------------------------------------------------------------------- hiding


def hidden_by(mask: torch.Tensor, true_means: Literal["keep", "masked"]) -> torch.Tensor:
    """Bool tensor, True where the mask hides the key, as the API reads it."""
    if mask.dtype == torch.bool:
        return ~mask if true_means == "keep" else mask.clone()
    if mask.is_floating_point():
        m = mask.to(torch.float64)
        return (m <= ADDITIVE_MASKED_BELOW) | torch.isneginf(m)
    # Integer masks are refused by torch; read them as their API's bool would be.
    return hidden_by(mask != 0, true_means)


def causal_hidden(l_len: int, s_len: int, device: torch.device) -> torch.Tensor:
    """SDPA is_causal: upper-left aligned, tril(diagonal=0) kept."""
    keep = torch.ones(l_len, s_len, dtype=torch.bool, device=device).tril()
    return ~keep


def sdpa_scores_shape(call: AttentionCall) -> tuple[int, ...]:
    q, k, _ = call.tensors()
    lead = torch.broadcast_shapes(  # type: ignore[no-untyped-call]
        q.shape[:-2], _gqa_expand(call, k).shape[:-2])
    return (*lead, q.shape[-2], k.shape[-2])


def _gqa_expand(call: AttentionCall, t: torch.Tensor) -> torch.Tensor:
    q = call.query
    gqa = call.kwargs.get("enable_gqa") and t.dim() >= 3 and q.dim() >= 3
    if gqa and t.shape[-3] != q.shape[-3]:
        return t.repeat_interleave(q.shape[-3] // t.shape[-3], dim=-3)
    return t


def sdpa_hidden(call: AttentionCall) -> torch.Tensor:
    """(…, L, S) bool: what SDPA is told to hide (mask and is_causal together)."""
    shape = sdpa_scores_shape(call)
    hidden = torch.zeros(shape, dtype=torch.bool, device=call.query.device)
    if call.attn_mask is not None:
        try:
            hidden = hidden | hidden_by(call.attn_mask, "keep").expand(shape)
        except RuntimeError as e:
            raise MaskcheckError(
                f"attn_mask of shape {tuple(call.attn_mask.shape)} does not broadcast to the "
                f"scores {shape}: {_first_line(e)}") from None
    if call.is_causal:
        hidden = hidden | causal_hidden(shape[-2], shape[-1], hidden.device)
    return hidden


def mha_hidden(call: AttentionCall) -> torch.Tensor:
    """(N, H, L, S) bool: what nn.MultiheadAttention is told to hide."""
    n, l_len, _ = call.query.shape
    s_len = call.key.shape[1]
    h = call.num_heads
    hidden = torch.zeros(n, h, l_len, s_len, dtype=torch.bool, device=call.query.device)
    if call.key_padding_mask is not None:
        hidden = hidden | hidden_by(call.key_padding_mask, "masked").reshape(n, 1, 1, s_len)
    if call.attn_mask is not None:
        am = hidden_by(call.attn_mask, "masked")
        am = am.reshape(n, h, l_len, s_len) if am.dim() == 3 else am.reshape(1, 1, l_len, s_len)
        hidden = hidden | am
    if call.is_causal and call.attn_mask is None:
        hidden = hidden | causal_hidden(l_len, s_len, hidden.device)
    return hidden


def call_hidden(call: AttentionCall) -> torch.Tensor:
    return mha_hidden(call) if call.api == "mha" else sdpa_hidden(call)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


# --------------------------------------------------------------------------- reference


@dataclass
class Reference:
    output: torch.Tensor  # float64; NaN rows where nothing can be attended
    weights: torch.Tensor  # float64 (…, L, S); NaN rows likewise
    hidden: torch.Tensor  # bool (…, L, S)
    empty: torch.Tensor  # bool over output rows: no key to attend


def _softmax_hidden(scores: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
    scores = scores.masked_fill(hidden, -math.inf)
    return torch.softmax(scores, dim=-1)  # all -inf rows -> NaN, on purpose


def _bias(mask: torch.Tensor | None, hidden_shape: tuple[int, ...]) -> torch.Tensor | None:
    """The finite part of a float mask, added to the scores as the API does."""
    if mask is None or not mask.is_floating_point():
        return None
    m = mask.to(torch.float64)
    keep = ~((m <= ADDITIVE_MASKED_BELOW) | torch.isneginf(m) | torch.isnan(m))
    return torch.where(keep, m, torch.zeros_like(m)).expand(hidden_shape) if m.dim() else None


def sdpa_reference(call: AttentionCall) -> Reference:
    q, k, v = (t.to(torch.float64) for t in call.tensors())
    k, v = _gqa_expand(call, k), _gqa_expand(call, v)
    hidden = sdpa_hidden(call)
    scale = call.kwargs.get("scale") or 1.0 / math.sqrt(q.shape[-1])
    scores = (q @ k.transpose(-2, -1)) * float(scale)
    scores = scores.expand(hidden.shape).clone()
    bias = _bias(call.attn_mask, tuple(hidden.shape))
    if bias is not None:
        scores = scores + bias
    weights = _softmax_hidden(scores, hidden)
    output = _weighted_values(weights, hidden, v)
    empty = hidden.all(dim=-1)
    return Reference(output, weights, hidden, empty)


def _weighted_values(weights: torch.Tensor, hidden: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    # A NaN/inf in a value that every query hides must not reach the reference (0 * NaN = NaN).
    hidden_for_all = hidden.all(dim=-2).unsqueeze(-1)
    v = v.expand(*hidden.shape[:-2], *v.shape[-2:])
    v = torch.where(hidden_for_all & ~torch.isfinite(v), torch.zeros_like(v), v)
    return torch.nan_to_num(weights, nan=0.0) @ v + _nan_rows(weights)


def _nan_rows(weights: torch.Tensor) -> torch.Tensor:
    return torch.where(torch.isnan(weights).any(-1, keepdim=True), math.nan, 0.0).to(weights)


def mha_projections(
    call: AttentionCall, dtype: torch.dtype = torch.float64
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v projected with the module's weights, split into heads: (N, H, L|S, D)."""
    q, k, v = (t.to(dtype) for t in call.tensors())
    w = {name: t.to(dtype) for name, t in call.weights.items()}
    e = call.query.shape[-1]
    if "in_proj_weight" in w:
        wq, wk, wv = w["in_proj_weight"].chunk(3)
    else:
        wq, wk, wv = w["q_proj_weight"], w["k_proj_weight"], w["v_proj_weight"]
    bq = bk = bv = None
    if "in_proj_bias" in w:
        bq, bk, bv = w["in_proj_bias"].chunk(3)
    qp, kp, vp = (torch.nn.functional.linear(x, wt, b) for x, wt, b in
                  ((q, wq, bq), (k, wk, bk), (v, wv, bv)))
    h = call.num_heads

    def heads(x: torch.Tensor) -> torch.Tensor:
        n, length, _ = x.shape
        return x.reshape(n, length, h, e // h).transpose(1, 2)

    return heads(qp), heads(kp), heads(vp)


def mha_reference(call: AttentionCall) -> Reference:
    if "bias_k" in call.weights or call.kwargs.get("add_zero_attn"):
        raise MaskcheckError("the float64 reference does not model bias_k/bias_v/add_zero_attn")
    qh, kh, vh = mha_projections(call)
    hidden = mha_hidden(call)
    scores = (qh @ kh.transpose(-2, -1)) / math.sqrt(qh.shape[-1])
    n, h, l_len, s_len = hidden.shape
    for mask, shape in ((call.key_padding_mask, (n, 1, 1, s_len)), (call.attn_mask, None)):
        if mask is None or not mask.is_floating_point():
            continue
        m = mask.to(torch.float64)
        m = m.reshape(shape) if shape else (
            m.reshape(n, h, l_len, s_len) if m.dim() == 3 else m.reshape(1, 1, l_len, s_len))
        bias = _bias(m, (n, h, l_len, s_len))
        if bias is not None:
            scores = scores + bias
    weights = _softmax_hidden(scores, hidden)
    heads_out = _weighted_values(weights, hidden, vh)  # (N, H, L, D)
    merged = heads_out.transpose(1, 2).reshape(n, l_len, -1)
    w = call.weights
    out = torch.nn.functional.linear(
        merged, w["out_proj_weight"].to(torch.float64),
        w["out_proj_bias"].to(torch.float64) if "out_proj_bias" in w else None)
    empty = hidden.all(dim=-1).any(dim=1)  # (N, L): some head of the row sees nothing
    return Reference(out, weights, hidden, empty)


def reference(call: AttentionCall) -> Reference:
    return mha_reference(call) if call.api == "mha" else sdpa_reference(call)
