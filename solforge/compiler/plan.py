"""Assemble a lowered graph into one Candidate: a source file with every kernel, launches in
order, intermediates packed in the workspace.

Workspace: buffers are placed by liveness (first and last kernel that touches each), greedily
reusing the space of buffers no longer read; every offset is a multiple of 256 bytes and an
expression over the axes, passed to the kernels as an int64 argument.
"""

from __future__ import annotations

import sympy
from torch.utils._sympy.functions import FloorDiv

from ..candidate import Candidate
from . import symexpr
from .kernel import ITEMSIZE, PRELUDE, Buffer
from .rolling import bound_args

ALIGN = 256


def _bytes(buf):
    b = buf.numel() * ITEMSIZE[buf.dtype]
    q = sympy.simplify(b / ALIGN)
    if q.is_integer:
        return sympy.sympify(b)
    return FloorDiv(b + ALIGN - 1, ALIGN) * ALIGN


def _raw(size):
    """The byte count under _bytes's rounding up to ALIGN (monotone: raw sizes that compare give
    aligned sizes that compare the same way)."""
    if isinstance(size, sympy.Mul) and len(size.args) == 2 and size.args[0] == ALIGN \
            and isinstance(size.args[1], FloorDiv) and size.args[1].args[1] == ALIGN:
        return sympy.expand(size.args[1].args[0] - (ALIGN - 1))
    return size


def _fits(size, slot) -> bool:
    """Is `size` <= `slot` for every value of the sizes? Decided when their difference is a number,
    or when their ratio is (the same symbolic extent times other constants: a [B, N, 64, 64]
    buffer in the slot of a [B, N, 64, 64, 64] one), compared before the rounding to ALIGN; else
    not, and the buffer gets its own slot."""
    return symexpr.at_most(_raw(size), _raw(slot))


def pack_workspace(lowering) -> sympy.Expr:
    """Set every workspace buffer's offset; return the total bytes. Buffers whose lifetimes do not
    overlap share a slot when their sizes compare for every value of the sizes (_fits, either way:
    a slot grows to its largest member); offsets are laid out once every slot has its size, so a
    loop's results that grow step by step (a 64-step loop's sums over i x i) share one slot instead
    of taking 64. Sizes that cannot be compared get slots of their own."""
    first, last = {}, {}
    for i, spec in enumerate(lowering.kernels):
        names = {key[1] for key in spec.kernel._keys if isinstance(key, tuple) and key[0] == "o"}
        for n in names:
            first.setdefault(n, i)
            last[n] = i
    slots: list[list] = []   # [size, free_after_kernel, members]
    for buf in sorted(lowering.ws, key=lambda b: first.get(b.name, 10**9)):
        if buf.name not in first:
            buf.offset = sympy.Integer(0)
            continue
        size = _bytes(buf)
        free = [sl for sl in slots if sl[1] < first[buf.name]]
        slot = next((sl for sl in free if _fits(size, sl[0])), None)
        if slot is None:
            slot = next((sl for sl in free if _fits(sl[0], size)), None)
            if slot is not None:
                slot[0] = size   # grows to this member: every earlier one fits in it
        if slot is None:
            slots.append([size, last[buf.name], [buf]])
            continue
        slot[1] = last[buf.name]
        slot[2].append(buf)
    end = sympy.Integer(0)
    for size, _, members in slots:
        for buf in members:
            buf.offset = end
        end = end + size
    return end


def build_candidate(problem_name: str, lowering, notes: str = "") -> Candidate:
    total = pack_workspace(lowering)
    srcs, launches, units, seen = [PRELUDE], [], {}, set()
    for spec in lowering.kernels:
        if spec.kind == "attention":  # a template segment: its own source unit, rendered now
            seg = spec.render()
            units.update(seg.sources)
            launches += seg.launches
            continue
        if spec.kernel.name not in seen:  # a rolled loop launches its body's kernels repeatedly
            seen.add(spec.kernel.name)
            srcs.append(spec.kernel.source(spec.launch_bounds))
        launches.append({"kernel": spec.kernel.name, "grid": spec.grid, "block": spec.block,
                         "smem": spec.smem, "args": bound_args(spec, spec.kernel.args())})
    ws = _short_workspace(total, [total])
    return Candidate(problem=problem_name, language="cuda", sources={"kernel.cu": "\n".join(srcs), **units},
                     params={}, launches=launches, workspace=ws, workspace_zero="0",
                     options=["--fmad=false"], notes=notes)


