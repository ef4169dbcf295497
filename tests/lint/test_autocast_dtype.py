"""Matmuls inside `with torch.autocast(...)` have autocast's dtype: a float32 minimum filled into
their scores raises (float16 on CUDA by default, bfloat16 on the CPU), and one chosen by
torch.where turns into -inf. Outside the block, with autocast off, or in bfloat16 where the value
fits, the same fills are silent."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

AUTOCAST_FILL = '''import torch
import torch.nn as nn


class Policy(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.qk = nn.Linear(dim, 2 * dim)

    def forward(self, x, keep):
        with torch.autocast("cuda", dtype=torch.float16):
            q, k = self.qk(x).chunk(2, -1)
            w = q @ k.transpose(-1, -2)
            w = w.masked_fill(~keep, torch.finfo(torch.float32).min)
        return w.softmax(-1)
'''


def test_float32_minimum_filled_into_autocast_scores_is_found(found: Found) -> None:
    assert found(AUTOCAST_FILL) == [(14, "MC517")]


@pytest.mark.parametrize("spelling", [
    'torch.cuda.amp.autocast()',
    'torch.amp.autocast("cuda")',
    'torch.autocast(device_type="cuda")',
    # The device is not known, but autocast lowers only to float16 or bfloat16, and the float32
    # minimum overflows both (test_an_unknown_autocast_dtype_is_still_16_bit).
    'torch.autocast(device)',
    'torch.autocast("cuda", dtype=amp_dtype)',
])
def test_every_spelling_of_a_float16_autocast_is_read(found: Found, spelling: str) -> None:
    source = AUTOCAST_FILL.replace('torch.autocast("cuda", dtype=torch.float16)', spelling)
    assert found(source) == [(14, "MC517")]


@pytest.mark.parametrize("spelling", [
    'torch.autocast("cuda", enabled=False)',
    'torch.autocast("cuda", dtype=torch.float32)',  # not a lower dtype: autocast turns itself off
    'torch.no_grad()',
])
def test_no_known_autocast_leaves_the_scores_dtype_unknown(found: Found, spelling: str) -> None:
    source = AUTOCAST_FILL.replace('torch.autocast("cuda", dtype=torch.float16)', spelling)
    assert found(source) == []


def test_an_unknown_autocast_dtype_is_still_16_bit() -> None:
    """torch 2.13: autocast to any other dtype disables itself (with a warning); in both 16-bit
    dtypes a fill with the float32 minimum raises."""
    a = torch.randn(2, 2)
    with pytest.warns(UserWarning, match="Disabling autocast"), torch.autocast(
            "cpu", dtype=torch.float32):
        assert (a @ a).dtype == torch.float32
    for dtype in (torch.float16, torch.bfloat16):
        with torch.autocast("cpu", dtype=dtype):
            assert (a @ a).dtype == dtype
        with pytest.raises(RuntimeError, match="overflow"):
            torch.zeros(2, dtype=dtype).masked_fill(torch.tensor([True, False]),
                                                    torch.finfo(torch.float32).min)


def test_own_dtype_minimum_under_autocast_is_silent(found: Found) -> None:
    source = AUTOCAST_FILL.replace("torch.finfo(torch.float32).min", "torch.finfo(w.dtype).min")
    assert found(source) == []


def test_large_negative_under_bfloat16_autocast_is_silent(found: Found) -> None:
    # -1e9 is finite in bfloat16, which has float32's exponent range
    source = AUTOCAST_FILL.replace('torch.autocast("cuda", dtype=torch.float16)',
                                   'torch.autocast("cpu")').replace(
        "torch.finfo(torch.float32).min", "-1e9")
    assert found(source) == []


def test_large_negative_under_float16_autocast_is_found(found: Found) -> None:
    source = AUTOCAST_FILL.replace("torch.finfo(torch.float32).min", "-1e9")
    assert found(source) == [(14, "MC501")]


WHERE_FILL = '''import torch


def scores(q, k, keep):
    w = q.half() @ k.half().transpose(-1, -2)
    return torch.where(keep, w, torch.finfo(torch.float).min).softmax(-1)
'''


def test_float32_minimum_chosen_by_where_on_half_scores_is_found(found: Found) -> None:
    assert found(WHERE_FILL) == [(6, "MC517")]


def test_where_on_float32_scores_is_silent(found: Found) -> None:
    assert found(WHERE_FILL.replace(".half()", ".float()")) == []


def test_where_gives_minus_inf_in_half_as_the_message_says() -> None:
    keep = torch.tensor([True, False])
    for dtype in (torch.float16, torch.bfloat16):
        out = torch.where(keep, torch.zeros(2, dtype=dtype), torch.finfo(torch.float).min)
        assert out.dtype == dtype and out[1].item() == float("-inf")
    with pytest.raises(RuntimeError, match="without overflow"):
        torch.zeros(2, dtype=torch.float16).masked_fill(~keep, torch.finfo(torch.float32).min)


def test_autocast_default_dtypes_are_what_the_linter_assumes() -> None:
    assert torch.get_autocast_dtype("cuda") == torch.float16
    assert torch.get_autocast_dtype("cpu") == torch.bfloat16


def test_autocast_imported_from_cuda_amp_is_float16(found: Found) -> None:
    source = AUTOCAST_FILL.replace("import torch.nn as nn\n",
                                   "import torch.nn as nn\nfrom torch.cuda.amp import autocast\n")
    source = source.replace('torch.autocast("cuda", dtype=torch.float16)', "autocast()")
    assert found(source) == [(15, "MC517")]


def test_autocast_imported_from_cpu_amp_is_bfloat16(found: Found) -> None:
    source = AUTOCAST_FILL.replace("import torch.nn as nn\n",
                                   "import torch.nn as nn\nfrom torch.cpu.amp import autocast\n")
    source = source.replace('torch.autocast("cuda", dtype=torch.float16)', "autocast()")
    assert found(source.replace("torch.finfo(torch.float32).min", "-1e9")) == []
    assert found(source) == [(15, "MC517")]  # the float32 minimum does not fit bfloat16 either
