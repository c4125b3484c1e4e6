"""Data-dependent sizes: nonzero, boolean-mask indexing and masked_select, traced and lowered.

Trace (in the child): such an op's output size is an unbacked symbol of the trace. Each one gets a
name `dyn<i>` (in order of appearance, so two traces compare structurally) and a static upper
bound, the numel of the mask it counts (an axis expression). A Python branch on such a size
(`if idx.numel() == 0: continue`) that torch cannot decide is decided size-obliviously (the size is
taken as >= 2, torch's guard_size_oblivious) and remembered; any other undecidable guard is refused.
IR: `"dynamic": {"dyn0": {"bound": "<axis expr>", "oblivious": ["Eq(u0, 0)", ...]}}`.

Lower: a dynamic size lives in device memory. Its producer (dynamic_lower.py's `nonzero` kernel, an
ordered prefix-sum compaction) writes the count to an int64 workspace slot; every kernel that reads
the size (`Kernel.size` -> `device_size`) loads it from there, so a grid-stride loop, a reduction's
row count or a matmul's M stop at the count. Buffers and grids use the upper bound.

Value safety of the oblivious branch: when the size is really 0 (or 1), the kernels run the
non-empty branch on no rows. That matches skipping the work as long as no value is reduced over the
size (a sum, max or matmul K over the rows); a graph that does is refused (`check_oblivious`).
"""

from __future__ import annotations

import contextvars
from typing import Optional

import sympy

from .ir import refs as _refs
from . import symexpr

PREFIX = "dyn"
VALUE_OP = "solforge.item"   # IR node: an int read back from a 1-element tensor, named by "sym"
_ACTIVE: contextvars.ContextVar = contextvars.ContextVar("solforge_dynamic_sizes", default=None)
# ops through which rows of a data-dependent size leave without being reduced over: a scatter of
# no rows leaves its target as it was
_SCATTERS = ("aten.index_put", "aten.scatter", "aten.index_add", "aten.bincount")
_PRODUCERS = ("aten.nonzero.default", "aten.index.Tensor", "aten.masked_select.default",
              "aten.argwhere.default")


def is_dynamic(name: str) -> bool:
    return name.startswith(PREFIX) and name[len(PREFIX):].isdigit()


class Sizes:
    """The lowering's data-dependent sizes: name -> (bound, count buffer once produced)."""

    def __init__(self, ir: dict):
        # sizes have an upper bound; values read back (`.item()` of an int) have none
        self.bounds = {k: symexpr.parse(v["bound"]) if v.get("bound") is not None else None
                       for k, v in (ir.get("dynamic") or {}).items()}
        self.oblivious = {k for k, v in (ir.get("dynamic") or {}).items() if v.get("oblivious")}
        # sizes computed from other sizes in each kernel (a slice's length: sliced_sizes.py)
        self.sliced = {k: v["slice"] for k, v in (ir.get("dynamic") or {}).items() if v.get("slice")}
        self.counts: dict = {}     # name -> int64 workspace buffer holding the count
        self.coords: dict = {}     # name -> the nonzero coordinates (a loader), once computed
        # set by the lowering (view_bounds.py): products of values read back that a view bounds
        # ({t * (h // 2) * (w // 2): n // 4}), and sizes a view pins ({a loop's collected rows:
        # T * K}, counted_loops.collect_write)
        self.products: dict = {}
        self.pinned: dict = {}

    def __bool__(self) -> bool:
        return bool(self.bounds)


def activate(sizes: Sizes):
    return _ACTIVE.set(sizes)


def deactivate(token) -> None:
    _ACTIVE.reset(token)


def device_size(k, name: str) -> Optional[str]:
    """The C name of dynamic size `name` in kernel k, loaded from its count slot (None when `name`
    is not a dynamic size of the lowering being built)."""
    sizes = _ACTIVE.get()
    if sizes is None or name not in sizes.bounds:
        return None
    if name in sizes.sliced:
        from .sliced_sizes import device_value

        return device_value(k, name, sizes.sliced[name])
    buf = sizes.counts.get(name)
    if buf is None:
        raise ValueError(f"size {name} is read before the kernel that counts it")
    key = ("dz", name)
    if key not in k._keys:
        p = k.ptr(buf)
        k._keys[key] = True
        k.head.append(f"    const long long z_{name} = {p}[0];")
    return f"z_{name}"


