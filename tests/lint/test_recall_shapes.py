"""Real code shapes behind the misses (and one false alarm) of the third held-out recall set:
each bad source next to the findings it must give, and its correct form next to none."""

from __future__ import annotations

from pathlib import Path

from maskcheck.lint.runner import lint_file

ALL = frozenset(f"MC5{n:02d}" for n in range(1, 25))


def _found(path: Path, source: str) -> list[tuple[int, str]]:
    path.write_text(source)
    report = lint_file(str(path), ALL)
    assert report.error is None, report.error
    return [(f.line, f.code) for f in report.findings]


# lag-llama's CausalSelfAttention (time-series-foundation-models/lag-llama#81): keys
# concatenated with a cache only when one exists, then is_causal=True for every call.
LAG_LLAMA = '''import torch
import torch.nn.functional as F


class CausalSelfAttention(torch.nn.Module):
    def forward(self, q, k, v, use_kv_cache=False):
        if use_kv_cache:
            if self.kv_cache is not None:
                cached_k, cached_v = self.kv_cache
                k = torch.cat([cached_k, k], dim=-2)
                v = torch.cat([cached_v, v], dim=-2)
            self.kv_cache = (k, v)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
'''
# PR #84's fix: the causal flag only on the path that has no cache, an explicit mask on the other.
LAG_LLAMA_FIXED = LAG_LLAMA.replace(
    "        return F.scaled_dot_product_attention(q, k, v, is_causal=True)\n",
    "        if use_kv_cache and self.kv_cache is not None:\n"
    "            keep = torch.ones(k.size(-2), k.size(-2), dtype=torch.bool).tril()\n"
    "            return F.scaled_dot_product_attention(q, k, v, attn_mask=keep[-q.size(-2):])\n"
    "        else:\n"
    "            return F.scaled_dot_product_attention(q, k, v, is_causal=True)\n")


def test_is_causal_after_a_conditional_cache_concatenation_is_found(tmp_path: Path) -> None:
    assert _found(tmp_path / "a.py", LAG_LLAMA) == [(13, "MC510")]


def test_is_causal_on_the_branch_gated_by_the_cache_test_is_silent(tmp_path: Path) -> None:
    assert _found(tmp_path / "a.py", LAG_LLAMA_FIXED) == []


def test_an_if_around_both_the_cache_and_the_call_does_not_hide_it(tmp_path: Path) -> None:
    # Code wrapped whole in one branch: the `if` is shared, so it says nothing about the cache.
    body = "".join("    " + line + "\n" if line else "\n" for line in LAG_LLAMA.splitlines()[3:])
    source = ("import torch\nimport torch.nn.functional as F\nfrom typing import TYPE_CHECKING\n"
              "if TYPE_CHECKING:\n    pass\nelse:\n" + body)
    assert _found(tmp_path / "a.py", source) == [(16, "MC510")]
