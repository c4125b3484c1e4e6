"""What loop rolling (rolling.py) and counted loops (counted_loops.py, counted_splits.py) share:
the loop node's name, block signatures, and the trace side of a shortened `for` loop (its index
type and the trace's active ShortLoops). A module of its own so that neither imports the other's
users."""

from __future__ import annotations

import json

from . import dynamic, symexpr

LOOP_OP = "solforge.loop"
MAX_PERIOD = 400


def _norm(s) -> str:
    """A size string with data-dependent size names erased (for block signatures)."""
    s = str(s)
    if dynamic.PREFIX not in s:
        return s
    e = symexpr.parse(s)
    rep = {x: symexpr.sym("dyn") for x in e.free_symbols if dynamic.is_dynamic(str(x))}
    return symexpr.to_axis(e.xreplace(rep))


def _skeleton(a):
    if isinstance(a, dict):
        if "ref" in a:
            return "R"
        if "sym" in a:   # its symbols only: a constant offset may move per block (_verify)
            return {"sym": sorted(str(x) for x in symexpr.parse(_norm(a["sym"])).free_symbols)}
        return {k: _skeleton(v) for k, v in a.items()}
    if isinstance(a, list):
        return [_skeleton(x) for x in a]
    if isinstance(a, bool) or a is None:
        return a
    if isinstance(a, int):
        return "I"
    return a


def _sig(n) -> str:
    shp = [_norm(s) for s in n["shape"]] if n.get("shape") is not None else None
    outs = [[o[0], [_norm(s) for s in o[1]]] if o else None for o in n.get("outs") or []]
    return json.dumps([n["op"], n.get("dtype"), shp, outs, _skeleton(n["args"]),
                       _skeleton(n["kwargs"]), n.get("value")], sort_keys=True, default=str)


SHORT_OVER = 8   # a `for` loop over range() of more iterations runs SHORT_RUN of them in the trace
SHORT_RUN = 5


class LoopIndexSteered(Exception):
    """The reference compared or tested a shortened loop's index: its iterations may differ."""


_ACTIVE_LOOPS = None  # the trace's rolling.ShortLoops


def active_loops():
    """The trace's ShortLoops (one trace at a time in the child)."""
    return _ACTIVE_LOOPS


class _ShortRange:
    def __init__(self, r, owner):
        self.r, self.owner = r, owner

    def __iter__(self):
        import sys

        f = sys._getframe(1)
        if f.f_code.co_filename == "<reference>" and for_statement_at(f):
            self.owner.counts.append(len(self.r))
            return iter([_Idx(v) for v in self.r[:SHORT_RUN]])
        return iter(self.r)

    def __len__(self):
        return len(self.r)

    def __getitem__(self, i):
        return self.r[i]

    def __contains__(self, v):
        return v in self.r

    def __reversed__(self):
        return reversed(self.r)


def for_statement_at(frame) -> bool:
    """Whether the frame is at the GET_ITER of a `for` statement (the iterator is taken for the
    loop itself, not by list(), a comprehension or a call)."""
    import dis

    ins = [x for x in dis.get_instructions(frame.f_code) if x.opname not in ("EXTENDED_ARG", "CACHE")]
    at = [j for j, x in enumerate(ins) if x.offset == frame.f_lasti]
    return bool(at) and ins[at[0]].opname == "GET_ITER" and at[0] + 1 < len(ins) and \
        ins[at[0] + 1].opname == "FOR_ITER"


def _steered() -> None:
    import sys

    if sys._getframe(2).f_code.co_filename == "<reference>":
        raise LoopIndexSteered()


class _Idx(int):
    """A shortened loop's index: the reference may index with it and do arithmetic, but a test of
    it (`if e == 0`, `e < n_shared`) would make the iterations differ, so it stops the shortcut."""
    __hash__ = int.__hash__

    def __eq__(self, o):
        _steered()
        return int(self) == o

    def __ne__(self, o):
        _steered()
        return int(self) != o

    def __lt__(self, o):
        _steered()
        return int(self) < o

    def __le__(self, o):
        _steered()
        return int(self) <= o

    def __gt__(self, o):
        _steered()
        return int(self) > o

    def __ge__(self, o):
        _steered()
        return int(self) >= o

    def __bool__(self):
        _steered()
        return int(self) != 0


def _arith(name):
    base = getattr(int, name)

    def f(self, *o):
        r = base(int(self), *o)
        if type(r) is int:
            return _Idx(r)
        if o and not isinstance(o[0], (int, float)):
            # mixed with a symbolic size or scalar (`start + e`): a later test of the result could
            # not be followed through the shortened loop, so the loop is traced in full
            raise LoopIndexSteered()
        return r
    return f


for _m in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__floordiv__",
           "__rfloordiv__", "__mod__", "__rmod__", "__neg__", "__pos__", "__abs__"):
    setattr(_Idx, _m, _arith(_m))


def set_active_loops(loops) -> None:
    global _ACTIVE_LOOPS
    _ACTIVE_LOOPS = loops
