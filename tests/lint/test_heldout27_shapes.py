"""Held-out 27's misses, in typed training-stack code: a dataclass config read through an
attribute chain (`self.cfg.mask.fill_value` of a nested record, `self.cfg.causal` stored in
`__init__`), and an autocast whose dtype is a config field rather than a literal. Each bad
source next to the findings it must give, its correct form next to none, and the torch 2.13
fact it rests on."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

Found = Callable[[str], list[tuple[int, str]]]  # the `found` fixture (conftest.py)

NESTED_FILL = """\
from dataclasses import dataclass, field

import torch
from torch import nn


@dataclass(frozen=True)
class MaskConfig:
    fill_value: float = -1e-9


@dataclass(frozen=True)
class ModelConfig:
    dim: int = 32
    mask: MaskConfig = field(default_factory=MaskConfig)


class SelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg

    def forward(self, scores, keep):
        scores = scores.masked_fill(~keep, self.cfg.mask.fill_value)
        return scores.softmax(dim=-1)
"""


def test_a_nested_config_fill_value_is_read_through_self(found: Found) -> None:
    assert found(NESTED_FILL) == [(24, "MC516")]
    assert found(NESTED_FILL.replace("-1e-9", 'float("-inf")')) == []


def test_a_config_parameter_chain_is_read_without_self(found: Found) -> None:
    function = NESTED_FILL.split("class SelfAttention")[0] + """\
def attend(scores, keep, cfg: ModelConfig):
    return scores.masked_fill(~keep, cfg.mask.fill_value).softmax(dim=-1)
"""
    assert found(function) == [(19, "MC516")]


def test_a_rebound_config_is_not_read_by_its_default(found: Found) -> None:
    rebound = NESTED_FILL.replace("        self.cfg = cfg\n",
                                  "        cfg = load()\n        self.cfg = cfg\n")
    assert found(rebound) == []


CAUSAL_FIELD = """\
from dataclasses import dataclass

import torch.nn.functional as F
from torch import nn


@dataclass
class AttnConfig:
    causal: bool = True


class Attention(nn.Module):
    def __init__(self, cfg: AttnConfig) -> None:
        super().__init__()
        self.cfg = cfg

    def forward(self, q, k, v, keep):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep, is_causal=self.cfg.causal)
"""


def test_is_causal_from_a_stored_config_field_is_read(found: Found) -> None:
    assert found(CAUSAL_FIELD) == [(18, "MC506")]
    assert found(CAUSAL_FIELD.replace("causal: bool = True", "causal: bool = False")) == []


AUTOCAST_FIELD = """\
import torch
from torch import nn

AMP_DTYPE = torch.float16 if torch.cuda.is_available() else torch.bfloat16


class Cross(nn.Module):
    def forward(self, q, k, keep):
        sim = q @ k.transpose(-2, -1)
        sim = sim.masked_fill(~keep, torch.finfo(torch.float32).min)
        return sim.softmax(-1)


def step(model, q, k, keep):
    with torch.amp.autocast("cuda", dtype=AMP_DTYPE):
        return model(q, k, keep)
"""


def test_an_autocast_to_a_named_dtype_makes_the_scores_half(found: Found) -> None:
    assert found(AUTOCAST_FIELD) == [(10, "MC517")]
    assert found(AUTOCAST_FIELD.replace("torch.finfo(torch.float32).min",
                                        "torch.finfo(sim.dtype).min")) == []


@pytest.mark.parametrize("arguments", ['"cuda", enabled=False', '"cuda", dtype=torch.float32'])
def test_an_autocast_switched_off_or_to_float32_is_no_half_evidence(
        found: Found, arguments: str) -> None:
    off = AUTOCAST_FIELD.replace('"cuda", dtype=AMP_DTYPE', arguments)
    assert found(off) == []


def test_filling_bfloat16_scores_with_the_float32_minimum_raises() -> None:
    sim = torch.zeros(2, 2, dtype=torch.bfloat16)
    keep = torch.tensor([[True, False], [True, True]])
    with pytest.raises(RuntimeError, match="overflow"):
        sim.masked_fill(~keep, torch.finfo(torch.float32).min)
    assert sim.masked_fill(~keep, torch.finfo(sim.dtype).min).isfinite().all()


def test_cpu_autocast_runs_matmuls_in_bfloat16_whatever_names_the_dtype() -> None:
    amp_dtype = torch.bfloat16
    with torch.autocast("cpu", dtype=amp_dtype):
        assert (torch.randn(2, 3) @ torch.randn(3, 2)).dtype == torch.bfloat16


def test_a_tiny_negative_fill_hardly_masks() -> None:
    scores = torch.zeros(1, 3)
    keep = torch.tensor([[True, True, False]])
    weights = scores.masked_fill(~keep, -1e-9).softmax(-1)
    assert weights[0, 2] > 0.3  # the padded key weighs as much as a real one
    assert F.softmax(scores.masked_fill(~keep, float("-inf")), -1)[0, 2] == 0


CONFIG_DTYPE = """\
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class RunConfig:
    compute_dtype: torch.dtype = torch.float32


