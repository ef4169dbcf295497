"""A class of the file named like torch's module (`class Transformer(nn.Module)`, the Annotated
Transformer's) is the file's, also when its construction is moved or switched to eval
(`Transformer(...).to(device)`): its masks follow its own convention, not nn.Transformer's.
A bad source next to the finding it must give, its correct form next to none."""

from __future__ import annotations

from collections.abc import Callable

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

OWN = """\
import torch
from torch import nn


class Transformer(nn.Module):
    def forward(self, src, trg, src_mask, trg_mask):
        return src


def loop(model, src, trg, trg_mask):
    return model(src, trg, None, trg_mask)


def main(ids, device):
    keep = torch.tril(torch.ones(ids.shape[1], ids.shape[1])) == 1
    model = Transformer().to(device)
    return loop(model, ids, ids, keep)
"""


def test_the_files_own_transformer_takes_its_own_masks(found: Found) -> None:
    assert found(OWN) == []
    assert found(OWN.replace("Transformer().to(device)", "Transformer().to(device).eval()")) == []


def test_torchs_transformer_moved_to_a_device_is_still_torchs(found: Found) -> None:
    torchs = OWN.replace("class Transformer(nn.Module):\n    def forward(self, src, trg, "
                         "src_mask, trg_mask):\n        return src\n", "").replace(
        "Transformer().to(device)", "nn.Transformer(16, 2, batch_first=True).to(device)")
    # reported once, where the triangle is made (loop() hands it to the module, main() passes
    # it: the same bug)
    assert found(torchs) == [(12, "MC521")]
