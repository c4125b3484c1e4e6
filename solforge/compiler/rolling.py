"""Loop rolling: a Python loop the trace unrolled (`for e in range(E)` over experts) lowered once.

`roll(ir)` finds a run of R >= MIN_REPS consecutive blocks of nodes with the same structure: the
same ops, dtypes and shapes (data-dependent sizes renamed to the first block's), references inside
the block at the same relative position, the same nodes from before the run, a reference to the
previous block (a carry: the accumulator the loop threads, e.g. `out.index_add_`; the first block
reads its initial value), and integer constants that are an affine function of the iteration (the
expert index of `w[e]`). The run becomes one node `solforge.loop` whose body is the first block,
with the varying constants written over a loop symbol `sfloop<k>` and each carry read through a
name `__carry<k>_<r>`. Only the last block's carries may be read after the run.

`lower_loop` lowers the body once: each carry gets a buffer (initialised by a copy), the body's
kernels are written once and launched R times with the loop symbol bound to 0..R-1 (a launch
argument, `bound_args`), each iteration ending with a copy of the carries' new values. Kernel
sources are shared, so the NVRTC compile and the lowering do not grow with R.
"""

from __future__ import annotations

import ast
import contextvars
import copy

import sympy

from .ir import refs as _refs
from . import dynamic, symexpr
from .generic import pointwise
from .loops import view_of
from .loop_base import (LOOP_OP, MAX_PERIOD, SHORT_OVER, SHORT_RUN, LoopIndexSteered, _Idx,  # noqa: F401
                        _ShortRange, _sig, active_loops, for_statement_at, set_active_loops)

MIN_REPS = 4
# set while the body of a loop whose iterations past a count return early is lowered: a kernel
# rendered whole from a template (templates/gemm_adapter) takes no early return, so matmuls there
# take the lowering's own kernel
GUARDED_BODY: contextvars.ContextVar = contextvars.ContextVar("solforge_guarded_body", default=False)
MIN_NODES = 48    # a run covering fewer nodes is left unrolled (nothing to gain)


class _Mismatch(Exception):
    pass


# views nothing reads: functionalize leaves the stale view of a mutated slice (`acc[e] += v` reads
# acc[e] of the original where the first iteration reads its live value), which makes the first
# block of a loop differ from the others
_VIEWS = ("aten.select.int", "aten.slice.Tensor", "aten.permute.default", "aten.view.default",
          "aten.unsqueeze.default", "aten.squeeze.dims", "aten.expand.default", "aten.t.default",
          "aten.transpose.int", "aten.alias.default")


def canonical_views(ir: dict) -> dict:
    """The IR without view nodes whose value nothing reads (repeated until none is left), and each
    view read by exactly one node moved to just before it (functionalize emits the live view of a
    mutated slice where it is read, the first iteration's where the slice was taken). Views are
    pure, so the order among them and their reader does not change any value."""
    nodes = ir["nodes"]
    while True:
        used = set(_refs(ir.get("outputs", [])))
        for n in nodes:
            used.update(_refs(n["args"]) + _refs(list(n["kwargs"].values())))
        keep = [n for n in nodes if n["op"] not in _VIEWS or n["name"] in used]
        if len(keep) == len(nodes):
            break
        nodes = keep
    readers: dict = {}
    for r in _refs(ir.get("outputs", [])):
        readers[r] = readers.get(r, 0) + 2   # an output is read after every node: never moved
    for n in nodes:
        for r in set(_refs(n["args"]) + _refs(list(n["kwargs"].values()))):
            readers[r] = readers.get(r, 0) + 1
    deferred = {n["name"]: n for n in nodes if n["op"] in _VIEWS and readers.get(n["name"]) == 1}
    out: list = []

    def emit(n):
        for r in _refs(n["args"]) + _refs(list(n["kwargs"].values())):
            v = deferred.pop(r, None)
            if v is not None:
                emit(v)
        out.append(n)
    for n in nodes:
        if n["name"] not in deferred:
            emit(n)
    out.extend(deferred.values())   # a view whose reader is not a node (cannot happen): kept
    if [n["name"] for n in out] == [n["name"] for n in ir["nodes"]]:
        return ir
    return {**ir, "nodes": out}


