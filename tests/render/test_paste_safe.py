"""Code snippets re-wrapped for narrow screens stay the same Python program."""

from __future__ import annotations

import ast

import pytest

from maskcheck.render.attention_report import paste_safe

SNIPPETS = [
    "attn_mask = keep[:, None]                  # (N, 1, L, S) bool, True = may attend\n"
    "F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)",
    "out, w = mha(x, x, x, key_padding_mask=key_padding_mask, attn_mask=attn_mask)",
    "# real_tokens: (N, S) bool, True = a real token (e.g. attention_mask.bool())\n"
    "i = torch.arange(L)[:, None]; j = torch.arange(S)[None, :]\n"
    "out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)",
    "mask = torch.where(keep[:, None], 0.0, torch.finfo(dtype).min)  # (N,1,L,S)\n"
    "w = torch.softmax(q @ k.transpose(-2, -1) * scale + mask, -1, dtype=torch.float32)",
    "x = f('a, b  # not a comment', 1e-9, 0.5)   # a comment",
]


@pytest.mark.parametrize("width", [20, 30, 40, 60, 100])
@pytest.mark.parametrize("code", SNIPPETS)
def test_rewrapped_code_is_the_same_program(code: str, width: int) -> None:
    wrapped = paste_safe(code, width)
    assert ast.dump(ast.parse(wrapped)) == ast.dump(ast.parse(code))
    if width >= 40:  # narrower, a long name or keyword argument may not fit on any line
        assert max(len(line) for line in wrapped.splitlines()) <= width, wrapped


def test_a_trailing_comment_moves_above_its_code() -> None:
    wrapped = paste_safe("attn_mask = ~allowed          # True = may NOT attend", 40)
    assert wrapped.splitlines() == ["# True = may NOT attend", "attn_mask = ~allowed"]
