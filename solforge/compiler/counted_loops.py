"""Loops whose trip count is a symbolic size and whose iterations read their extents back from the
device: `for i in range(num_seqs - 1): s, e = cu[i].item(), cu[i + 1].item(); out.append(f(x[s:e]))`
then `torch.cat(out)` (per-segment work over cu_seqlens).

Trace (in the child): `range(n)` with n a SymInt, iterated by a `for` statement of the reference,
runs SHORT_RUN iterations whatever n is (rolling.ShortLoops), then rolls into one loop node whose
count is n's axis expression (`count_expr`). While it runs, `t[i]` on a tensor of a symbolic
length is an index_select (no bounds check against this workload's length: the iterations past n
never run on the device). A branch on a length read back being zero (`if e - s == 0: continue`)
takes the non-empty side, size-obliviously as dynamic.py's emptiness tests (value-safe only when
nothing is reduced over the length: `dynamic.check_oblivious`). An equality torch cannot decide
between data-dependent sizes and others (`cat(out).reshape(T, H)`: the lengths add up to T) is
assumed, recorded in the IR's `assumed` list and checked on the device (a trap) after the kernels
that could tell.

Roll: `cat` of one value per iteration, read nowhere else, is collected by the loop
(`rolling.roll(collect=True)`): each iteration writes its value at a running offset along the cat
dim of one buffer, and the cat's length becomes a size counted on the device (`dyn<k>`, the final
offset). Later sizes that were the traced iterations' sum are rewritten over it. A stack or cat of
one fixed-size value per iteration (a recurrence's steps) has no such sum: the trace makes it the
cat of the traced values given the count's length (counted_stack, the trace-only op
solforge::counted_cat), which rolling collects the same way.

Lower (`rolling.lower_loop`): the launches are replicated `count` times, the largest count among the
problem's workloads (`bind_counts`); each body kernel returns early once the loop index reaches
n, and one kernel before the loop traps when n is over that bound (a workload the plan was not
sized for fails, never silently). The collected buffer is laid out with the cat dim outermost, so
its layout does not depend on the final length. Its length is at most the launches' count times one
iteration's bound, unless a view after the loop pins it (view_bounds.pinned_sizes: the rows of
every expert, gathered back and viewed as [T, K, H], are T * K): then the buffer holds that many,
the writes past it are dropped and a check after the loop traps when the count is over it.
"""

from __future__ import annotations

import sympy

from . import symexpr

ASSUMED = "assumed"


# ── trace side ──────────────────────────────────────────────────────────────────────────────────
def symbolic_count(a) -> "object | None":
    """The SymInt trip count of `range(n)` / `range(0, n)` when n is symbolic, else None."""
    import torch

    if len(a) == 2 and isinstance(a[0], int) and a[0] == 0:
        a = a[1:]
    if len(a) != 1 or not isinstance(a[0], torch.SymInt):
        return None
    return a[0] if a[0].node.expr.free_symbols else None


class CountedRange:
    """range(n) over a symbolic n: at a `for` statement of the reference, SHORT_RUN iterations
    (rolled and given n afterwards); anything else iterates the plain range (specialising n)."""

    def __init__(self, n, owner):
        self.n, self.owner = n, owner

    def __iter__(self):
        import builtins
        import sys

        from .loop_base import SHORT_RUN, _Idx, for_statement_at

        f = sys._getframe(1)
        if not (f.f_code.co_filename == "<reference>" and for_statement_at(f)):
            return iter(builtins.range(int(self.n)))
        owner = self.owner
        owner.counts.append(self.n)
        owner.any_counted = True
        n = self.n

        def run():
            owner.counted += 1
            owner.loop_serial += 1
            serial, outer = owner.loop_serial, owner.iter_tag
            try:
                for v in builtins.range(SHORT_RUN):
                    owner.iter_tag = (serial, v)
                    yield _Idx(v)
                owner.finished[serial] = n
            finally:
                owner.counted -= 1
                owner.iter_tag = outer
        return run()

    def __len__(self):
        return int(self.n)