def sub_products(e, products: dict):
    """e with each product of `products` inside it (a factor of a larger product included) replaced
    by its bound (sizes are non-negative, so this only grows e wherever it is not a divisor)."""
    if not products:
        return e

    def one(m):
        args = list(sympy.Mul.make_args(m))
        for prod, bound in products.items():
            rest = list(args)
            for f in sympy.Mul.make_args(prod):
                if f not in rest:
                    break
                rest.remove(f)
            else:
                return sympy.Mul(*rest) * bound
        return m
    return sympy.sympify(e).replace(lambda x: x.is_Mul, one)


def upper(e, sizes: Sizes):
    """A size expression with every dynamic size at its upper bound."""
    e = sub_products(sympy.sympify(e), getattr(sizes, "products", None))
    for _ in range(8):   # a bound may name another size (a slice of a collected cat's length)
        rep = {symexpr.sym(n): b for n, b in sizes.bounds.items()
               if b is not None and symexpr.sym(n) in e.free_symbols}
        if not rep:
            break
        e = e.xreplace(rep)
    return e


def check_oblivious(ir: dict) -> Optional[str]:
    """Why the size-oblivious branches of the trace are not value-safe, or None: a value reduced
    over a size whose emptiness the reference tests (the skipped branch and the empty one could
    then differ)."""
    guarded = {k for k, v in (ir.get("dynamic") or {}).items() if v.get("oblivious")}
    if not guarded:
        return None
    for k, v in (ir.get("dynamic") or {}).items():  # a slice between tested bounds: tested too
        if v.get("slice") and any(str(x) in guarded for p in v["slice"]
                                  for x in symexpr.parse(p).free_symbols):
            guarded.add(k)
    shapes: dict = {i["name"]: [i.get("shape") or []] for i in ir["inputs"]}

    def names_in(shape_list) -> set:
        out = set()
        for shp in shape_list:
            for s in shp or []:
                out |= {str(x) for x in symexpr.parse(str(s)).free_symbols}
        return out
    flat = [b for n in ir["nodes"] for b in (n.get("body") or [n])]  # rolled loops: their body
    zero: set = set()   # sums over the rows (0 when empty) and views of them: only ever added
    for n in flat:
        outs = [n["shape"]] if n.get("shape") is not None else [o[1] for o in n.get("outs") or [] if o]
        shapes[n["name"]] = outs
        reads = _refs(n["args"]) + _refs(list(n["kwargs"].values()))
        if any(r in zero for r in reads):
            if n["op"] in _ZERO_VIEWS and reads[0] in zero:
                zero.add(n["name"])
                continue
            if not (n["op"] == "aten.add.Tensor" and not n["kwargs"] and len(reads) == 2
                    and not all(r in zero for r in reads)):
                return (f"op {n['op']} reads a sum over the data-dependent size that the reference "
                        "tests for emptiness (the branch it skips may differ from the empty one)")
        if any(n["op"].startswith(s) for s in _SCATTERS):
            continue
        ins = set()
        for r in reads:
            ins |= names_in(shapes.get(r, []))
        lost = (ins & guarded) - names_in(outs)
        if lost and n["op"] in _ZERO_SUMS:
            # over no rows a sum is 0, and x + 0 is x: the empty iteration leaves what the
            # skipped one leaves, as long as the sum is only added (checked at its readers)
            zero.add(n["name"])
            continue
        if lost and n["op"] != "getitem" and not n["op"].startswith("aten._assert"):
            return (f"op {n['op']} reduces over the data-dependent size that the reference tests "
                    "for emptiness (the branch it skips may differ from the empty one)")
    if zero & set(_refs(ir.get("outputs", []))):
        return "an output is a sum over the data-dependent size that the reference tests for emptiness"
    return None


_ZERO_SUMS = ("aten.mm.default", "aten.bmm.default", "aten.sum.dim_IntList", "aten.sum.default")
_ZERO_VIEWS = ("aten.permute.default", "aten.view.default", "aten.unsqueeze.default",
               "aten.squeeze.dims", "aten.expand.default", "aten.t.default", "aten.transpose.int",
               "aten.select.int", "aten.slice.Tensor")
