"""Sizes truncated from Python float arithmetic on sizes: `h = int(n ** 0.5)` (a square grid from its
cell count), `capacity = int(n * k / e * 1.25)`.

The trace keeps them symbolic (TruncToInt of the float expression; symexpr prints them as C and as
axis expressions). Python code that branches on such a size (`while h * w != n: h -= 1`) leaves
guards the trace took for the traced workloads only; nothing proves them for other sizes. A graph
with such guards is served as one guarded variant: its kernels run only where the guards hold (the
plan's variant predicate), and every workload of the definition is checked against them here, so a
workload whose branch would go the other way is refused instead of computed wrong.
"""

from __future__ import annotations


def _truncated_guards(ir: dict) -> list[str]:
    """The trace's guards that read a truncated float size."""
    import sympy

    from . import symexpr
    from .guard_eval import parse_guard

    out = []
    for src in ir.get("guards", []):
        if "TruncToInt" not in src and "FloorToInt" not in src:
            continue
        try:
            e = parse_guard(src)
        except Exception:  # noqa: BLE001 - a guard we cannot read: not one of these
            continue
        if any(symexpr.truncated_float(x) is not None for x in sympy.preorder_traversal(e)):
            out.append(src)
    return out


def guard(ir: dict, workloads: list) -> dict:
    """The IR as is when no guard reads a truncated float size; else one variant whose predicate is
    those guards. Raises TraceError when a workload breaks one (its graph would differ)."""
    from . import symexpr
    from .errors import TraceError
    from .guard_eval import _eval_guard, _values, parse_guard

    keep = _truncated_guards(ir)
    if not keep:
        return ir
    for wl in workloads:
        v = _values(wl)
        for src in keep:
            try:
                ok = _eval_guard(src, v)
            except Exception:  # noqa: BLE001
                ok = False
            if not ok:
                raise TraceError("a size truncated from float arithmetic steers the reference's "
                                 "Python code differently at some workload")
    floats = {i["name"] for i in ir["inputs"] if i["kind"] == "float"}
    exprs = [parse_guard(src) for src in keep]
    names = sorted({str(x) for e in exprs for x in e.free_symbols})
    try:
        pred = " && ".join("(" + symexpr.to_c_bool(e, lambda n: ("f_" if n in floats else "z_") + n)
                           + ")" for e in exprs)
    except ValueError as e:
        raise TraceError(f"a guard on a truncated float size: {e}") from None
    return {"variants": [{"pred": pred, "names": [n for n in names if n not in floats],
                          "fnames": [n for n in names if n in floats], "ir": ir}],
            "inputs": ir["inputs"]}
