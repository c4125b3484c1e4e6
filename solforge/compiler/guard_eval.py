"""A traced graph's guards evaluated at a workload's sizes and scalar values (the trace selects
variants with them; float_sizes.py checks every workload against them)."""

from __future__ import annotations


def _guard_ns() -> dict:
    """Names a guard's srepr uses: sympy's and torch's size functions (CeilToInt(IntTrueDiv(..)) of
    a math.ceil over sizes, FloorDiv, ...)."""
    import sympy
    from torch.utils._sympy import functions

    ns = {k: getattr(sympy, k) for k in dir(sympy) if not k.startswith("_")}
    ns.update({k: getattr(functions, k) for k in dir(functions) if not k.startswith("_")})
    return ns


_PARSED_GUARDS: dict = {}


def parse_guard(src: str):
    """A guard's srepr as a sympy expression, parsed once per source."""
    import sympy

    if src not in _PARSED_GUARDS:
        _PARSED_GUARDS[src] = sympy.sympify(eval(src, _guard_ns()))
    return _PARSED_GUARDS[src]


def _eval_guard(src: str, values: dict) -> bool:
    """A guard at these values (its symbols replaced by name, whatever their assumptions: a float
    scalar's is a plain symbol)."""
    import sympy

    e = parse_guard(src)
    rep = {x: (sympy.Float(values[x.name]) if isinstance(values[x.name], float)
               else sympy.Integer(values[x.name]))
           for x in e.free_symbols if x.name in values}
    return bool(e.xreplace(rep))


def _f32(v: float) -> float:
    import struct

    return struct.unpack("f", struct.pack("f", float(v)))[0]


def _values(wl: dict) -> dict:
    # a float scalar as the kernel sees it (a float32 argument), so a guard pinning it holds there
    return {k: _f32(v) if isinstance(v, float) else int(v)
            for k, v in {**wl["axes"], **wl.get("scalars", {})}.items()
            if isinstance(v, (int, float, bool))}