ITER_TAG = "_solforge_counted_iter"
COUNTED_CAT = "solforge.counted_cat.default"
_COUNTED_CAT_OP = None


def tag_iteration(r) -> None:
    """Tag the tensors a counted loop's traced iteration makes with (loop serial, index), so that a
    stack or cat of one of them per iteration is recognised after the loop (counted_stack)."""
    import torch

    from .loop_base import active_loops

    loops = active_loops()
    tag = getattr(loops, "iter_tag", None)
    if tag is None:
        return
    for t in (r if isinstance(r, (tuple, list)) else (r,)):
        if isinstance(t, torch.Tensor):
            try:
                setattr(t, ITER_TAG, tag)
            except (AttributeError, TypeError):
                pass


def counted_cat_op():
    """solforge::counted_cat(x, dim, length): x with its dim `dim` of `length`. The trace's stand-in
    for the cat of a counted loop's values: SHORT_RUN iterations ran, the cat is the count's long
    (rolling collects the cat, the lowering views the collected buffer as this node's shape)."""
    global _COUNTED_CAT_OP
    if _COUNTED_CAT_OP is None:
        import torch

        # the schema spelled out: this module's annotations are strings (__future__)
        @torch.library.custom_op("solforge::counted_cat", mutates_args=(),
                                 schema="(Tensor x, int dim, SymInt length) -> Tensor")
        def counted_cat(x, dim, length):
            raise RuntimeError("solforge::counted_cat exists in traces only")

        @counted_cat.register_fake
        def _(x, dim, length):
            shape = list(x.shape)
            shape[dim] = length
            return x.new_empty(shape)

        _COUNTED_CAT_OP = torch.ops.solforge.counted_cat.default
    return _COUNTED_CAT_OP


def counted_stack(func, args, kwargs):
    """`torch.stack(ys, dim)` / `torch.cat(ys, dim)` after a counted loop that appended one value of
    a fixed size per iteration (`ys.append(step(t))`, a recurrence's outputs): the trace ran SHORT_RUN
    iterations, but what follows sees the count's length, n * size. The SHORT_RUN values are catted
    (rolling collects that cat: one write per iteration at a running offset), given the length n *
    size (counted_cat), and a stack is that viewed with n at its dim. None when the values are not
    one per iteration of a finished counted loop in order, or their sizes are data-dependent (a cat
    of per-iteration rows read back: the cat's own unbacked sum serves)."""
    import torch
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    from .loop_base import SHORT_RUN, active_loops

    stack = func is torch.stack
    if not (stack or func in (torch.cat, torch.concat, torch.concatenate)):
        return None
    seq = args[0] if args else kwargs.get("tensors")
    dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
    loops = active_loops()
    if loops is None or not isinstance(seq, (list, tuple)) or len(seq) != SHORT_RUN or \
            not isinstance(dim, int) or not all(isinstance(t, torch.Tensor) for t in seq):
        return None
    tags = [getattr(t, ITER_TAG, None) for t in seq]
    if tags[0] is None or any(t != (tags[0][0], i) for i, t in enumerate(tags)):
        return None
    n = loops.finished.get(tags[0][0])
    shape = list(seq[0].shape)
    if n is None or not shape or free_unbacked_symbols(shape) or \
            any(list(t.shape) != shape or t.dtype != seq[0].dtype for t in seq[1:]):
        return None
    nd = len(shape)
    d = dim + (nd + 1 if stack else nd) if dim < 0 else dim
    if not 0 <= d < nd:
        return None     # a stack along a new last dim is no cat of the values themselves
    out = counted_cat_op()(torch.cat(list(seq), d), d, n * shape[d])
    return out.view(*shape[:d], n, *shape[d:]) if stack else out


def counted_position(i) -> "tuple | None":
    """(dim, the loop index, the rest of the index) of `t[i]`, `t[i, 0]` or `t[:, i, ...]` (full
    slices before the loop index), else None."""
    from .loop_base import _Idx

    items = i if isinstance(i, tuple) else (i,)
    for p, it in enumerate(items):
        if isinstance(it, _Idx):
            if all(isinstance(b, slice) and b == slice(None) for b in items[:p]):
                return p, it, tuple(items[p + 1:])
            return None
    return None