def roll(ir: dict, min_reps: int = MIN_REPS, min_nodes: int = MIN_NODES,
         exact: "int | None" = None, collect: bool = False) -> dict:
    """The IR with each long enough run of identical blocks replaced by a loop node (the IR itself
    when there is none). exact: only runs of exactly that many blocks. collect: a `cat` of one
    value per block is collected by the loop (counted_loops.py)."""
    if any(n["op"] == LOOP_OP for n in ir["nodes"]):
        return ir
    out = _roll(ir, min_reps, min_nodes, exact, collect)
    if out is ir:
        # no run as traced: with the views canonical (a mutated slice's stale view moved), the
        # first iteration may match the others. Only then: a counted loop's blocks (collect,
        # counted_loops.py) match as traced and their views' places matter to it
        canon = canonical_views(ir)
        if canon is not ir:
            again = _roll(canon, min_reps, min_nodes, exact, collect)
            if again is not canon:
                return again
    return out


def _roll(ir: dict, min_reps: int, min_nodes: int, exact, collect: bool) -> dict:
    nodes = ir["nodes"]
    if len(nodes) < min_nodes:
        return ir
    intern: dict = {}
    ids = [intern.setdefault(_sig(n), len(intern)) for n in nodes]
    pos = {n["name"]: i for i, n in enumerate(nodes)}
    runs = []
    i, N = 0, len(nodes)
    while i < N:
        best = None
        for P in range(1, min(MAX_PERIOD, (N - i) // min_reps) + 1):
            if ids[i] != ids[i + P] or not all(ids[i + j] == ids[i + P + j] for j in range(P)):
                continue
            R = 2
            while i + (R + 1) * P <= N and all(ids[i + j] == ids[i + R * P + j] for j in range(P)):
                R += 1
            if R >= min_reps and R * P >= min_nodes and (exact is None or R == exact) and \
                    (best is None or R * P > best[0] * best[1]):
                best = (P, R)
        run = None
        if best is not None:
            try:
                run = _verify(ir, pos, i, *best, collect=collect)
            except _Mismatch:
                run = None
        if run is not None:
            runs.append(run)
            i += best[0] * best[1]
        else:
            i += 1
    if not runs:
        return ir
    return _rewrite(ir, runs)


def _verify(ir, pos, s, P, R, collect: bool = False) -> dict:
    nodes = ir["nodes"]
    base = nodes[s:s + P]
    carries: dict = {}      # slot path -> relative index of the carried node
    external: set = set()   # slot paths that read the same node before the run in every block
    varying: dict = {}      # slot path -> [value per block]
    dynmap: dict = {}       # dyn name in a later block -> the first block's

    offsets: dict = {}      # slot path -> [constant offset of a size argument per later block]

    def same_size(a, x, path=None):
        ea, ex = symexpr.parse(str(a)), symexpr.parse(str(x))
        rep = {}
        for sx in ex.free_symbols:
            if dynamic.is_dynamic(str(sx)):
                rep[sx] = symexpr.sym(dynmap.get(str(sx), str(sx)))
        diff = sympy.expand(ex.xreplace(rep) - ea)
        if diff != 0:
            # a size argument that moves by a constant per block (`start + e`): affine, as ints
            if path is None or not diff.is_Integer:
                raise _Mismatch()
            offsets.setdefault(path, []).append(int(diff))
        elif path is not None:
            offsets.setdefault(path, []).append(0)

    def bind_dyn(a_shape, x_shape, path=None):
        for a, x in zip(a_shape or [], x_shape or []):
            da = sorted((str(v) for v in symexpr.parse(str(a)).free_symbols
                         if dynamic.is_dynamic(str(v))), key=_dyn_index)
            dx = sorted((str(v) for v in symexpr.parse(str(x)).free_symbols
                         if dynamic.is_dynamic(str(v))), key=_dyn_index)
            if len(da) != len(dx):
                raise _Mismatch()
            # the sizes already paired keep their pairs; the others pair in order of appearance
            # (dyn9 before dyn10: a string order would pair `dyn10 + dyn9` against the first block's
            # `dyn0 + dyn1` crosswise). same_size then compares the renamed expressions.
            paired = {dynmap[q] for q in dx if q in dynmap}
            fresh_a = [p for p in da if p not in paired]
            fresh_x = [q for q in dx if q not in dynmap]
            if len(fresh_a) != len(fresh_x):
                raise _Mismatch()
            for p, q in zip(fresh_a, fresh_x):
                dynmap[q] = p
            same_size(a, x, path)

    def cmp(a, x, b, path):
        if isinstance(a, dict) and "ref" in a:
            if not (isinstance(x, dict) and "ref" in x):
                raise _Mismatch()
            ra, rx = pos.get(a["ref"]), pos.get(x["ref"])
            if ra is None or rx is None:        # graph inputs
                if a["ref"] != x["ref"]:
                    raise _Mismatch()
                return
            if s <= ra < s + P:
                if rx != ra + b * P:
                    raise _Mismatch()
                return
            if ra >= s:
                raise _Mismatch()
            if rx == ra and path not in carries:
                external.add(path)
                return
            prev = s + (b - 1) * P
            if path not in external and prev <= rx < prev + P:
                r = rx - prev
                if carries.setdefault(path, r) != r:
                    raise _Mismatch()
                return
            raise _Mismatch()
        if isinstance(a, dict) and "sym" in a:
            if not (isinstance(x, dict) and "sym" in x):
                raise _Mismatch()
            bind_dyn([a["sym"]], [x["sym"]], path)
            return
        if isinstance(a, dict):
            if not isinstance(x, dict) or set(a) != set(x):
                raise _Mismatch()
            for k in a:
                cmp(a[k], x[k], b, path + (k,))
            return
        if isinstance(a, list):
            if not isinstance(x, list) or len(a) != len(x):
                raise _Mismatch()
            for j, (p, q) in enumerate(zip(a, x)):
                cmp(p, q, b, path + (j,))
            return
        if isinstance(a, int) and not isinstance(a, bool) and isinstance(x, int) and not isinstance(x, bool):
            vals = varying.setdefault(path, [a])
            vals.append(x)
            return
        if a != x or type(a) is not type(x):
            raise _Mismatch()

    for b in range(1, R):
        for j in range(P):
            a, x = base[j], nodes[s + b * P + j]
            if "sym" in a:                      # a value read back: named per block
                bind_dyn([a["sym"]], [x.get("sym", "")])
            bind_dyn(a.get("shape"), x.get("shape"))
            for oa, ox in zip(a.get("outs") or [], x.get("outs") or []):
                if oa and ox:
                    bind_dyn(oa[1], ox[1])
            cmp(a["args"], x["args"], b, (j, "args"))
            cmp(a["kwargs"], x["kwargs"], b, (j, "kwargs"))
    affine = {}
    for path, vals in varying.items():
        if len(vals) != R:
            raise _Mismatch()
        d = vals[1] - vals[0]
        if any(v != vals[0] + d * b for b, v in enumerate(vals)):
            raise _Mismatch()
        if d != 0 and (d < 0 or vals[0] < 0):
            # a negative index counts from the end (torch wraps it when it is a number): a
            # varying one, written over the loop symbol, would not be wrapped
            raise _Mismatch()
        if d != 0:
            affine[path] = (vals[0], d)
    sym_affine = {}
    for path, diffs in offsets.items():
        vals = [0] + diffs
        if len(vals) != R:
            raise _Mismatch()
        d = vals[1]
        if any(v != d * b for b, v in enumerate(vals)) or d < 0:
            raise _Mismatch()
        if d != 0:
            sym_affine[path] = d
    # after the run, only the last block's carried values may be read (and, collecting, a cat of
    # one value per block)
    last = s + (R - 1) * P
    carried = set(carries.values())
    collects = _collects(nodes[s + R * P:], pos, s, P, R) if collect else {}
    for n in nodes[s + R * P:]:
        if n["name"] in collects:
            continue
        for r in _refs(n["args"]) + _refs(list(n["kwargs"].values())):
            p = pos.get(r)
            if p is not None and s <= p < s + R * P and not (p >= last and p - last in carried):
                raise _Mismatch()
    for r in _refs(ir["outputs"]):
        p = pos.get(r)
        if p is not None and s <= p < s + R * P and not (p >= last and p - last in carried):
            raise _Mismatch()
    return {"start": s, "period": P, "reps": R, "carries": carries, "affine": affine,
            "sym_affine": sym_affine, "collects": collects}


def _dyn_index(name: str) -> int:
    return int(name[len(dynamic.PREFIX):])


def _collects(after, pos, s, P, R) -> dict:
    """cat nodes after a run whose inputs are one value per block, the same one in each (the
    blocks' outputs a loop appends to a list): cat name -> (relative index, dim)."""
    out = {}
    for n in after:
        if n["op"] != "aten.cat.default" or not n["args"] or not isinstance(n["args"][0], list):
            continue
        ps = [pos.get(a.get("ref")) if isinstance(a, dict) else None for a in n["args"][0]]
        if len(ps) != R or ps[0] is None or not s <= ps[0] < s + P or \
                any(p != ps[0] + b * P for b, p in enumerate(ps)):
            continue
        dim = n["args"][1] if len(n["args"]) > 1 else n["kwargs"].get("dim", 0)
        if isinstance(dim, int):
            out[n["name"]] = (ps[0] - s, dim)
    return out


def _set(tree, path, value):
    for k in path[:-1]:
        tree = tree[k]
    tree[path[-1]] = value


def _rewrite(ir, runs) -> dict:
    nodes = ir["nodes"]
    out, alias = [], {}
    cut = {r["start"]: r for r in runs}
    i, k = 0, 0
    dropped: set = set()          # cat nodes a loop collects: the loop gives their value
    sizes: dict = {}              # a collected cat's traced length -> the loop's counted length
    dyn = dict(ir.get("dynamic") or {})
    free_dyn = 1 + max([int(x[len(dynamic.PREFIX):]) for x in dyn] or [-1])

    def fix(a):
        if isinstance(a, dict) and "ref" in a:
            return {"ref": alias.get(a["ref"], a["ref"])}
        if isinstance(a, dict) and "sym" in a and sizes:
            return {**a, "sym": _over(a["sym"], sizes)}
        if isinstance(a, list):
            return [fix(x) for x in a]
        if isinstance(a, dict):
            return {kk: fix(v) for kk, v in a.items()}
        return a
    while i < len(nodes):
        run = cut.get(i)
        if run is None:
            if nodes[i]["name"] in dropped:
                i += 1
                continue
            n = dict(nodes[i], args=fix(nodes[i]["args"]), kwargs=fix(nodes[i]["kwargs"]))
            if sizes:
                _resize(n, sizes)
            out.append(n)
            i += 1
            continue
        s, P, R = run["start"], run["period"], run["reps"]
        var = f"sfloop{k}"
        body = [copy.deepcopy(n) for n in nodes[s:s + P]]
        carries = {}
        for (j, part, *rest), r in run["carries"].items():
            name = f"__carry{k}_{r}"
            tree = body[j][part]
            init = _get(tree, rest)["ref"]
            _set(tree, rest, {"ref": name})
            carries.setdefault(r, {"name": name, "out": nodes[s + r]["name"], "inits": set()})
            carries[r]["inits"].add(alias.get(init, init))
        for (j, part, *rest), (c0, d) in run["affine"].items():
            _set(body[j][part], rest, {"sym": symexpr.to_axis(c0 + d * symexpr.sym(var))})
        for (j, part, *rest), d in run.get("sym_affine", {}).items():
            e = symexpr.parse(_get(body[j][part], rest)["sym"])
            _set(body[j][part], rest, {"sym": symexpr.to_axis(e + d * symexpr.sym(var))})
        for n in body:
            n["args"], n["kwargs"] = fix(n["args"]), fix(n["kwargs"])
        cl = []
        for r, c in sorted(carries.items()):
            if len(c["inits"]) != 1:
                return ir           # one carry read from two different initial values: leave it
            cl.append({"name": c["name"], "out": c["out"], "init": c["inits"].pop()})
            alias[nodes[s + (R - 1) * P + r]["name"]] = c["name"]
        coll = []
        for cname, (r, dim) in (run.get("collects") or {}).items():
            cat = next(n for n in nodes if n["name"] == cname)
            nd = len(cat["shape"])
            traced = symexpr.parse(cat["shape"][dim % nd])
            size = f"{dynamic.PREFIX}{free_dyn}"
            free_dyn += 1
            dyn[size] = {"bound": None, "oblivious": []}
            sizes[traced] = symexpr.sym(size)
            coll.append({"name": cname, "out": body[r]["name"], "dim": dim, "size": size})
            dropped.add(cname)
        loop = {"name": f"loop{k}", "op": LOOP_OP, "args": [], "kwargs": {}, "dtype": None,
                "shape": None, "count": R, "var": var, "body": body, "carries": cl}
        if coll:
            loop["collects"] = coll
        out.append(loop)
        k += 1
        i = s + R * P
    res = {**ir, "nodes": out, "outputs": fix(ir["outputs"])}
    if sizes:
        for k, v in list(dyn.items()):   # a size bounded or sliced by a collected cat's length
            v = dict(v)
            if v.get("bound") is not None:
                v["bound"] = _over(v["bound"], sizes)
            if v.get("slice"):
                v["slice"] = [_over(x, sizes) for x in v["slice"]]
            dyn[k] = v
        res["dynamic"] = dyn
        if ir.get("assumed"):
            res["assumed"] = [[_over(a, sizes), _over(b, sizes)] for a, b in ir["assumed"]]
    return res


def _over(expr: str, sizes: dict) -> str:
    """A size string with each collected cat's traced length (the blocks' sum) as the loop's
    counted length."""
    e = symexpr.parse(str(expr))
    for traced, size in sizes.items():
        if not traced.free_symbols & e.free_symbols:
            continue
        terms = traced.as_ordered_terms() if traced.is_Add else [traced]
        one = next((t for t in terms if t.is_Symbol), None)
        if one is None:
            continue
        e = e.xreplace({one: size - (traced - one)})
    return symexpr.to_axis(e)


def _resize(n: dict, sizes: dict) -> None:
    if n.get("shape") is not None:
        n["shape"] = [_over(x, sizes) for x in n["shape"]]
    if n.get("outs"):
        n["outs"] = [[o[0], [_over(x, sizes) for x in o[1]]] if o else o for o in n["outs"]]


def _get(tree, path):
    for k in path:
        tree = tree[k]
    return tree


def node_count(ir: dict) -> int:
    return sum(len(n["body"]) if n["op"] == LOOP_OP else 1 for n in ir["nodes"])


# ── trace side: long loops traced for a few iterations ───────────────────────────────────────────
class ShortLoops:
    """`range` for the traced reference: `for i in range(n)` with n > SHORT_OVER iterates only the
    first SHORT_RUN values (each an int that raises LoopIndexSteered when the reference compares
    it); `extrapolate` then rolls the SHORT_RUN traced blocks into a loop node of n iterations.
    Anything else (`list(range(n))`, a comprehension, a short loop) is the plain range."""

    def __init__(self, enabled="all"):
        # "all" (or True): both kinds shortened; "counted": only loops of a symbolic count (a
        # constant-count loop iterates in full); False: none
        self.enabled = bool(enabled)
        self.constant = enabled in (True, "all")
        self.counts: list = []
        self.guards: dict = {}   # loop position -> the data-dependent size bounding its iterations
        self.counted = 0         # counted loops (a symbolic trip count) running now
        self.any_counted = False
        # counted_loops.counted_stack: the iteration running now ((loop serial, index) tagged on
        # the tensors it makes), and each finished counted loop's symbolic count by serial
        self.iter_tag = None
        self.loop_serial = 0
        self.finished: dict = {}

    def activate(self) -> "ShortLoops":
        set_active_loops(self)
        return self

    def range(self, *a):
        import builtins

        if self.enabled:
            from .counted_loops import CountedRange, symbolic_count

            n = symbolic_count(a)
            if n is not None:    # a symbolic trip count: counted_loops.py
                return CountedRange(n, self)
        r = builtins.range(*a)
        if not self.enabled or not self.constant or len(r) <= SHORT_OVER:
            return r
        return _ShortRange(r, self)


def extrapolate(ir: dict, counts: list, guards: "dict | None" = None,
                reads_back: bool = False) -> "dict | None":
    """The IR of a trace whose long loops ran SHORT_RUN iterations, with each loop rolled and given
    its real iteration count; None when the traced iterations do not roll into exactly one loop
    node each (then the loops must be traced in full). reads_back: the iterations read values back
    from the device (a count per expert): a cat of one value per iteration is collected, as in a
    loop of a symbolic count."""
    counted = any(isinstance(c, str) for c in counts)
    if counted:   # a loop reading an earlier loop's iteration values recomputes them
        from .counted_loops import rematerialize

        ir = rematerialize(ir, SHORT_RUN)
    rolled = roll(ir, min_reps=SHORT_RUN, min_nodes=1, exact=SHORT_RUN,
                  collect=counted or reads_back)
    loops = [n for n in rolled["nodes"] if n["op"] == LOOP_OP]
    if len(loops) != len(counts):
        return None
    for i, (n, c) in enumerate(zip(loops, counts)):
        if isinstance(c, str):   # a symbolic count: launches bound later (counted_loops.bind_counts)
            n["count"], n["count_expr"] = 0, c
            continue
        n["count"] = int(c)
        if (guards or {}).get(i):
            n["guard"] = guards[i]   # iteration i runs only while i < that size
        elif i in (guards or {}):
            return None
    return rolled


# ── lowering ─────────────────────────────────────────────────────────────────────────────────────
def lower_loop(L, node):
    """The body lowered once, its kernels launched `count` times with the loop symbol bound."""
    cbufs = {}
    for c in node["carries"]:
        x = L.env.get(c["init"])
        if x is None:
            raise ValueError(f"carry {c['name']} has no initial value")
        buf = L.new_buffer(x.dtype, x.shape)
        L.kernels.append(pointwise(L.kname("carry_init"), [(x, buf)]))
        L.env[c["name"]] = view_of(buf)
        cbufs[c["name"]] = buf
    from . import counted_loops

    if node.get("count_expr"):
        counted_loops.count_check(L, node)
    collected = counted_loops.collect_start(L, node)
    k0 = len(L.kernels)
    inplace = _in_place(node)
    # the body's kernels return early past the count (below): a template rendered whole cannot
    token = GUARDED_BODY.set(bool(node.get("guard") or node.get("count_expr")))
    try:
        for n in node["body"]:
            if n["name"] in inplace:
                L.lower_node(n, into=cbufs[inplace[n["name"]]])
            else:
                L.lower_node(n)
    finally:
        GUARDED_BODY.reset(token)
    for c in node.get("collects") or []:
        counted_loops.collect_write(L, node, c, collected[c["name"]])
    for c in node["carries"]:
        ob = L.realize(L.env[c["out"]])
        if ob is not cbufs[c["name"]]:
            L.kernels.append(pointwise(L.kname("carry"), [(view_of(ob), cbufs[c["name"]])]))
    body = L.kernels[k0:]
    if node.get("guard") or node.get("count_expr"):
        # a loop over the rows of a data-dependent count, or of a symbolic count launched for the
        # largest: iteration i does nothing once i >= count
        seen = set()
        for spec in body:
            k = spec.kernel
            if k.name not in seen:
                seen.add(k.name)
                it = k.size(node["var"])
                count = k.size(node["guard"]) if node.get("guard") else \
                    k.c(symexpr.parse(node["count_expr"]))
                line = f"    if ({it} >= {count}) return;"
                if node.get("guard"):
                    k.head.append(line)
                else:
                    k.head.insert(_first_size_load(k), line)
    reps = []
    for it in range(int(node["count"])):
        for spec in body:
            sp = copy.copy(spec)
            sp.bound = {node["var"]: it}
            sp.grid = [_subst(str(g), sp.bound) if node["var"] in str(g) else g for g in spec.grid]
            reps.append(sp)
    L.kernels[k0:] = reps
    counted_loops.collect_finish(L, node, collected)
    return None


def _first_size_load(k) -> int:
    """Where the iteration guard goes in a kernel's head: after the pointers and sizes it reads,
    before any data-dependent size computed from values an iteration past the count never wrote
    (a slice length's range check would trap on them)."""
    for j, line in enumerate(k.head):
        if "__trap" in line or line.lstrip().startswith("const long long s_"):
            return j
    return len(k.head)


def _in_place(node) -> dict:
    """Carries updated by an index_put that is their only reader in the body: it scatters into the
    carry's buffer (no copy of the whole accumulator per iteration). Carry-out name -> carry."""
    out = {}
    for c in node["carries"]:
        users = [n for n in node["body"]
                 if c["name"] in _refs(n["args"]) + _refs(list(n["kwargs"].values()))]
        if len(users) == 1 and users[0]["name"] == c["out"] and \
                users[0]["op"] == "aten.index_put.default" and users[0]["args"][0] == {"ref": c["name"]} \
                and c["name"] not in _refs(users[0]["args"][1:]):
            out[c["out"]] = c["name"]
    return out


def bound_args(spec, args: list) -> list:
    """A launch's arguments with its loop symbols bound (a replicated body kernel)."""
    bound = getattr(spec, "bound", None)
    if not bound:
        return args
    out = []
    for a in args:
        if isinstance(a, str) and a.startswith("int64:") and any(v in a for v in bound):
            out.append("int64:" + _subst(a[6:], bound))
        else:
            out.append(a)
    return out


def _subst(expr: str, bound: dict) -> str:
    tree = ast.parse(expr, mode="eval")

    class Sub(ast.NodeTransformer):
        def visit_Name(self, n):
            return ast.Constant(bound[n.id]) if n.id in bound else n
    return ast.unparse(Sub().visit(tree))

