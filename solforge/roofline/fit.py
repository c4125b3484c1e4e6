"""Counting a problem's workloads from a few traces: per-op monomial fits, checked on an extra trace.

Tracing costs 1-3 ms per aten op (torch's Python meta kernels), per workload; a problem has 17
workloads on average that differ only in their var axes. For most references the sequence of aten ops is
the same for every workload and each op's contribution (FLOPs on a unit, the fraction of an input it
reads, the bytes it writes in place) is a constant times a product of powers of the axes: a matmul is
2*M*N*K, a gather reads n_indices / n_rows of its source. So:

1. trace two workloads (the smallest, and the small one that differs from it in the most axes);
2. require the same op sequence, then for every (op, quantity) find the monomials c * prod(axis^e),
   e in {-1..3}, that reproduce the traced values exactly (relative 1e-9);
3. where two monomials fit the traced points but predict different values for some other workload,
   trace a workload that tells them apart (at most MAX_FIT_TRACES traces);
4. check: trace one more workload, the least round one (fewest factors of two: integer divisions
   show there) and then the farthest (in log-axis space) from those traced, and compare
   every per-op quantity with the prediction (when it differs, fit again with it among the traced
   workloads and check on another one, once); then one workload of every structural class not yet
   traced (which variables are 1, which pairs are equal: torch reshapes size-1 dims by views, not
   copies, and that can change a matmul's unit) is checked the same way;
5. only when all of that holds are the other workloads predicted (method "fit"); any failure
   (different op sequences, data-dependent counts, a quantity no monomial fits, a failed trace, a
   mismatch in the check) falls back to tracing every remaining workload. Nothing is guessed.
   A workload whose own trace runs past the op/time budget (a reference looping per item, at its
   biggest size) is predicted by a fit that holds on the traced workloads and the check (note says so).

A quantity no monomial fits alone (an MoE expert's matmul: tokens routed to it at random) is fitted
summed over its family: the ops of the same name issued from the same call path of the reference (one
line of a loop over the experts), per kind and key (all experts: tokens * top_k exactly), and checked so.

Variables: the workloads' numeric axes (expr axes included) and scalars that vary across the problem
and are >= 0 (an axis that is 0 somewhere only with exponents >= 0).
"""

from __future__ import annotations

import itertools
from typing import Any, Optional

import numpy as np

from ..problem.workload import ResolvedWorkload
from .estimate import CountStatus, TraceLog, WorkloadCount, declared_bytes, finish_count, trace_workload

EXPONENTS = (-1, 0, 1, 2, 3)
MAX_VARS = 5  # 5^5 = 3125 candidate monomials; more varying axes: trace every workload
MAX_FIT_TRACES = 9
MAX_CHECKS = 2  # a failed check adds its workload to the fit once; a second failure ends fitting
# Check workloads that must match before the others are predicted. One, chosen to expose what a
# monomial fit can miss (least round axis values: floor divisions; farthest from the fit points),
# found no mismatch in the full comparison over 3,427 workloads (docs/roofline_validation.md); a
# second one costs ~15 s of the 60 s budget.
CHECKS_REQUIRED = 1
MIN_WORKLOADS = 4  # with fewer, tracing all of them is as cheap as fitting and checking
RTOL = 1e-9
# why each fallback to tracing every workload happened (diagnostics for the benchmark script)
FALLBACKS: list[str] = []


def fit_variables(wls: list[ResolvedWorkload]) -> tuple[list[str], bool]:
    """(names of the numeric axes/scalars that vary across the workloads and are >= 0 everywhere, one
    name per distinct column of values; whether some other value varies too: a negative number, a bool,
    a string, which no monomial can follow)."""
    vals = [w.axes_and_scalars() for w in wls]
    keys = sorted(set().union(*vals))
    names, other, seen = [], False, set()
    for k in keys:
        col = tuple(v.get(k) for v in vals)
        if len({repr(x) for x in col}) <= 1:
            continue
        if all(isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0 for x in col):
            if col not in seen:  # an expr axis equal to a scalar input: one variable
                seen.add(col)
                names.append(k)
        else:
            other = True
    return names, other


def _twos(v: float) -> int:
    """Factors of two in an integer value (at most 10; 0 for non-integers and 0)."""
    if v != int(v) or v == 0:
        return 0
    n, k = int(v), 0
    while n % 2 == 0 and k < 10:
        n //= 2
        k += 1
    return k


