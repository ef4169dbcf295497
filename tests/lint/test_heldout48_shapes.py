"""Shapes of held-out 48 (session 30, training-framework and deployment code): the bad source
next to the finding it must give, its correct form next to none, and the torch 2.13 fact it
rests on."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

from tests.lint.conftest import line_of

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)


# The DGA detector's ONNX export: the model comes back from `train()` and is wrapped after
# `.eval()`; the wrapper turns the int keep-mask into a float 0/1 "bias" that SDPA adds.
EXPORT_WRAPPER = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def forward(self, q, attn_bias):
        return F.scaled_dot_product_attention(q, q, q, attn_mask=attn_bias)


class Detector(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(2)])

    def forward(self, x, attn_bias):
        for block in self.blocks:
            x = block(x, attn_bias)
        return x


class ExportWrapper(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x, attention_mask):
        attn_bias = attention_mask[:, None, None, :].to(torch.float32)
        return self.model(x, attn_bias)


def train():
    model = Detector()
    return model


def export(model):
    wrapper = ExportWrapper(model.eval())
    return wrapper


if __name__ == "__main__":
    export(train())
"""


def test_a_model_returned_by_a_function_and_wrapped_after_eval_is_followed(
        found: Found) -> None:
    cast = line_of(EXPORT_WRAPPER, "attn_bias = attention_mask[:, None, None, :]")
    assert found(EXPORT_WRAPPER) == [(cast, "MC508")]
    fixed = EXPORT_WRAPPER.replace(
        "attention_mask[:, None, None, :].to(torch.float32)",
        "attention_mask[:, None, None, :].bool()")
    assert found(fixed) == []


def test_the_model_a_function_returns_is_followed_without_eval(found: Found) -> None:
    direct = EXPORT_WRAPPER.replace("ExportWrapper(model.eval())", "ExportWrapper(model)")
    assert [code for _, code in found(direct)] == ["MC508"]


def test_sdpa_adds_a_float_keep_mask_instead_of_masking() -> None:
    q = torch.randn(1, 1, 3, 4, generator=torch.Generator().manual_seed(0))
    keep = torch.tensor([[True, True, False]])
    as_bool = F.scaled_dot_product_attention(q, q, q, attn_mask=keep)
    as_float = F.scaled_dot_product_attention(q, q, q, attn_mask=keep.float())
    as_bias = F.scaled_dot_product_attention(
        q, q, q, attn_mask=torch.zeros(1, 3).masked_fill(~keep, float("-inf")))
    assert torch.allclose(as_bool, as_bias, atol=1e-6)
    assert not torch.allclose(as_float, as_bool, atol=1e-3)


# The ECG rhythm model under ignite: the collate function builds the pair mask under the key
# "pair_mask"; the framework calls the model (`model_fn = lambda m, x: m(*x)`), so no call of the
# file reaches its forward, whose parameter has the key's name.
BATCH_FIELD_BY_NAME = """\
import torch
import torch.nn as nn


def collate(batch):
    n = max(len(b) for b in batch)
    keep = torch.zeros(len(batch), n, dtype=torch.bool)
    for i, b in enumerate(batch):
        keep[i, :len(b)] = True
    pair_mask = keep[:, :, None] & keep[:, None, :]
    return {"beats": torch.zeros(len(batch), n, 8), "pair_mask": pair_mask}


def masked_attention(q, k, v, pair_mask):
    scores = q @ k.transpose(-2, -1)
    scores = scores.masked_fill(~pair_mask[:, None], float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


class Layer(nn.Module):
    def forward(self, x, pair_mask):
        return masked_attention(x, x, x, pair_mask)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Layer() for _ in range(2)])

    def forward(self, beats, pair_mask):
        for layer in self.layers:
            beats = layer(beats, pair_mask)
        return beats
"""


def test_a_parameter_named_as_a_batch_key_holds_that_field(found: Found) -> None:
    fill = line_of(BATCH_FIELD_BY_NAME, 'masked_fill(~pair_mask[:, None], float("-inf"))')
    assert found(BATCH_FIELD_BY_NAME) == [(fill, "MC507")]
    finite = BATCH_FIELD_BY_NAME.replace('float("-inf")', "torch.finfo(scores.dtype).min")
    assert found(finite) == []


def test_a_forward_the_file_calls_takes_what_its_calls_pass_not_the_key(found: Found) -> None:
    # a call of the file gives the parameter its value: the key's name says nothing more
    called = BATCH_FIELD_BY_NAME + """

def run(beats, keys):
    model = Net()
    return model(beats, keys[:, None, :].expand(-1, keys.size(1), -1))
"""
    assert found(called) == []


