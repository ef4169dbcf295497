"""Real code shapes whose verdict depends on where they sit (file name, decorator, branch)."""

from __future__ import annotations

from pathlib import Path

from maskcheck.lint.runner import lint_file

ALL = frozenset({"MC501", "MC510", "MC512"})

# vllm tests/kernels/attention/test_minimax_m3_indexer_cp.py:243: a float32 reference's sentinel
# in a test module that also runs bfloat16 kernels.
REFERENCE = '''import torch


def force_scores(scores, valid):
    cache = torch.randn(4, 8, dtype=torch.bfloat16)
    forced = scores.clone()
    forced[:, 0] = torch.where(valid, forced[:, 0], torch.full_like(forced[:, 0], -1e30))
    return forced, cache
'''


def _codes(path: Path, source: str) -> list[str]:
    path.write_text(source)
    report = lint_file(str(path), ALL)
    assert report.error is None, report.error
    return [f.code for f in report.findings]


def test_a_raising_fill_in_a_test_module_is_not_reported(tmp_path: Path) -> None:
    # In a test, a fill that raises on float16 fails on its first float16 run: it cannot hide.
    assert _codes(tmp_path / "test_indexer.py", REFERENCE) == []


def test_the_same_fill_outside_tests_is_reported(tmp_path: Path) -> None:
    assert _codes(tmp_path / "indexer.py", REFERENCE) == ["MC501"]


def test_an_additive_mask_in_a_test_module_is_still_reported(tmp_path: Path) -> None:
    # `mask * -1e9` does not raise in float16 (it becomes -inf): a test can carry it silently.
    source = ("import torch\n\n\ndef check(scores, pad_mask):\n"
              "    x = scores.half()\n"
              "    return x + pad_mask * -1e9\n")
    assert _codes(tmp_path / "test_attention.py", source) == ["MC501"]


def test_only_kernel_decorators_hide_a_function(tmp_path: Path) -> None:
    body = ("def f(scores, keep):\n    m = keep.bool()\n    return scores * (1 - m)\n")
    kernel = "import torch\nimport triton\n\n\n@triton.jit\n" + body
    compiled = "import torch\n\n\n@torch.compile\n" + body
    assert _codes(tmp_path / "kernel.py", kernel) == []
    assert _codes(tmp_path / "compiled.py", compiled) == ["MC512"]


def test_a_flag_true_in_both_branches_is_still_true(tmp_path: Path) -> None:
    # The join keeps what both branches agree on: the cache bug is still found.
    source = ("import torch\nimport torch.nn.functional as F\n\n\n"
              "def attend(q, k, v, past_k, fast):\n"
              "    k = torch.cat([past_k, k], dim=-2)\n"
              "    if fast:\n        causal = True\n    else:\n        causal = True\n"
              "    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)\n")
    assert _codes(tmp_path / "attend.py", source) == ["MC510"]


def test_a_flag_set_in_one_branch_only_keeps_its_evidence(tmp_path: Path) -> None:
    source = ("import torch\nimport torch.nn.functional as F\n\n\n"
              "def attend(q, k, v, past_k):\n"
              "    causal = False\n"
              "    if past_k is not None:\n"
              "        k = torch.cat([past_k, k], dim=-2)\n        causal = True\n"
              "    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)\n")
    assert _codes(tmp_path / "attend.py", source) == ["MC510"]