class MonomialFit:
    """Candidate monomials prod(x_v^e_v) over the variables, evaluated at every workload."""

    def __init__(self, x: np.ndarray):
        n, k = x.shape
        self.logx = np.log1p(x) if k else np.zeros((n, 0))
        exps = np.array(list(itertools.product(EXPONENTS, repeat=k)), dtype=np.float64).reshape(-1, k)
        # exact powers (float64 products of integers), not exp(log): the fit compares to 1e-9
        m = np.ones((exps.shape[0], n))
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            for v in range(k):
                m *= x[None, :, v] ** exps[:, v:v + 1]
        # an axis that is 0 somewhere cannot appear with a negative exponent
        self.m = m[np.isfinite(m).all(axis=1)]

    def fit(self, y: np.ndarray, traced: list[int]) -> tuple[Optional[np.ndarray], np.ndarray]:
        """(prediction at every workload, or None if no monomial fits; mask of workloads where the
        monomials that fit disagree)."""
        n = self.m.shape[1]
        scale = float(np.max(np.abs(y)))
        if scale == 0.0:
            return np.zeros(n), np.zeros(n, dtype=bool)
        t0 = int(np.argmax(np.abs(y)))
        with np.errstate(divide="ignore", invalid="ignore"):
            c = y[t0] / self.m[:, traced[t0]]
            err = np.abs(c[:, None] * self.m[:, traced] - y[None, :])
        ok = np.all(err <= RTOL * scale, axis=1) & np.isfinite(c)
        if not ok.any():
            return None, np.zeros(n, dtype=bool)
        p = c[ok, None] * self.m[ok]
        hi, lo = p.max(axis=0), p.min(axis=0)
        ambiguous = (hi - lo) > RTOL * np.maximum(np.abs(hi), np.abs(lo))
        return p[0], ambiguous


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= RTOL * max(abs(a), abs(b))


class _Problem:
    def __init__(self, wls: list[ResolvedWorkload], indices: list[int], module: dict[str, Any]):
        self.wls, self.indices, self.module = wls, indices, module
        self.results: list[Optional[WorkloadCount]] = [None] * len(wls)
        self.logs: dict[int, TraceLog] = {}
        self.why = ""
        self.long: dict[int, WorkloadCount] = {}  # traced past the op/time budget (fit.count_fitted)

    def trace(self, j: int) -> bool:
        c, log = trace_workload(self.wls[j], self.indices[j], self.module)
        self.results[j] = c
        if log is not None:
            self.logs[j] = log
        return log is not None

    def trace_rest(self, why: str = "") -> list[WorkloadCount]:
        self.why = why
        for j, c in self.long.items():  # already traced past the budget: not again
            self.results[j] = c
        FALLBACKS.append(why)
        for j, r in enumerate(self.results):
            if r is None:
                self.trace(j)
        for r in self.results:
            if r is not None and r.method == "trace":
                r.note = f"not fitted: {why}"
        return self.results  # type: ignore[return-value]


