"""Metadata of the attention-call rules MC060-MC063 (checked by `maskcheck.attention.findings`
on real runs: `replay`, `simulate`, the runtime guard). Standard library only."""

from __future__ import annotations

from maskcheck.model import Severity
from maskcheck.rules.registry import RuleInfo, register

register(RuleInfo(
    "MC060", "causal-flag-with-mask", Severity.WARNING, "call",
    "is_causal=True and an attn_mask together: MATH raises, other kernels AND them.",
    "F.scaled_dot_product_attention documents that passing both is an error, but only the MATH "
    "backend raises (`Explicit attn_mask should not be set when is_causal=True`). On torch "
    "2.13 the CPU default (the CPU flash kernel) runs and applies both the causal triangle and "
    "the mask, so the same call works or crashes depending on which kernel torch picks, and "
    "the result is whatever that kernel makes of the pair. replay runs the call on every "
    "backend and says which one raised, and whether each result equals causal AND mask, the "
    "mask alone or the causal triangle alone.",
    "F.scaled_dot_product_attention(q, k, v, attn_mask=padding_keep, is_causal=True)",
    "causal = torch.ones(L, S, dtype=torch.bool).tril()\n"
    "F.scaled_dot_product_attention(q, k, v, attn_mask=padding_keep & causal)",
    "fold the causal triangle into attn_mask, or pass is_causal=True alone",
))
register(RuleInfo(
    "MC061", "nan-in-masked-inputs", Severity.ERROR, "call",
    "NaN/inf in key or value at masked positions still reaches the output.",
    "A mask hides a key from the softmax, but the value matmul still multiplies its weight of "
    "0 with the stored value, and 0 * NaN = NaN (pytorch/pytorch#101967). Padding positions "
    "of an uninitialised cache or of a previous layer's NaN therefore poison rows that never "
    "attend to them. maskcheck's reference drops hidden keys exactly, so it shows which rows a "
    "kernel turned into NaN through masked inputs.",
    "k = torch.empty(N, H, S, E)           # padding slots never written\n"
    "F.scaled_dot_product_attention(q, k, v, attn_mask=keep)",
    "k = k.masked_fill(~keep_keys[..., None], 0.0)\n"
    "v = v.masked_fill(~keep_keys[..., None], 0.0)",
    "zero (masked_fill) key and value at padded positions before the call",
))
register(RuleInfo(
    "MC062", "backend-disagreement", Severity.ERROR, "call",
    "Kernels/paths give different results for the same call: NaN on one, zeros or uniform on "
    "another.",
    "The same module and mask take different code paths depending on need_weights, "
    "train/eval, grad mode, head parity and the SDPA backend torch picks. Where a query row has "
    "nothing to attend, nn.MultiheadAttention's need_weights=True path and its eval fast path "
    "return NaN while the need_weights=False path returns zeros (pytorch/pytorch#41508, "
    "pytorch/pytorch#160064); CUDA kernels have differed from CPU for finfo.min rows "
    "(pytorch/pytorch#110213). Code that works in training then NaNs in evaluation, or on "
    "another machine. replay runs every path and names the rows on which they disagree.",
    "mha = nn.MultiheadAttention(E, H, batch_first=True).eval()\n"
    "with torch.no_grad():\n"
    "    out, _ = mha(x, x, x, key_padding_mask=pad)   # a sequence that is all padding",
    "keep = ~pad.all(dim=1)                 # drop empty sequences before the call\n"
    "out, _ = mha(x[keep], x[keep], x[keep], key_padding_mask=pad[keep])",
    "make every query row keep at least one key; do not rely on one path's NaN-or-zero",
))
register(RuleInfo(
    "MC063", "silent-leak", Severity.ERROR, "call",
    "A fully-masked row whose output is not zero/NaN but attends to masked keys, e.g. "
    "finfo.min in fp16.",
    "Kernels accumulate fp16 scores in fp32, so `score + finfo(float16).min` keeps the "
    "differences between scores and softmax re-normalises them: a row whose every key is "
    "masked with -65504 returns exactly the unmasked attention output, with no NaN and no "
    "warning (conventions.md section 2.2). Masks too weak for the scores (-1e4, -1e5: "
    "TransformerLensOrg/TransformerLens#366) leak the same way on rows that do keep keys. "
    "maskcheck measures the weight each path puts on the keys the mask hides.",
    "mask = torch.zeros(N, 1, L, S, dtype=torch.float16)\n"
    "mask[:, :, 0, :] = torch.finfo(torch.float16).min    # row 0 sees nothing\n"
    "F.scaled_dot_product_attention(q16, k16, v16, attn_mask=mask)",
    "keep = torch.ones(N, 1, L, S, dtype=torch.bool); keep[:, :, 0, :] = False\n"
    "F.scaled_dot_product_attention(q16, k16, v16, attn_mask=keep)   # row 0 -> zeros",
    "pass a bool mask (or -inf), and give every query at least one key",
))