def workspace_bound(totals: list):
    """A short upper bound of max(totals) (a Candidate's expression is at most 16000 characters):
    their sum, every floor division a // b taken as a / b, max() as the sum of its arguments and
    min() as its first, expanded into one polynomial over a common integer denominator (sizes are
    never negative, so each step only grows the value); None when that is not possible, which
    includes a floor division, max() or min() inside a divisor (loosening it there shrinks the
    quotient)."""
    from sympy import Max, Min

    def shrinks(x) -> bool:   # loosening this would grow it: wrong inside a divisor
        return x.has(FloorDiv) or x.has(Max) or x.has(Min)

    for t in totals:
        e = sympy.sympify(t)
        divisors = [x.args[1] for x in e.atoms(FloorDiv)] + \
                   [x.base for x in e.atoms(sympy.Pow) if x.exp.is_negative]
        if any(d.free_symbols and shrinks(d) for d in divisors):
            # a // (b // c): b // c taken as b / c is larger, so the quotient gets smaller
            return None

    def loosen(e):
        e = e.replace(lambda x: isinstance(x, FloorDiv), lambda x: x.args[0] / x.args[1])
        e = e.replace(lambda x: isinstance(x, Max), lambda x: sympy.Add(*x.args))
        return e.replace(lambda x: isinstance(x, Min), lambda x: x.args[0])

    ub = sympy.expand(sum((loosen(sympy.sympify(t)) for t in totals), sympy.Integer(0)))
    num, den = sympy.fraction(sympy.together(ub))
    num = sympy.expand(num)
    if not den.is_Integer or den <= 0:
        return None
    if num.free_symbols:
        try:
            if not all(c.is_integer for c in sympy.Poly(num, *sorted(num.free_symbols, key=str)).coeffs()):
                return None
        except sympy.PolynomialError:
            return None
    elif not num.is_integer:
        return None
    return num if den == 1 else FloorDiv(num + den - 1, den)


def _short_workspace(total, totals: list) -> str:
    ws = symexpr.to_axis(total) if total != 0 else "0"
    if len(ws) > 12000:   # many buffers of their own sizes: the short bound
        ub = workspace_bound(totals)
        ws = symexpr.to_axis(ub) if ub is not None else ws
    return ws


def _needs_when(kernel: str, when) -> None:
    """A template (a GEMM or an attention unit, rendered whole) has no guard of its own: only a
    variant whose guards the host can test launches it."""
    if when is None:
        raise ValueError(f"{kernel}: a template kernel cannot take a variant's guard (it reads a "
                         "value on the device)")


def build_candidate_variants(problem_name: str, variants: list, notes: str = "") -> Candidate:
    """Several lowered graphs, one per structure the reference takes; each kernel of variant v
    starts with `if (!(pred_v)) return;`, so only the variant whose guards hold does any work, and
    where the guards are over sizes and int scalars only, the variant's launches also carry them
    as `when` (the host launches only the variant that holds: a template kernel, rendered whole,
    takes no guard of its own, so it needs that). They never run together: each packs the
    workspace from offset 0; the total is the largest."""
    srcs, launches, totals, seen, units = [PRELUDE], [], [], set(), {}
    for low, (pred, names, fnames, *more) in variants:
        tensors = more[0] if more else []   # inputs the predicate reads on the device (flags.py)
        when = more[1] if len(more) > 1 and not tensors else None
        totals.append(pack_workspace(low))
        for spec in low.kernels:
            if spec.kind == "attention":  # a template segment: its own source unit, rendered now
                _needs_when(spec.name, when)
                seg = spec.render()
                units.update(seg.sources)
                launches += [{**launch, "when": when} for launch in seg.launches]
                continue
            k = spec.kernel
            if k.name not in seen:  # a rolled loop launches its body's kernels repeatedly
                seen.add(k.name)
                if getattr(k, "text", ""):
                    # a template's source is rendered whole (gemm_adapter): it neither takes the
                    # guard's arguments nor returns early, so only a host-side `when` selects it
                    _needs_when(k.name, when)
                    srcs.append(k.source(spec.launch_bounds))
                else:
                    for n in names:
                        k.size(n)
                    for n in fnames:
                        k.scalar(n)
                    for t, dt, shape in tensors:
                        k.ptr(Buffer(t, dt, [symexpr.parse(x) for x in shape], "input"))
                    k.head.insert(0, f"    if (!({pred})) return;")
                    srcs.append(k.source(spec.launch_bounds))
            launch = {"kernel": k.name, "grid": spec.grid, "block": spec.block,
                      "smem": spec.smem, "args": bound_args(spec, k.args())}
            if when is not None:
                launch["when"] = when
            launches.append(launch)
    total = sympy.Max(*totals) if len(totals) > 1 else totals[0]
    ws = _short_workspace(total, totals)
    return Candidate(problem=problem_name, language="cuda", sources={"kernel.cu": "\n".join(srcs), **units},
                     params={}, launches=launches, workspace=ws, workspace_zero="0",
                     options=["--fmad=false"], notes=notes)
