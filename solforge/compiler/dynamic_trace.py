"""Data-dependent sizes, the trace side (runs in the sandboxed child): a ShapeEnv that decides a
guard on such a size size-obliviously, the hooks for `mask.any()`, `flag.item()` and `for row in t`,
and the Tracker that names each unbacked size `dyn<i>` with its upper bound. The lowering side, and
what the IR records, is dynamic.py's."""

from __future__ import annotations

from typing import Optional

import sympy

from . import symexpr
from .dynamic import PREFIX, VALUE_OP, _PRODUCERS, _SCATTERS, is_dynamic  # noqa: F401 - the shared names
from .errors import TraceError

# ── trace side (the sandboxed child) ─────────────────────────────────────────────────────────────
def make_shape_env(**kw):
    """A ShapeEnv whose undecidable guards on data-dependent sizes are decided size-obliviously
    where that decides them (recorded in `.oblivious`), and raise as usual otherwise."""
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode, ShapeEnv

    class ObliviousShapeEnv(ShapeEnv):
        def _evaluate_expr(self, orig_expr, hint=None, fx_node=None, size_oblivious=False,
                           fallback_value=None, *, forcing_spec=False):
            try:
                return super()._evaluate_expr(orig_expr, hint, fx_node, size_oblivious,
                                              fallback_value, forcing_spec=forcing_spec)
            except GuardOnDataDependentSymNode:
                r = self._maybe_evaluate_static(orig_expr, size_oblivious=True)
                if r is not None and r in (sympy.true, sympy.false):
                    self.oblivious.append(orig_expr)
                    return r
                free = orig_expr.free_symbols
                loops = _counted_loops()
                if loops is not None and loops.any_counted:
                    from .counted_loops import decide

                    r = decide(self, orig_expr)   # sizes read back in a counted loop
                    if r is not None:
                        return r
                if free and all(x in self.flags for x in free):
                    # a branch on an int/bool input read back (`if flag.item():`): this trace
                    # takes the policy's side; flags.py traces every side as a variant
                    i = len(self.flag_taken)
                    side = self.flag_policy[i] if i < len(self.flag_policy) else False
                    self.flag_taken.append((orig_expr, side))
                    return sympy.true if side else sympy.false
                from .counted_loops import decide_read_back

                r = decide_read_back(self, orig_expr)   # outside a counted loop too
                if r is not None:
                    return r
                raise

    env = ObliviousShapeEnv(**kw)
    env.oblivious = []
    env.assumed = []        # size equalities assumed and checked on the device (counted_loops.py)
    env.flags = {}          # unbacked symbol -> the input tensor whose one value it is
    env.flag_policy = []    # the side each branch on a flag takes, in order (default False)
    env.flag_taken = []     # (condition, side) of each branch taken on a flag
    return env


def _counted_loops():
    from .rolling import active_loops

    return active_loops()


def _counted_index(args) -> bool:
    """`t[i]`, `t[i, 0]` or `t[:, i]` with i a shortened loop's index inside a counted loop, t of a
    symbolic length at i's dim."""
    import torch

    from .counted_loops import counted_position

    loops = _counted_loops()
    x, i = args
    if loops is None or loops.counted <= 0 or not isinstance(x, torch.Tensor):
        return False
    at = counted_position(i)
    return at is not None and at[0] < x.dim() and isinstance(x.shape[at[0]], torch.SymInt)


MISS = object()
TRACE_INPUTS: dict = {}   # id(fake input tensor) -> its name, for the trace being run


def _iterated_by_reference() -> bool:
    """Whether this unbind is Tensor.__iter__'s, for a `for` statement of the reference."""
    import sys

    f = sys._getframe(1)
    for _ in range(8):
        f = f.f_back
        if f is None:
            return False
        if f.f_code.co_name == "__iter__" and f.f_code.co_filename.endswith("_tensor.py"):
            from .rolling import for_statement_at

            ref = f.f_back
            return ref is not None and ref.f_code.co_filename == "<reference>" and \
                for_statement_at(ref)
    return False


