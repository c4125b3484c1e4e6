"""A trace with a float scalar's value baked in (the last of the variant modes, trace._trace_variants)
pins the value as the kernel sees it (a float32 argument) and lowers: a problem written here."""

from __future__ import annotations

from solforge.compiler import trace

from .test_compiler import T, make_problem


def test_float_scalar_baked_in(tmp_path):
    p = make_problem(tmp_path, "baked", {"N": {"type": "var"}, "D": {"type": "const", "value": 4}},
                     {"x": T("N", "D"), "p": {"shape": None, "dtype": "float32"}}, {"y": T("N", "D")},
                     """
                     import torch
                     def run(x, p):
                         return x * p if p > 0.5 else x - p
                     """, [{"N": 3}], scalars={"p": 0.1})
    ir = trace._trace_once(p.definition, {"axes": {"N": 3}, "scalars": {"p": 0.1}}, -1.0,
                           symfloat=False, baked=True)
    pinned = [g for g in ir.get("guards", []) if "p" in g]
    assert pinned, ir.get("guards")
    assert any("0.1" in g or "0.10000000149" in g for g in pinned), pinned
