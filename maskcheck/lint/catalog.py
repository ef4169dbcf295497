"""Metadata of the source rules MC501-MC506 (checks live in `maskcheck.lint.checks`)."""

from __future__ import annotations

from maskcheck.model import Severity
from maskcheck.rules.registry import RuleInfo, register

E, W = Severity.ERROR, Severity.WARNING

LARGE_NEGATIVE_LITERAL = register(RuleInfo(
    "MC501", "large-negative-literal", W, "source",
    "masked_fill / additive mask with -1e9-style literals: overflows fp16.",
    "float16 holds nothing beyond 65504 in magnitude. `scores.masked_fill(mask, -1e9)` on fp16 "
    "scores raises 'value cannot be converted to type c10::Half without overflow', and an "
    "additive mask built as `(1 - mask) * -1e9` becomes -inf once cast to fp16, so a fully "
    "masked row turns into NaN after softmax. The same code works in fp32, which is why it "
    "survives until someone turns on autocast or loads the model in half precision.",
    "scores = scores.masked_fill(mask == 0, -1e9)",
    "scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)",
    "use torch.finfo(x.dtype).min (or float('-inf') with a safe softmax) instead of the literal",
))
INVERTED_MASK_ARGUMENT = register(RuleInfo(
    "MC502", "inverted-mask-argument", W, "source",
    "A name with one convention passed where the other is expected, e.g. HF `attention_mask` "
    "as `key_padding_mask`.",
    "A Hugging Face `attention_mask` holds 1 for real tokens; nn.MultiheadAttention's "
    "`key_padding_mask` takes True for padding. Passed straight through, the model attends "
    "only to the padding and ignores every real token. The reverse happens with "
    "F.scaled_dot_product_attention, whose boolean `attn_mask` means True = may attend: a "
    "`key_padding_mask` (True = padding) passed as `attn_mask` keeps exactly the padding.",
    "out, _ = mha(x, x, x, key_padding_mask=attention_mask)",
    "out, _ = mha(x, x, x, key_padding_mask=attention_mask == 0)",
    "invert the mask where the conventions meet (`~m`, `m == 0`, `m.logical_not()`)",
))
TRIU_DIAGONAL_ZERO = register(RuleInfo(
    "MC503", "triu-diagonal-zero", E, "source",
    "triu of a -inf/True matrix with diagonal=0 hides the diagonal.",
    "`torch.triu(m)` keeps the main diagonal (diagonal=0 is the default). Applied to a matrix "
    "of -inf (or of True in a True = masked mask) it masks every query's own position as well "
    "as the future; the first query can attend to nothing, so its row is NaN (or zeros, or "
    "uniform, depending on the kernel). A causal mask needs diagonal=1.",
    "mask = torch.triu(torch.full((n, n), float('-inf')), diagonal=0)",
    "mask = torch.triu(torch.full((n, n), float('-inf')), diagonal=1)",
    "pass diagonal=1 to triu for a causal mask",
))
FILL_AFTER_ZERO_FILL = register(RuleInfo(
    "MC504", "fill-after-zero-fill", E, "source",
    "`m[m == 0] = -inf` on a zero-initialised mask: masks everything.",
    "A mask created with torch.zeros and then filled where it equals 0 is -inf everywhere "
    "unless something wrote non-zero values in between. Writing 0 to the blocks that should "
    "stay visible (as in the widely copied `create_block_mask` recipe) changes nothing, so "
    "every row is fully masked and attention returns NaN.",
    "mask = torch.zeros(n, n)\n"
    "for i in range(0, n, b):\n"
    "    mask[i:i + b, i:i + b] = 0\n"
    "mask[mask == 0] = float('-inf')",
    "mask = torch.full((n, n), float('-inf'))\n"
    "for i in range(0, n, b):\n"
    "    mask[i:i + b, i:i + b] = 0",
    "start from torch.full(..., float('-inf')) and write 0 where attention is allowed",
))
INPLACE_FILL_ON_GRAD = register(RuleInfo(
    "MC505", "inplace-fill-on-grad", W, "source",
    "`masked_fill_` on a tensor that requires grad.",
    "An in-place masked_fill_ on a leaf tensor that requires grad (a parameter, or a tensor "
    "made with requires_grad=True) raises 'a leaf Variable that requires grad is being used "
    "in an in-place operation'; on a non-leaf it overwrites values autograd may need and the "
    "backward pass fails or computes the wrong gradient. Use the out-of-place masked_fill.",
    "x = torch.randn(3, requires_grad=True)\n"
    "x.masked_fill_(mask, 0.0)",
    "x = torch.randn(3, requires_grad=True)\n"
    "y = x.masked_fill(mask, 0.0)",
    "use masked_fill (out of place), or do the in-place fill under torch.no_grad()",
))
CAUSAL_FLAG_WITH_MASK = register(RuleInfo(
    "MC506", "causal-flag-with-mask", W, "source",
    "`scaled_dot_product_attention(..., attn_mask=..., is_causal=True)`.",
    "F.scaled_dot_product_attention does not combine is_causal=True with an explicit "
    "attn_mask the same way on every backend: the MATH path raises, other kernels AND the two "
    "or ignore one of them. Fold the causal part into attn_mask, or drop the mask and keep "
    "is_causal=True.",
    "out = F.scaled_dot_product_attention(q, k, v, attn_mask=pad, is_causal=True)",
    "out = F.scaled_dot_product_attention(q, k, v, attn_mask=pad & causal)",
    "pass either attn_mask (with the causal part folded in) or is_causal=True, not both",
))
