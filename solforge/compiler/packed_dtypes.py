"""Bit reinterpretation between dtypes of one byte width (`tensor.view(dtype)`), and the packed FP4 dtype.

float4_e2m1fn_x2 holds two E2M1 values in one byte (low nibble first). ATen never computes on it, it
only views and moves it, so the compiler keeps it as its raw byte: storage `unsigned char`, compute
type `long long` like the integer dtypes (kernel.py). `view(dtype)` between it and uint8 / int8 is
then a re-read of the same byte; the FP4 values themselves appear where the reference unpacks them
(`b & 0xF`, `b >> 4`, a lookup table), which lowers like any integer arithmetic.

A view between a floating dtype and an integer dtype (a bit reinterpretation) is refused.
"""

from __future__ import annotations

from .kernel import ITEMSIZE, compute_type, round_to
from .loops import Loader

BYTE_INTS = {"uint8", "int8", "float4_e2m1fn_x2"}


class UnsupportedView(Exception):
    pass


def view_dtype(x: Loader, dtype: str) -> Loader:
    """x.view(dtype) for dtypes of the same item size (ATen's only case without a shape change)."""
    if x.dtype == dtype:
        return x
    if ITEMSIZE.get(x.dtype) != ITEMSIZE.get(dtype):
        raise UnsupportedView(f"view from {x.dtype} to {dtype} changes the item size")
    if x.dtype in BYTE_INTS and dtype in BYTE_INTS:
        # the same byte: only int8's sign differs from the unsigned ones
        return Loader(x.shape, dtype, lambda k, idx: k.let(compute_type(dtype),
                                                            round_to(x(k, idx), dtype)),
                      cost=x.cost + 1)
    raise UnsupportedView(f"view from {x.dtype} to {dtype} reinterprets bits")