class DataDependentHooks:
    """Torch calls of the traced reference that meet a data-dependent value, made traceable:
    - `if mask.any():` as `if mask.nonzero().numel() > 0:`: the same test, but over the mask's
      count (a size, decided size-obliviously like any emptiness test) instead of a tensor value
      read back. The count is the one `x[mask]` uses later (torch memoises a mask's nonzero);
    - `if counts.sum() > 0:` (also `!= 0`, `>= 1`) over an integer or bool tensor, as
      `counts.any()`: the test of a mask or a count tensor for emptiness. For non-negative values
      (masks, one-hot rows, counts) it is the same test; where values of both signs could sum to
      zero it is not, and the evaluator's check on every workload refuses what that changes;
    - `for row in t` over a data-dependent length (`_rows`);
    - `w[e]` with e an int read back: select (Python indexing refuses an unbacked int)."""

    def __init__(self):
        self.anys: dict = {}     # id(result of mask.any()) -> (result, mask)
        self.sums: dict = {}     # id(result of counts.sum()) -> (result, counts)
        self.rows: dict = {}     # id(index_select of a counted loop's `x[i]`) -> (it, x, index)
        from . import counted_splits

        counted_splits.reset()

    def handle(self, func, args, kwargs):
        import torch

        if self.rows:
            from .counted_loops import mutated_row, write_back

            hit = mutated_row(self.rows, func, args)
            if hit is not None:   # an in-place op on a counted loop's row: x gets it too
                out = func(*args, **kwargs)
                write_back(hit)
                return out
        if func in (torch.Tensor.any, torch.any) and len(args) == 1 and not kwargs and \
                isinstance(args[0], torch.Tensor) and args[0].dtype == torch.bool:
            out = func(*args)
            self.anys[id(out)] = (out, args[0])
            return out
        if func in (torch.Tensor.sum, torch.sum) and len(args) == 1 and not kwargs and \
                isinstance(args[0], torch.Tensor) and not args[0].is_floating_point() and \
                not args[0].is_complex():
            out = func(*args)
            self.sums[id(out)] = (out, args[0])
            return out
        if len(args) == 2 and not kwargs and id(args[0]) in self.sums and \
                self.sums[id(args[0])][0] is args[0] and _tests_nonempty(func, args[1]):
            out = func(*args)
            self.anys[id(out)] = (out, self.sums[id(args[0])][1])
            return out
        if func is torch.Tensor.__bool__ and args and id(args[0]) in self.anys and \
                self.anys[id(args[0])][0] is args[0]:
            count = torch.nonzero(self.anys[id(args[0])][1]).shape[0]
            return bool(count > 0)
        if func is torch.Tensor.item and args and id(args[0]) in TRACE_INPUTS and \
                not args[0].is_floating_point() and args[0].numel() == 1:
            v = func(*args)
            if isinstance(v, (torch.SymInt, torch.SymBool)):
                env = v.node.shape_env
                for x in env.replace(v.node.expr).free_symbols:
                    env.flags[x] = TRACE_INPUTS[id(args[0])]
            return v
        from . import counted_splits

        hit = counted_splits.handle(func, args, kwargs)   # split by segment lengths read back
        if hit is not counted_splits.MISS:
            return hit
        if func is torch.Tensor.__getitem__ and len(args) == 2 and _counted_index(args):
            from .counted_loops import index_rows

            return index_rows(*args, rows=self.rows)   # t[i] in a loop of a symbolic count (counted_loops.py)
        if func is torch.Tensor.__setitem__ and len(args) == 3 and not kwargs and \
                _counted_index(args[:2]):
            from .counted_loops import assign_row

            assign_row(*args)   # t[:, i] = v in a loop of a symbolic count
            return None
        if func is torch.Tensor.__getitem__ and len(args) == 2 and isinstance(args[1], torch.SymInt):
            return torch.select(args[0], 0, args[1])   # w[e] with e read back (Python indexing refuses)
        if func is torch.Tensor.unbind and args and isinstance(args[0], torch.Tensor) and \
                (args[1:] in ((), (0,))) and not kwargs and _iterated_by_reference():
            return self._rows(args[0])
        return MISS

    @staticmethod
    def _rows(x):
        """`for row in t` over a tensor of a data-dependent length u (bound B): a loop of B
        iterations whose i-th runs only while i < u (rolling.py guards the body's kernels); the
        trace runs the shortened loop's first iterations (each one asserting i < u)."""
        import torch

        from . import rolling

        if x.dim() == 0 or not isinstance(x.shape[0], torch.SymInt):
            return MISS
        n = x.shape[0]
        env = n.node.shape_env
        u = env.replace(n.node.expr)
        if not (isinstance(u, sympy.Symbol) and symexpr.is_read_back(u)):
            return MISS
        up = env.var_to_range[u].upper if u in env.var_to_range else None
        loops = rolling.active_loops()
        if up is None or not getattr(up, "is_Integer", False) or loops is None or \
                not loops.enabled or int(up) <= rolling.SHORT_RUN:
            return MISS
        loops.counts.append(int(up))
        loops.guards[len(loops.counts) - 1] = u

        def rows():
            for i in range(rolling.SHORT_RUN):
                torch._check(n > i)
                yield x[i]
        return rows()


def _tests_nonempty(func, other) -> bool:
    """`s > 0`, `s != 0` or `s >= 1` for an integer sum s: the sum's tensor has a nonzero value."""
    import torch

    if isinstance(other, bool) or not isinstance(other, int):
        return False
    if func in (torch.Tensor.__gt__, torch.Tensor.gt, torch.gt, torch.Tensor.__ne__,
                torch.Tensor.ne, torch.ne):
        return other == 0
    if func in (torch.Tensor.__ge__, torch.Tensor.ge, torch.ge):
        return other == 1
    return False