def index_rows(x, i, rows: "dict | None" = None):
    """`x[i]` (or `x[:, i]`, the loop index after full slices) inside a counted loop, on a tensor
    whose length at that dim is symbolic: an index_select (a plain select would check i against
    this workload's length, which the shortened loop may pass; past n the device never runs the
    iteration). `rows` records it for write_back: an in-place op on the row must reach x."""
    import torch

    p, i, rest = counted_position(i)
    t = torch.full((1,), int(i), dtype=torch.int64, device=x.device)
    sel = torch.index_select(x, p, t)
    row = sel.squeeze(p)
    out = row[(slice(None),) * p + rest] if rest else row
    if rows is not None:
        for v in (sel, row, out):
            rows[id(v)] = (v, sel, x, t, p)
    return out


# `x[i].index_copy_(...)`, `x[i] += v`: the row index_rows hands out is a copy (an index_select),
# not a view of x, so an in-place op on it (or on a view of it) would leave x as it was. After such
# an op the row is written back into x at its index (functionalize then threads x's new value).
_INPLACE_DUNDERS = {"__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__",
                    "__ifloordiv__", "__imod__", "__ipow__", "__iand__", "__ior__", "__ixor__",
                    "__ilshift__", "__irshift__"}


def mutated_row(rows: dict, func, args) -> "tuple | None":
    """(the index_select, x, index, dim) when func is an in-place op on a row index_rows handed out;
    else None. A view the reference takes of the row itself is not followed (functionalize's
    tensors keep no _base to tell)."""
    import torch

    if not rows or not args or not isinstance(args[0], torch.Tensor):
        return None
    name = getattr(func, "__name__", "") or ""
    if not ((name.endswith("_") and not name.startswith("__")) or name in _INPLACE_DUNDERS):
        return None
    got = rows.get(id(args[0]))
    return got[1:] if got is not None and got[0] is args[0] else None


def assign_row(x, i, v) -> None:
    """`x[i] = v` (`x[:, i, ...] = v`) inside a counted loop, x of a symbolic length at i's dim: the
    row taken as index_rows takes it, v written into it, the row written back (an index_copy: no
    bounds check against this workload's length, as for the read)."""
    p, idx, rest = counted_position(i)
    rows: dict = {}
    row = index_rows(x, (slice(None),) * p + (idx,), rows)
    row[(slice(None),) * p + rest if rest else (Ellipsis,)] = v
    write_back(rows[id(row)][1:])


def write_back(row_entry) -> None:
    """x[i] (x[:, i]) = the (mutated) row, in place on x."""
    sel, x, t, p = row_entry
    x.index_copy_(p, t, sel)


_ORDERINGS = (sympy.StrictGreaterThan, sympy.GreaterThan, sympy.StrictLessThan, sympy.LessThan)


def _ordering(expr) -> tuple:
    """An ordering guard as (d, strict): the guard reads d > 0 (strict) or d >= 0."""
    ahead = isinstance(expr, (sympy.StrictGreaterThan, sympy.GreaterThan))
    strict = isinstance(expr, (sympy.StrictGreaterThan, sympy.StrictLessThan))
    return (expr.lhs - expr.rhs if ahead else expr.rhs - expr.lhs), strict