class Block(nn.Module):
    def __init__(self, cfg: RunConfig) -> None:
        super().__init__()
        self.cfg = cfg

    def forward(self, q, k, v, keep):
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=keep[:, None, None, :].to(dtype=self.cfg.compute_dtype))
"""


def test_a_cast_to_a_config_held_dtype_is_a_float_cast(found: Found) -> None:
    assert found(CONFIG_DTYPE) == [(20, "MC508")]
    assert found(CONFIG_DTYPE.replace(".to(dtype=self.cfg.compute_dtype)", "")) == []
    assert found(CONFIG_DTYPE.replace("torch.dtype = torch.float32",
                                      "torch.dtype = torch.bool")) == []


def test_a_cast_to_a_module_dtype_constant_is_a_float_cast(found: Found) -> None:
    constant = CONFIG_DTYPE.replace("from torch import nn\n",
                                    "from torch import nn\n\nCOMPUTE = torch.float32\n").replace(
        "dtype=self.cfg.compute_dtype", "COMPUTE")
    assert found(constant) == [(22, "MC508")]


def test_sdpa_adds_a_float_keep_mask_and_masks_nothing() -> None:
    q = torch.randn(1, 1, 3, 4)
    keep = torch.tensor([[True, True, False]])
    as_float = F.scaled_dot_product_attention(q, q, q, attn_mask=keep[:, None, None, :].float())
    unmasked = F.scaled_dot_product_attention(q, q, q)
    masked = F.scaled_dot_product_attention(q, q, q, attn_mask=keep[:, None, None, :])
    # adding 1 to every kept score and 0 to the padded one: the padded key still weighs
    assert not torch.allclose(as_float, masked)
    assert not torch.allclose(as_float, unmasked)


CONFIG_INSTANCE = """\
import argparse
from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class ModelConfig:
    dtype: str = "float32"
    mask_value: float = -1e9

    @classmethod
    def from_dict(cls, d):
        return cls(**d)


class SelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg

    def forward(self, scores, hide):
        return scores.masked_fill(hide, self.cfg.mask_value).softmax(-1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16"])
    cfg = ModelConfig.from_dict({"dtype": parser.parse_args().dtype})
    model = SelfAttention(cfg).to(getattr(torch, cfg.dtype))
"""


def test_an_unannotated_config_is_known_by_what_every_call_passes(found: Found) -> None:
    # held-out 22's config LM: the instance comes from a classmethod, `return cls(**d)`
    assert found(CONFIG_INSTANCE) == [(24, "MC501")]
    direct = CONFIG_INSTANCE.replace('ModelConfig.from_dict({"dtype": parser.parse_args().dtype})',
                                     "ModelConfig()")
    assert found(direct) == [(24, "MC501")]
    assert found(CONFIG_INSTANCE.replace("-1e9", 'float("-inf")')) == []


def test_a_config_masking_value_needs_the_file_to_name_float16(found: Found) -> None:
    # a bfloat16 model's config default (Gemma's attention_invalid_logits_value) is finite
    bf16 = CONFIG_INSTANCE.replace('choices=["float32", "float16"]',
                                   'choices=["float32", "bfloat16"]')
    assert found(bf16) == []


def test_filling_float16_scores_with_minus_1e9_raises() -> None:
    scores = torch.zeros(2, dtype=torch.float16)
    with pytest.raises(RuntimeError, match="overflow"):
        scores.masked_fill(torch.tensor([True, False]), -1e9)
    assert torch.zeros(2, dtype=torch.bfloat16).masked_fill(
        torch.tensor([True, False]), -1e9).isfinite().all()