def count_fitted(wls: list[ResolvedWorkload], indices: list[int],
                 module: dict[str, Any]) -> list[WorkloadCount]:
    """Counts for wls (their indices in the problem are `indices`); see the module docstring."""
    pb = _Problem(wls, indices, module)
    n = len(wls)
    names, other = fit_variables(wls)
    if n < MIN_WORKLOADS or other or len(names) > MAX_VARS:
        return pb.trace_rest("few workloads" if n < MIN_WORKLOADS else
                             "a varying non-integer value" if other else "too many varying axes")
    x = np.array([[float(w.axes_and_scalars()[v]) for v in names] for w in wls]).reshape(n, len(names))
    mf = MonomialFit(x)
    size = mf.logx.sum(axis=1)
    median = float(np.median(size))
    roundness = [sum(_twos(v) for v in row) for row in x]
    # structural classes: which variables are 1 and which pairs are equal. torch takes other paths
    # for size-1 dims (a reshape that is a view, not a copy) and equal sizes, and they can change what
    # is counted (a matmul's unit): each class needs a traced or checked workload of its own
    pairs = list(itertools.combinations(range(len(names)), 2))
    cls = [tuple(bool(v == 1) for v in row) + tuple(bool(row[a] == row[b]) for a, b in pairs) for row in x]

    checks = 0
    passed: list[int] = []  # check workloads whose trace matched the prediction
    traced_checks: list[int] = []  # passed checks that further checks should keep away from

    def dist(j: int, traced: list[int]) -> float:
        return min(float(np.abs(mf.logx[j] - mf.logx[t]).sum()) for t in traced)

    first = int(np.argmin(size))
    if not pb.trace(first):
        return _after_failure(pb, first, mf, first)
    traced = [first]
    budget = [MAX_FIT_TRACES - 1]  # traces left for fitting and checking

    def attempt(j: int) -> str:
        """Trace j: "ok"; "long" when it ran past the op or time budget (left to the fit, as a
        bigger workload of a reference that loops per item); "fail" for any other failure."""
        budget[0] -= 1
        if pb.trace(j):
            return "ok"
        if pb.results[j].reason.startswith("TraceTooLong"):
            pb.long[j] = pb.results[j]
            pb.results[j] = None
            return "long"
        return "fail"

    def open_(j: int) -> bool:
        return pb.results[j] is None and j not in pb.long

    if names:
        differs = (x != x[first]).sum(axis=1)
        for j in sorted((j for j in range(n) if j != first), key=lambda j: (-int(differs[j]), float(size[j]))):
            r = attempt(j)
            if r == "ok":
                traced.append(j)
                break
            if r == "fail":
                return pb.trace_rest("a traced workload failed")
            if budget[0] <= 1:
                return pb.trace_rest("traces ran past the budget")
    while True:
        pred = _fit_all(mf, pb, traced)
        if isinstance(pred, str):
            return pb.trace_rest(pred)
        keys, p, ambiguous, summed = pred
        untraced_amb = [j for j in range(n) if ambiguous[j] > 0 and open_(j)]
        if untraced_amb:
            if budget[0] <= 0:
                return pb.trace_rest("still ambiguous")
            # any workload where the fitting monomials disagree tells them apart: the cheapest
            j = min(untraced_amb, key=lambda j: (float(size[j]), -int(ambiguous[j])))
            r = attempt(j)
            if r == "fail":
                return pb.trace_rest("a traced workload failed")
            if r == "ok":
                traced.append(j)
            continue
        untraced = [j for j in range(n) if open_(j)]
        if not untraced and not pb.long:
            return pb.results  # type: ignore[return-value]
        if not untraced or budget[0] <= 0:
            return pb.trace_rest("no workload left to check the fit on")
        # the farthest from the traced ones among the workloads no bigger than the median one: as
        # informative as possible while affordable (a loop per item makes the biggest the slowest),
        # ... after the least round axis values (fewest factors of two): a count with a floor division
        # (capacity = int(T / 16)) is a monomial on multiples of 16 only
        check = max(untraced, key=lambda j: (-roundness[j], size[j] <= median,
                                             dist(j, traced + traced_checks), -float(size[j])))
        covered = {cls[j] for j in traced + passed}
        uncovered = [j for j in untraced if cls[j] not in covered]
        if len(passed) >= CHECKS_REQUIRED:
            check = min(uncovered, key=lambda j: float(size[j]))  # the cheapest of a class not seen
        ref = pb.logs[traced[0]]
        r = attempt(check)
        if r == "fail":
            return pb.trace_rest("a traced workload failed")
        if r == "long":
            continue
        if _matches(pb.logs[check], ref, keys, p[:, check], summed):
            passed.append(check)
            covered.add(cls[check])
            if len(passed) >= CHECKS_REQUIRED and all(cls[j] in covered for j in untraced):
                break
            traced_checks.append(check)
            continue
        # a per-op count that fitted the traced points by chance (an MoE expert's random token count):
        # refit with the check workload among the traced ones, then check on another workload
        checks += 1
        if checks >= MAX_CHECKS:
            return pb.trace_rest("the check workload differs from the prediction")
        traced.append(check)
    for j in untraced + sorted(pb.long):
        if j not in passed:
            pb.results[j] = _predicted(wls[j], indices[j], keys, p[:, j], ref)
            if j in pb.long:
                pb.results[j].note = f"fitted: its own trace ran past the budget ({pb.long[j].reason[:80]})"
    return pb.results  # type: ignore[return-value]


def _after_failure(pb: _Problem, failed: int, mf: MonomialFit, first: int) -> list[WorkloadCount]:
    """A traced workload failed. If the smallest workload failed, trace the one farthest from it: when
    that fails too, the others are reported unsupported with both reasons (a reference that exceeds
    the op or time budget on its smallest and its most different workload does so on the rest; tracing
    16 workloads to 60 000 ops each would take minutes). Otherwise trace every workload."""
    if failed != first:
        return pb.trace_rest("a traced workload failed")
    rest = [j for j in range(len(pb.wls)) if pb.results[j] is None]
    if not rest:
        return pb.results  # type: ignore[return-value]
    far = max(rest, key=lambda j: float(np.abs(mf.logx[j] - mf.logx[first]).sum()))
    if pb.trace(far):
        return pb.trace_rest("a traced workload failed")
    why = (f"not traced: workloads {pb.indices[first]} (the smallest) and {pb.indices[far]} failed: "
           f"{pb.results[first].reason}")[:400]
    for j in rest:
        if pb.results[j] is None:
            declared, out_bytes = declared_bytes(pb.wls[j])  # its own sizes, as a traced failure reports
            pb.results[j] = WorkloadCount(pb.wls[j].uuid, pb.indices[j], CountStatus.UNSUPPORTED,
                                          reason=why, input_bytes_declared=declared, output_bytes=out_bytes)
    FALLBACKS.append("the smallest and the farthest workloads failed")
    return pb.results  # type: ignore[return-value]