def decide(env, expr):
    """A guard torch cannot decide on sizes read back from the device inside a counted loop: True
    or False with the decision recorded (see the module doc), or None to refuse as before."""
    free = expr.free_symbols
    unbacked = [s for s in free if symexpr.is_read_back(s)]
    if not unbacked:
        return None
    if isinstance(expr, (sympy.Eq, sympy.Ne)) and expr.rhs == 0 and \
            all(symexpr.is_read_back(s) for s in free) and (
                (expr.lhs.is_Add and all(abs(c) == 1 for c in expr.lhs.as_coefficients_dict().values()))
                or (expr.lhs.is_Symbol and not _bool_valued(env, expr.lhs))):
        # `if end - start == 0`, `if n == 0` (n a count read back): the non-empty side; the
        # emptiness test is recorded as the oblivious decisions are (dynamic.check_oblivious then
        # refuses reductions over it)
        env.oblivious.append(expr)
        return sympy.false if isinstance(expr, sympy.Eq) else sympy.true
    if isinstance(expr, _ORDERINGS) and all(symexpr.is_read_back(s) for s in free):
        # `l > 0` on a segment length (a filter dropping empty segments): the non-empty side too
        d, strict = _ordering(expr)
        if d.is_Symbol or (d.is_Add and d.as_coeff_Add()[1].is_Symbol):
            c = d.as_coeff_Add()[0] if d.is_Add else 0
            if (strict and c == 0) or (not strict and c == -1):
                from . import counted_splits

                counted_splits.tested(d.free_symbols)
                env.oblivious.append(sympy.Eq(d - c, 0))
                return sympy.true
    return decide_read_back(env, expr, any_equality=True)


def decide_read_back(env, expr, any_equality: bool = False):
    """Guards on values read back that hold wherever a loop runs or not: True or False with the
    decision recorded, or None to refuse as before.
    - `if start >= end: continue` (also `end <= start`, `start < end`) over two offsets read back:
      the emptiness test of the segment end - start, its non-empty side, recorded as the
      size-oblivious tests are (dynamic.check_oblivious refuses what is reduced over it);
    - an equality of a size and a value read back (`assert n == ptr[-1].item()`; inside a counted
      loop any equality, `cat(out).reshape(T, H)`): assumed, recorded in the IR's `assumed` list and
      checked on the device after the kernels (a trap where it fails). Outside one, an equality
      over values alone (`if (s < 1.0).item() == 1`, a flag) is no size's and still refuses."""
    free = expr.free_symbols
    read = [s for s in free if symexpr.is_read_back(s)]
    if isinstance(expr, _ORDERINGS) and len(read) == len(free) == 2:
        length, strict = _ordering(expr)   # > 0: non-empty
        if not strict:
            length = -length            # a >= b is b - a <= 0: the test for emptiness
        if length.is_Add and sorted(length.as_coefficients_dict().values()) == [-1, 1]:
            from . import counted_splits

            counted_splits.tested(length.free_symbols)
            env.oblivious.append(sympy.Eq(length, 0))
            return sympy.true if strict else sympy.false
    if isinstance(expr, sympy.Eq) and read and (any_equality or (
            len(read) < len(free) and not any(_bool_valued(env, u) for u in read))):
        env.assumed.append(expr)
        return sympy.true
    return None


def _bool_valued(env, u) -> bool:
    """Whether a value read back is a bool's (its range 0..1): `if not flag` is no emptiness test."""
    rng = env.var_to_range.get(u)
    up = getattr(rng, "upper", None)
    return up is not None and getattr(up, "is_number", False) and up <= 1


def assumed_ir(env, namer) -> list:
    """The assumed equalities as axis-expression pairs over the IR's names."""
    out = []
    for e in getattr(env, "assumed", []):
        try:
            out.append([namer.expr(e.lhs, env), namer.expr(e.rhs, env)])
        except Exception:  # noqa: BLE001 - a side over an unnamed symbol: checked nowhere, refuse
            from .errors import TraceError

            raise TraceError(f"an assumed size equality {e} over values the plan cannot read")
    return out


def count_exprs(counts: list, namer, shape_env) -> list:
    """Loop counts as ints, or axis-expression strings for symbolic ones."""
    import torch

    return [namer.expr(c.node.expr, shape_env) if isinstance(c, torch.SymInt) else c for c in counts]


