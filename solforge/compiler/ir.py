"""Helpers over the traced IR (trace.py's {"inputs", "nodes", "outputs"}): which values a node's
arguments name. One walk for the lowering, the data-dependent checks, loop rolling, the FFT table
and the attention matcher."""

from __future__ import annotations


def refs(x) -> list[str]:
    """The value names ({"ref": name}) anywhere inside an argument (lists and dicts walked)."""
    if isinstance(x, dict):
        if "ref" in x:
            return [x["ref"]]
        return [r for v in x.values() for r in refs(v)]
    if isinstance(x, list):
        return [r for v in x for r in refs(v)]
    return []