class Tracker:
    """Names the trace's unbacked symbols as they first appear in a node's output and keeps their
    bounds; `expr_of` maps a symbol for `_Namer`."""

    def __init__(self):
        self.names: dict = {}      # unbacked sympy symbol -> sympy symbol dyn<i>
        self.bounds: dict = {}     # "dyn<i>" -> bound axis expression
        self.values: dict = {}     # "dyn<i>" -> how a size is computed from others (sliced_sizes)

    def bind_node(self, n, namer, shape_env) -> None:
        import torch

        v = n.meta.get("val")
        vals = v if isinstance(v, (list, tuple)) else [v]
        fresh = []
        for t in vals:
            if not isinstance(t, torch.Tensor):
                continue
            for s in t.shape:
                if isinstance(s, torch.SymInt):
                    e = shape_env.replace(s.node.expr)
                    for u in e.free_symbols:
                        if u not in namer.map and u not in self.names and symexpr.is_read_back(u):
                            fresh.append(u)
        if not fresh:
            return
        op = str(n.target)
        from . import sliced_sizes

        sliced = sliced_sizes.spec(n, namer, shape_env) if len(set(fresh)) == 1 else None
        if sliced is None and (op not in _PRODUCERS or len(set(fresh)) != 1):
            raise TraceError(f"a data-dependent size from {op} (only nonzero, boolean-mask "
                             "indexing, masked_select and a slice have a known upper bound)")
        u = fresh[0]
        if sliced is not None:   # a slice between values read back: as long as the dim at most
            same = next((k for k, v in self.values.items() if v.get("slice") == sliced[1]), None)
            if same is not None:  # the same bounds of a dim of the same length: the same size
                self.names[u] = namer.map[u] = symexpr.sym(same)
                return
            bound, self.values[f"{PREFIX}{len(self.bounds)}"] = sliced[0], {"slice": sliced[1]}
        else:
            bound = self._bound(n, op, namer, shape_env)
        name = f"{PREFIX}{len(self.bounds)}"
        self.names[u] = symexpr.sym(name)
        namer.map[u] = symexpr.sym(name)
        self.bounds[name] = bound

    def bind_value(self, n, namer, shape_env, enc) -> Optional[dict]:
        """An int read back from a tensor (`.item()`, `_local_scalar_dense`) as a named value: an
        IR node `solforge.item` that the lowering realises so kernels read it from the device."""
        import torch

        v = n.meta.get("val")
        if str(n.target) != "aten._local_scalar_dense.default" or not isinstance(v, torch.SymInt):
            return None
        u = shape_env.replace(v.node.expr)
        if not isinstance(u, sympy.Symbol) or u in namer.map or not symexpr.is_read_back(u):
            return None
        name = f"{PREFIX}{len(self.bounds)}"
        self.names[u] = symexpr.sym(name)
        namer.map[u] = symexpr.sym(name)
        self.bounds[name] = None
        return {"name": n.name, "op": VALUE_OP, "args": [enc(n.args[0])], "kwargs": {},
                "dtype": "int64", "shape": [], "sym": name}

    @staticmethod
    def _bound(n, op, namer, shape_env) -> str:
        import torch

        def numel(t):
            out = sympy.Integer(1)
            for s in t.shape:
                out = out * (s.node.expr if isinstance(s, torch.SymInt) else sympy.Integer(int(s)))
            return out
        args = [a.meta.get("val") if isinstance(a, torch.fx.Node) else a for a in n.args]
        if op == "aten.index.Tensor":
            masks = [a.meta.get("val") for a in (n.args[1] or []) if isinstance(a, torch.fx.Node)
                     and a.meta.get("val") is not None and a.meta["val"].dtype == torch.bool]
            if len(masks) != 1:
                                raise TraceError("indexing with several boolean masks")
            e = numel(masks[0])
        elif op == "aten.masked_select.default":
            a, b = list(args[0].shape), list(args[1].shape)
            nd = max(len(a), len(b))
            a, b = [1] * (nd - len(a)) + a, [1] * (nd - len(b)) + b
            e = sympy.Integer(1)
            for x, y in zip(a, b):  # the broadcast shape's numel
                d = y if (isinstance(x, int) and x == 1) else x
                e = e * (d.node.expr if isinstance(d, torch.SymInt) else sympy.Integer(int(d)))
        else:
            e = numel(args[0])
        return namer.expr(e, shape_env)

    def ir_entry(self, shape_env) -> dict:
        inv = {str(u): d for u, d in self.names.items()}
        out = {}
        for name, bound in self.bounds.items():
            u = next(str(k) for k, v in self.names.items() if str(v) == name)
            obl = [sympy.srepr(g) for g in getattr(shape_env, "oblivious", [])
                   if u in {str(s) for s in g.free_symbols}]
            out[name] = {"bound": bound, "oblivious": sorted(set(
                o.replace(f"'{u}'", f"'{inv[u]}'") for o in obl)), **self.values.get(name, {})}
        return out


# ── lowering side ────────────────────────────────────────────────────────────────────────────────