# ── after the trace: the launches' bound ─────────────────────────────────────────────────────────
def bind_counts(ir: dict, defn, workloads: list) -> dict:
    """Every loop node with a symbolic count gets `count`: the largest value of its count over the
    problem's workloads (the launches are replicated that many times)."""
    if not ir:
        return ir
    irs = [v["ir"] for v in ir["variants"]] if "variants" in ir else [ir]
    loops = [n for g in irs for n in g["nodes"] if n.get("count_expr")]
    if not loops:
        return ir
    envs = []
    for w in workloads:
        axes = dict(getattr(w, "axes", {}) or {})
        try:
            axes.update(defn.resolve_axes({k: axes[k] for k in defn.var_axes}))
        except (KeyError, ValueError):
            pass
        try:
            axes.update({k: v for k, v in dict(w.scalars()).items() if isinstance(v, int)})
        except Exception:  # noqa: BLE001 - a workload without scalars
            pass
        envs.append({symexpr.sym(k): sympy.Integer(int(v)) for k, v in axes.items()
                     if isinstance(v, (int, bool))})
    for n in loops:
        e = symexpr.parse(n["count_expr"])
        vals = [e.xreplace(env) for env in envs]
        vals = [int(v) for v in vals if v.is_number]
        if not vals:
            raise ValueError(f"loop count {n['count_expr']} has no value at any workload")
        n["count"] = max(0, max(vals))
    return ir


# ── lowering side ────────────────────────────────────────────────────────────────────────────────
def check_kernel(L, cond_c_fn, what: str):
    """A one-thread kernel that traps unless a condition holds (cond_c_fn(k) -> C bool)."""
    from .generic import LaunchSpec
    from .kernel import Kernel

    k = Kernel(L.kname(what))
    cond = cond_c_fn(k)
    k.emit(f"if (threadIdx.x == 0 && !({cond})) __trap();")
    return LaunchSpec(k, ["1"], ["32"], kind="check")


def count_check(L, node):
    """Before a counted loop: n is at most the launches' count."""
    e = symexpr.parse(node["count_expr"])
    L.kernels.append(check_kernel(L, lambda k: f"{k.c(e)} <= {int(node['count'])}LL", "count_check"))


def collect_start(L, node) -> dict:
    """The collected buffers of a loop (one per `collects` entry) and their running offsets."""
    from .generic import LaunchSpec
    from .kernel import Kernel

    out = {}
    for c in node.get("collects") or []:
        off = L.new_buffer("int64", [sympy.Integer(1)])
        k = Kernel(L.kname("collect_init"))
        k.emit("if (threadIdx.x == 0) " + f"{k.ptr(off)}[0] = 0;")
        L.kernels.append(LaunchSpec(k, ["1"], ["32"], kind="collect"))
        out[c["name"]] = {"off": off}
    return out


def collect_write(L, node, c: dict, state: dict) -> None:
    """Inside the body: write this iteration's value at the running offset along the cat dim, then
    advance the offset by its length."""
    from . import dynamic
    from .generic import BLOCK, LaunchSpec
    from .kernel import Kernel, convert
    from .loops import unravel

    x = L.env[c["out"]]
    d = int(c["dim"]) % len(x.shape)
    name = c["size"]
    shape = list(x.shape)
    if "buf" not in state:
        # the cat dim outermost: the layout of the other dims does not depend on the final length
        order = [d] + [i for i in range(len(shape)) if i != d]
        bshape = [symexpr.sym(name)] + [shape[i] for i in order[1:]]
        state["buf"] = L.new_buffer(x.dtype, bshape)
        state["order"] = order
        state["per_bound"] = dynamic.upper(shape[d], L.dyn)
        cap = L.dyn.pinned.get(name)
        loose = sympy.Integer(int(node["count"])) * state["per_bound"]
        # the pinned length, where it is the smaller (an expert's bound is every selected row)
        state["cap"] = cap if cap is not None and symexpr.at_most(cap, loose) and \
            not symexpr.at_most(loose, cap) else None
    buf, order, off = state["buf"], state["order"], state["off"]
    k = Kernel(L.kname("collect"))
    n = sympy.Mul(*shape) if shape else sympy.Integer(1)
    lin = k.local_sym("_x")
    k.emit(f"const long long n_ = {k.c(n)};")
    k.emit(f"const long long off_ = {k.ptr(off)}[0];")
    k.open(f"for (long long {lin} = (long long)blockIdx.x * blockDim.x + threadIdx.x; {lin} < n_; "
           f"{lin} += (long long)gridDim.x * blockDim.x)")
    idx = unravel(lin, shape)
    v = x(k, idx)
    k.locals.add("off_")
    rest = [shape[i] for i in order[1:]]
    ridx = [idx[i] for i in order[1:]]
    pos = symexpr.sym("off_") + idx[d]
    stride = sympy.Mul(*rest) if rest else sympy.Integer(1)
    inner = sympy.Integer(0)
    for i, s in zip(ridx, rest):
        inner = inner * s + i
    cap = state.get("cap")
    if cap is not None:   # past the pinned length: dropped here, the check after the loop traps
        k.open(f"if ({k.c(pos)} < ({k.c(cap)}))")
    k.store(buf, pos * stride + inner, convert(v, x.dtype, buf.dtype))
    if cap is not None:
        k.close()
    k.close()
    grid = f"max(1, min(ceil_div({symexpr.to_axis(n)}, {BLOCK}), 131072))"
    L.kernels.append(LaunchSpec(k, [grid], [str(BLOCK)], kind="pointwise"))
    k2 = Kernel(L.kname("collect_advance"))
    k2.emit(f"if (threadIdx.x == 0) {k2.ptr(off)}[0] += {k2.c(shape[d])};")
    L.kernels.append(LaunchSpec(k2, ["1"], ["32"], kind="collect"))