def test_a_pair_mask_filled_with_minus_inf_gives_nan_rows_for_padded_queries() -> None:
    keep = torch.tensor([[True, True, False]])
    pair = keep[:, :, None] & keep[:, None, :]
    weights = torch.zeros(1, 3, 3).masked_fill(~pair, float("-inf")).softmax(-1)
    assert weights[0, 2].isnan().all()
    assert not weights[0, :2].isnan().any()


# The wind-turbine Triton model: a config record's mask value is float32's minimum, and the
# model is cast to `self.dtype`, float16 under the model's "fp16" precision parameter.
TRITON_CONFIG_FILL = """\
from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class Config:
    d_model: int = 16
    mask_value: float = torch.finfo(torch.float32).min


class Attention(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.mask_value = cfg.mask_value
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)

    def forward(self, x, valid):
        q, k, v = self.qkv(x).chunk(3, -1)
        scores = q @ k.transpose(-2, -1)
        scores = scores.masked_fill(~valid[:, None, :], self.mask_value)
        return scores.softmax(-1) @ v


class TritonPythonModel:
    def initialize(self, args):
        precision = args.get("precision", "fp32")
        self.device = torch.device("cpu")
        self.dtype = torch.float16 if precision == "fp16" else torch.float32
        self.model = Attention(Config()).to(self.device, self.dtype).eval()
"""


def test_a_config_s_float32_minimum_fills_a_model_cast_to_a_dtype_name(found: Found) -> None:
    fill = line_of(TRITON_CONFIG_FILL, "scores.masked_fill(~valid[:, None, :], self.mask_value)")
    assert found(TRITON_CONFIG_FILL) == [(fill, "MC517")]
    fixed = TRITON_CONFIG_FILL.replace(
        "torch.finfo(torch.float32).min", "torch.finfo(torch.float16).min")
    assert found(fixed) == []
    full_precision = TRITON_CONFIG_FILL.replace(
        "torch.float16 if precision == \"fp16\" else torch.float32", "torch.float32")
    assert found(full_precision) == []


def test_filling_float16_with_float32_s_minimum_raises() -> None:
    scores = torch.zeros(2, 2, dtype=torch.float16)
    with pytest.raises(RuntimeError, match="overflow"):
        scores.masked_fill(torch.tensor([[False, True], [False, False]]),
                           torch.finfo(torch.float32).min)


# The well-log model under DDP: the collate function's (batch, seq) keep-mask reaches SDPA's
# attn_mask, given by position, through `DDP(Net().to(device))`.
DDP_POSITIONAL = """\
import torch
import torch.nn as nn
from torch.nn.functional import scaled_dot_product_attention as sdpa
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader

SEQ = 64


def collate(batch):
    lengths = torch.tensor([len(y) for _, y in batch])
    x = torch.zeros(len(batch), SEQ, 8)
    valid = torch.arange(SEQ)[None, :] < lengths[:, None]
    return x, valid


class Attention(nn.Module):
    def forward(self, x, valid):
        q = x[:, None]
        return sdpa(q, q, q, valid, 0.0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.ModuleList([Attention() for _ in range(2)])

    def forward(self, x, valid):
        for attn in self.attn:
            x = attn(x, valid)[:, 0]
        return x


def main(data, device):
    loader = DataLoader(data, 16, collate_fn=collate)
    model = DDP(Net().to(device), device_ids=None)
    for x, valid in loader:
        model(x.to(device), valid.to(device))
"""


def test_a_model_wrapped_in_ddp_runs_its_forward(found: Found) -> None:
    call = line_of(DDP_POSITIONAL, "return sdpa(q, q, q, valid, 0.0)")
    assert found(DDP_POSITIONAL) == [(call, "MC515")]
    fixed = DDP_POSITIONAL.replace("sdpa(q, q, q, valid, 0.0)",
                                   "sdpa(q, q, q, valid[:, None, None, :], 0.0)")
    assert found(fixed) == []


def test_sdpa_reads_a_batch_by_seq_mask_as_queries_by_keys() -> None:
    q = torch.randn(2, 1, 2, 4, generator=torch.Generator().manual_seed(0))
    keep = torch.tensor([[True, True], [True, False]])
    as_given = F.scaled_dot_product_attention(q, q, q, attn_mask=keep)
    per_row = F.scaled_dot_product_attention(q, q, q, attn_mask=keep[:, None, None, :])
    assert not torch.allclose(as_given, per_row)


def test_a_model_a_function_returns_and_wrapped_after_eval_inline_is_followed(
        found: Found) -> None:
    inline = EXPORT_WRAPPER.replace(
        "def export(model):\n    wrapper = ExportWrapper(model.eval())",
        "def export():\n    wrapper = ExportWrapper(train().eval())").replace(
        "export(train())", "export()")
    assert inline != EXPORT_WRAPPER
    assert [code for _, code in found(inline)] == ["MC508"]
