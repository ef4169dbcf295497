"""The false-alarm classes of the fresh7 precision set, each as the code shape it takes in real
code next to the buggy shape that must still be reported: a large negative fill of a torch.full
whose dtype is an integer one (rl4co's FFSP schedule table)."""

from __future__ import annotations

from collections.abc import Callable

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)


# rl4co envs/scheduling/ffsp/env.py:279: an int64 table initialised to -999999.
INT_TABLE = '''import torch


def reset(batch_size, machines, jobs, device):
    schedule = torch.full(
        size=(batch_size, machines, jobs + 1),
        dtype=torch.long,
        device=device,
        fill_value=-999999,
    )
    return schedule
'''


def test_a_full_of_an_integer_dtype_is_silent(found: Found) -> None:
    assert found(INT_TABLE) == []
    assert found(INT_TABLE.replace("torch.long", "torch.int32")) == []


def test_the_same_full_in_float16_is_still_reported(found: Found) -> None:
    assert found(INT_TABLE.replace("torch.long", "torch.float16")) == [(9, "MC501")]