def collect_finish(L, node, states: dict) -> None:
    """After the loop: the cat's value is the collected buffer (the cat dim moved back), its length
    the final offset, bounded by the launches' count times one iteration's bound."""
    from .loops import view_of

    for c in node.get("collects") or []:
        st = states[c["name"]]
        buf, order = st["buf"], st["order"]
        name = c["size"]
        L.dyn.counts[name] = st["off"]
        cap = st.get("cap")
        L.dyn.bounds[name] = cap if cap is not None else \
            sympy.Integer(int(node["count"])) * st["per_bound"]
        if cap is not None:
            L.kernels.append(check_kernel(
                L, lambda k, off=st["off"], cap=cap: f"{k.ptr(off)}[0] <= ({k.c(cap)})", "pinned_check"))
        nd = len(order)
        bstrides = []
        acc = sympy.Integer(1)
        for s in reversed(buf.shape):
            bstrides.append(acc)
            acc = acc * s
        bstrides.reverse()
        shape = [None] * nd
        strides = [None] * nd
        for j, i in enumerate(order):
            shape[i] = buf.shape[j]
            strides[i] = bstrides[j]
        L.env[c["name"]] = view_of(buf, shape, strides, sympy.Integer(0))


def assumed_checks(L) -> None:
    """After every kernel: the size equalities the trace assumed hold (a trap otherwise)."""
    for lhs, rhs in L.ir.get(ASSUMED) or []:
        a, b = symexpr.parse(lhs), symexpr.parse(rhs)
        L.kernels.append(check_kernel(L, lambda k, a=a, b=b: f"({k.c(a)}) == ({k.c(b)})",
                                      "assumed_check"))


