"""Dtype tables and exact widening of the dtypes numpy lacks (bfloat16, float8)."""

from __future__ import annotations

import math

import numpy as np

# safetensors dtype code -> (torch-style name, little-endian numpy storage dtype).
SAFETENSORS_DTYPES: dict[str, tuple[str, np.dtype[np.generic]]] = {
    "BOOL": ("bool", np.dtype("u1")),
    "U8": ("uint8", np.dtype("u1")),
    "I8": ("int8", np.dtype("i1")),
    "I16": ("int16", np.dtype("<i2")),
    "U16": ("uint16", np.dtype("<u2")),
    "I32": ("int32", np.dtype("<i4")),
    "U32": ("uint32", np.dtype("<u4")),
    "I64": ("int64", np.dtype("<i8")),
    "U64": ("uint64", np.dtype("<u8")),
    "F16": ("float16", np.dtype("<f2")),
    "BF16": ("bfloat16", np.dtype("<u2")),
    "F32": ("float32", np.dtype("<f4")),
    "F64": ("float64", np.dtype("<f8")),
    "F8_E4M3": ("float8_e4m3fn", np.dtype("u1")),
    "F8_E5M2": ("float8_e5m2", np.dtype("u1")),
}

# Codes the safetensors format defines that cannot hold a mask: such tensors are skipped, not
# reported as corrupt (a checkpoint may carry them next to its masks).
SAFETENSORS_NON_MASK_DTYPES = frozenset(
    {"C64", "C128", "F4", "F6_E2M3", "F6_E3M2", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ"}
)

# numpy dtype name -> torch-style name, for .npy/.npz (numpy has neither bfloat16 nor float8).
NUMPY_NAMES: dict[str, str] = {
    "bool": "bool", "uint8": "uint8", "int8": "int8", "int16": "int16", "uint16": "uint16",
    "int32": "int32", "uint32": "uint32", "int64": "int64", "uint64": "uint64",
    "float16": "float16", "float32": "float32", "float64": "float64",
}


def _float8_table(exp_bits: int, man_bits: int, *, ieee_specials: bool) -> np.ndarray:
    """float32 value of each of the 256 bit patterns of a 1-sign/exp/mantissa float8.

    ieee_specials: all-ones exponent is inf (mantissa 0) / NaN, as in E5M2. Otherwise (E4M3FN,
    "finite") only the all-ones exponent with all-ones mantissa is NaN and there is no inf.
    NaNs keep sign and payload the way torch widens them (payload shifted up, quiet bit set),
    so the table equals torch's float() bit for bit.
    """
    bias = (1 << (exp_bits - 1)) - 1
    top_exp = (1 << exp_bits) - 1
    top_man = (1 << man_bits) - 1
    out = np.empty(256, np.float32)
    bits_out = out.view(np.uint32)
    for bits in range(256):
        negative = bool(bits & 0x80)
        exp = (bits >> man_bits) & top_exp
        man = bits & top_man
        if exp == top_exp and (man == top_man or (ieee_specials and man)):
            bits_out[bits] = ((negative << 31) | 0x7F800000 | (man << (23 - man_bits))
                              | 0x400000)
            continue
        if exp == top_exp and ieee_specials:
            value = math.inf
        elif exp == 0:
            value = man / (1 << man_bits) * 2.0 ** (1 - bias)
        else:
            value = (1 + man / (1 << man_bits)) * 2.0 ** (exp - bias)
        out[bits] = -value if negative else value
    return out


F8_E4M3FN_TABLE = _float8_table(4, 3, ieee_specials=False)
F8_E5M2_TABLE = _float8_table(5, 2, ieee_specials=True)


def widen_bfloat16(bits: np.ndarray) -> np.ndarray:
    """bfloat16 stored as uint16 -> float32, exact (bf16 is the top half of a float32)."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def as_bool(raw: np.ndarray) -> np.ndarray:
    """uint8 bytes of a bool tensor -> numpy bool. Bytes other than 0/1 (hostile or sloppy
    writers) become True (any nonzero byte), not bools with undefined numpy behaviour."""
    if raw.size and int(raw.max()) > 1:
        nonzero: np.ndarray = raw != 0
        return nonzero
    return raw.view(np.bool_)


def decode(raw: np.ndarray, name: str) -> np.ndarray:
    """Storage array (as laid out in the file) -> what TensorSource.read_rows returns."""
    if name == "bool":
        return as_bool(raw.view(np.uint8))
    if name == "bfloat16":
        return widen_bfloat16(raw.view(np.uint16))
    if name == "float8_e4m3fn":
        return F8_E4M3FN_TABLE[raw.view(np.uint8)]
    if name == "float8_e5m2":
        return F8_E5M2_TABLE[raw.view(np.uint8)]
    if not raw.dtype.isnative:
        native: np.ndarray = raw.astype(raw.dtype.newbyteorder("="))
        return native
    return raw