class _All:
    """`summed` value meaning: every op summed per family (the traced op sequences differ)."""

    def __contains__(self, k) -> bool:
        return True

    def __bool__(self) -> bool:
        return True


ALL = _All()


def _sig(log: TraceLog, k) -> tuple:
    """An op's family: its name and the reference call path that issued it (one line of a loop body,
    reached through the same calls)."""
    return log.names[k[0]], log.lines[k[0]] if log.lines else (), k[1], k[2]


def _grouped(log: TraceLog, summed) -> dict:
    """A log's quantities with the keys in `summed` (a set of keys, or ALL) replaced by their sum per
    family, kind and key."""
    q = log.quantities
    if not summed:
        return q
    out: dict = {}
    for k, v in q.items():
        if k in summed:
            name, line, kind, key = _sig(log, k)
            k = (f"sum:{name}@{','.join(map(str, line))}", kind, key)
        out[k] = out.get(k, 0.0) + v
    return out


def _fit_all(mf: MonomialFit, pb: _Problem, traced: list[int]):
    """(keys, predictions [key x workload], ambiguity votes per workload, summed keys), or why not (a
    str) when some quantity fits no monomial.

    A quantity that fits no monomial on its own is fitted summed over its family (same op name and
    reference line, kind and key): an MoE reference's per-expert matmul depends on how many tokens the
    (random) routing sent to that expert, while the sum over the experts is tokens * top_k * ... exactly.
    First only the failing ops are summed, then every op of a failing family. When the traced workloads
    run different op sequences (a loop over a var axis: per head, per sequence), every op is summed
    per family at once: a loop body line run B*H times sums to a monomial too."""
    logs = [pb.logs[t] for t in traced]
    ref = logs[0]
    if any(lg.aliased != ref.aliased for lg in logs[1:]):
        return "outputs alias different inputs"
    same = all(lg.names == ref.names and lg.lines == ref.lines for lg in logs[1:])
    summed = set() if same else ALL
    first_failed: list = []
    for attempt in range(3 if same else 1):
        qs = [_grouped(lg, summed) for lg in logs]
        keys = sorted(set().union(*qs), key=repr)
        y = np.array([[q.get(k, 0.0) for q in qs] for k in keys]).reshape(len(keys), len(logs))
        n = mf.m.shape[1]
        p = np.zeros((len(keys), n))
        votes = np.zeros(n, dtype=np.int64)
        memo: dict[tuple, tuple] = {}
        failed = []
        for i in range(len(keys)):
            row = tuple(y[i])
            if row not in memo:
                memo[row] = mf.fit(y[i], traced)
            pred, amb = memo[row]
            if pred is None:
                failed.append(keys[i])
                continue
            p[i] = pred
            votes += amb
        if not failed:
            return keys, p, votes, summed
        if same and attempt == 0:
            first_failed = failed
            summed = set(failed)  # the failing ops, summed per family
        elif same and attempt == 1:
            # every op of a failing family: one that fitted by chance (equal random values) is random
            sigs = {_sig(ref, k) for k in first_failed}
            summed = {k for lg in logs for k in lg.quantities if _sig(lg, k) in sigs}
        else:
            k = failed[0]
            op = k[0] if isinstance(k[0], str) else f"op {k[0]} ({ref.names[k[0]]})"
            return f"no monomial fits {op} {k[1]}:{k[2]}" + ("" if same else " (op sequences differ)")
    raise AssertionError("unreachable")


def _matches(log: TraceLog, ref: TraceLog, keys: list, predicted: np.ndarray, summed) -> bool:
    if log.aliased != ref.aliased:
        return False
    if summed is not ALL and (log.names != ref.names or log.lines != ref.lines):
        return False
    q = _grouped(log, summed)
    if set(q) - set(keys):
        return False
    return all(_close(q.get(k, 0.0), float(v)) for k, v in zip(keys, predicted))


def _predicted(wl: ResolvedWorkload, index: int, keys: list, values: np.ndarray,
               ref: TraceLog) -> WorkloadCount:
    flops: dict[str, float] = {}
    read: dict[str, float] = {}
    written: dict[str, float] = {}
    for (_op, kind, key), v in zip(keys, values):  # op: an index, or "sum:<name>" for summed ones
        d = flops if kind == "f" else read if kind == "r" else written
        d[key] = d.get(key, 0.0) + float(v)
    return finish_count(wl, index, flops, read, written, ref.aliased, ref.ops, 0.0, method="fit")


__all__ = ["count_fitted", "fit_variables", "MonomialFit"]