# ── before rolling: values one loop's iteration reads from another's ─────────────────────────────
def rematerialize(ir: dict, reps: int) -> dict:
    """A loop whose iteration j reads values of an earlier loop's iteration j (`for w, q in
    zip(weights_list, qs)` over a list the first loop filled) recomputes them in its own iteration:
    each of its blocks starts with a copy of the nodes of the earlier block it needs (and their
    ancestors in that block). Both loops then roll on their own (a value per iteration cannot leave
    a loop but through a collected cat). The IR itself when no block reads another loop's."""
    from .ir import refs as _refs
    from .loop_base import _sig

    nodes = ir["nodes"]
    runs = _periodic_runs([_sig(n) for n in nodes], reps)
    if len(runs) < 2:
        return ir
    pos = {n["name"]: i for i, n in enumerate(nodes)}

    def block_of(i):
        for s, P in runs:
            if s <= i < s + P * reps:
                return s, P, (i - s) // P
        return None

    needs: dict = {}    # run start -> {earlier run start: set of relative indices}
    for s, P in runs:
        for b in range(reps):
            for j in range(P):
                n = nodes[s + b * P + j]
                for r in _refs(n["args"]) + _refs(list(n["kwargs"].values())):
                    p = pos.get(r)
                    if p is None or p >= s:
                        continue
                    got = block_of(p)
                    if got is None:
                        continue
                    s2, P2, b2 = got
                    if b2 != b:
                        return ir   # another iteration's value: not this shape
                    needs.setdefault(s, {}).setdefault(s2, set()).add((p - s2) % P2)
    if not needs:
        return ir
    period = dict(runs)
    dyn = ir.get("dynamic") or {}
    for s, srcs in needs.items():   # ancestors inside the source block, in block order
        for s2, rel in srcs.items():
            P2 = period[s2]
            # the values read back in this block, by the size they name: a cloned node that names
            # one (a slice between them, a shape of their length) needs its read too
            reads = {n["sym"]: j for j, n in enumerate(nodes[s2:s2 + P2]) if n.get("sym")}
            todo = sorted(rel, reverse=True)
            while todo:
                j = todo.pop()
                n = nodes[s2 + j]
                deps = [pos.get(r) for r in _refs(n["args"]) + _refs(list(n["kwargs"].values()))]
                deps += [s2 + reads[x] for x in _dyn_names(n, dyn) if x in reads]
                for p in deps:
                    if p is not None and s2 <= p < s2 + P2 and p - s2 not in rel:
                        rel.add(p - s2)
                        todo.append(p - s2)
    out, i = [], 0

    def ren(a, m):
        if isinstance(a, dict) and "ref" in a:
            return {"ref": m.get(a["ref"], a["ref"])}
        if isinstance(a, list):
            return [ren(x, m) for x in a]
        if isinstance(a, dict):
            return {k: ren(v, m) for k, v in a.items()}
        return a
    while i < len(nodes):
        if i not in needs:
            out.append(nodes[i])
            i += 1
            continue
        s, P = i, period[i]
        for b in range(reps):
            m: dict = {}
            for s2, rel in sorted(needs[s].items()):
                P2 = period[s2]
                for j in sorted(rel):
                    src = nodes[s2 + b * P2 + j]
                    name = f"{src['name']}_re{s}"
                    m[src["name"]] = name
                    out.append({**src, "name": name, "args": ren(src["args"], m),
                                "kwargs": ren(src["kwargs"], m)})
            for j in range(P):
                n = nodes[s + b * P + j]
                out.append({**n, "args": ren(n["args"], m), "kwargs": ren(n["kwargs"], m)})
        i = s + P * reps
    return {**ir, "nodes": out}


def _dyn_names(n: dict, dyn: dict) -> set:
    """The data-dependent sizes a node names (its shape, its size arguments), with the values a
    sliced size is computed from."""
    import json

    from . import dynamic

    text = json.dumps([n.get("shape"), n.get("outs"), n["args"], n["kwargs"]])
    out, todo = set(), [w for w in _words(text) if dynamic.is_dynamic(w)]
    while todo:
        x = todo.pop()
        if x in out:
            continue
        out.add(x)
        for part in (dyn.get(x) or {}).get("slice") or []:
            todo += [w for w in _words(part) if dynamic.is_dynamic(w)]
    return out


def _words(text: str) -> list:
    import re

    return re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text)


def _periodic_runs(sigs: list, reps: int) -> list:
    """(start, period) of each run of exactly `reps` blocks of the same node signatures, scanning
    as rolling.roll does."""
    from .loop_base import MAX_PERIOD

    ids: dict = {}
    x = [ids.setdefault(g, len(ids)) for g in sigs]
    N, i, out = len(x), 0, []
    while i < N:
        best = None
        for P in range(1, min(MAX_PERIOD, (N - i) // reps) + 1):
            if not all(x[i + j] == x[i + P + j] for j in range(P)):
                continue
            R = 2
            while i + (R + 1) * P <= N and all(x[i + j] == x[i + R * P + j] for j in range(P)):
                R += 1
            if R == reps and (best is None or P > best):
                best = P
        if best is not None:
            out.append((i, best))
            i += best * reps
        else:
            i += 1
    return out
