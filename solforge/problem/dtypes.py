"""The dtype names of SOL-ExecBench / FlashInfer-Trace and what they are in torch.

Imports torch lazily so that parsing a definition never needs it.
"""

from __future__ import annotations

from functools import cache

# name -> (bytes per stored element, python scalar type, kind)
# float4_e2m1fn_x2 packs two FP4 values in one byte; float4_e2m1 is a single (unpacked) FP4 value.
DTYPES: dict[str, tuple[float, type, str]] = {
    "float64": (8, float, "float"),
    "float32": (4, float, "float"),
    "float16": (2, float, "float"),
    "bfloat16": (2, float, "float"),
    "float8_e4m3fn": (1, float, "float8"),
    "float8_e5m2": (1, float, "float8"),
    "float4_e2m1": (0.5, float, "float4"),
    "float4_e2m1fn_x2": (1, float, "float4"),
    "int64": (8, int, "int"),
    "int32": (4, int, "int"),
    "int16": (2, int, "int"),
    "int8": (1, int, "int"),
    "uint8": (1, int, "int"),
    "bool": (1, bool, "bool"),
}

DTYPE_NAMES = tuple(DTYPES)


def itemsize(name: str) -> float:
    return DTYPES[name][0]


def python_type(name: str) -> type:
    return DTYPES[name][1]


def kind(name: str) -> str:
    return DTYPES[name][2]


@cache
def _torch_map() -> dict:
    import torch

    m = {
        "float64": torch.float64, "float32": torch.float32, "float16": torch.float16,
        "bfloat16": torch.bfloat16, "int64": torch.int64, "int32": torch.int32,
        "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool,
    }
    for name in ("float8_e4m3fn", "float8_e5m2", "float4_e2m1fn_x2"):
        if hasattr(torch, name):
            m[name] = getattr(torch, name)
    # An unpacked FP4 value has no torch dtype: it travels as a uint8 per element.
    m.setdefault("float4_e2m1", torch.uint8)
    return m


def to_torch(name: str):
    """The torch dtype for a dtype name (raises KeyError for unknown names)."""
    return _torch_map()[name]
