"""GEMM family: C = A @ B.T (fp16/bf16, fp32 accumulation) with constant N, K and variable M.

Serves references whose trace (solforge/kernels/structure.py) is exactly one product C = A @ B^T
(`torch.matmul(A, B.T)`, `A @ B.t()`, `F.linear(A, B)`, a transposed local first, ...: one mm whose
right operand is B through one transpose) with A [..., K], B [N, K] and C [..., N] in one dtype, no
casts or other ops; A and B by their role in the mm, not their names. The kernel
(kernels_cuda/gemm/gemm_tn.cu) switches between three tile configurations by M at run time; the
launch grid, dynamic shared memory and workspace expressions mirror that switch, so one candidate
serves every workload of a problem.
"""

from __future__ import annotations

from typing import Optional

from ..candidate import Candidate, Launch
from ..problem.definition import Definition
from .base import (DTYPE_CODE, Family, FamilyError, Spec, const_value, product_expr, read_source,
                   shape_dims)
from .structure import In, Ref, chain, trace

_LAYOUT = {"view", "_unsafe_view", "reshape", "alias", "detach", "clone", "expand", "lift_fresh_copy"}
_TRANSPOSE = {"t", "permute", "transpose"}


def match_bt(defn: Definition) -> Optional[tuple[str, str]]:
    """(A, B) when the traced reference is C = A @ B^T and nothing else, else None."""
    g = trace(defn)
    if g is None or set(g.names()) - _LAYOUT - _TRANSPOSE - {"mm"} or len(g.find("mm")) != 1:
        return None
    (out,) = g.outputs.values()
    mm_i = g.find("mm")[0]
    start, _ = chain(g, out, _LAYOUT)
    if start != Ref(mm_i):
        return None
    a, pa = chain(g, g.ops[mm_i].args[0], _LAYOUT)
    b, pb = chain(g, g.ops[mm_i].args[1], _LAYOUT | _TRANSPOSE)
    if not isinstance(a, In) or not isinstance(b, In) or a == b or pb.count("t") + pb.count("permute") + \
            pb.count("transpose") != 1:
        return None
    t = next(g.ops[i] for i in range(len(g.ops)) if g.ops[i].name in _TRANSPOSE)
    if t.name == "permute" and tuple(t.args[1]) != (1, 0):
        return None
    return a.name, b.name


TIER_KEYS = ("BM", "BN", "BK", "WM", "ST", "SPLIT")
SMEM_LIMIT = 227 * 1024


def _smem(bm: int, bn: int, bk: int, st: int) -> int:
    return st * (bm + bn) * bk * 2


class GemmFamily(Family):
    name = "gemm_tn"
    description = ("C = A @ B.T, constant N and K: mma.sync m16n8k16 with a cp.async pipeline; split-K "
                   "thin tiles for small M, 128x128 grouped tiles for large M, picked by M at run time")
    ops = ("gemm", "matmul_bt", "linear_nobias")
    source_dir = "gemm"

    def analyze(self, defn: Definition) -> Optional[Spec]:
        if len(defn.inputs) != 2 or len(defn.outputs) != 1 or any(s.is_scalar for s in defn.inputs.values()):
            return None
        ab = match_bt(defn)
        if ab is None:
            return None
        a, b = ab
        out = next(iter(defn.outputs))
        dts = {defn.inputs[a].dtype, defn.inputs[b].dtype, defn.outputs[out].dtype}
        if len(dts) != 1 or next(iter(dts)) not in ("float16", "bfloat16"):
            return None
        sa, sb, sc = shape_dims(defn, a), shape_dims(defn, b), shape_dims(defn, out)
        if len(sb) != 2 or len(sa) < 2 or sa[-1] != sb[1] or sc != sa[:-1] + [sb[0]]:
            return None
        n, k = const_value(defn, sb[0]), const_value(defn, sb[1])
        if n is None or k is None or n % 64 or k % 128:
            return None
        m_expr = product_expr(sa[:-1])
        if any(isinstance(d, str) and d not in defn.var_axes and const_value(defn, d) is None
               for d in sa[:-1]):
            return None
        return Spec(fixed={"DTYPE": DTYPE_CODE[next(iter(dts))], "NN": n, "KK": k},
                    info={"a": a, "b": b, "c": out, "m": m_expr, "n": n, "k": k})

    # ---- parameters -----------------------------------------------------------------------
    def _tier_options(self, n: int, k: int) -> tuple[list, list, list]:
        """Per-tier candidate configs (BM, BN, BK, WM, ST, SPLIT) that fit N, K and shared memory."""
        def splits(bn: int, bk: int, want_ctas: int, m_tiles: int) -> list[int]:
            kt = k // bk
            divs = [s for s in range(1, kt + 1) if kt % s == 0]
            ctas = lambda s: (n // bn) * m_tiles * s
            best = next((s for s in divs if ctas(s) >= want_ctas), divs[-1])
            i = divs.index(best)
            return sorted({divs[max(i - 1, 0)], best, divs[min(i + 1, len(divs) - 1)]})

        t0 = []
        for bn in (64, 128):
            if n % bn:
                continue
            for s in splits(bn, 128, 264, 1):
                t0.append((16, bn, 128, 1, 4, s))
        t1 = []
        for bm, bn, wm in ((64, 128, 2), (32, 128, 2), (64, 64, 2)):
            if n % bn:
                continue
            for s in splits(bn, 64, 132, 2):
                t1.append((bm, bn, 64, wm, 4, s))
        t2 = [(128, bn, 64, 2, st, 1) for bn in (128, 64) if n % bn == 0 for st in (3, 4)]
        fit = lambda c: _smem(*c[:3], c[4]) <= SMEM_LIMIT
        return [c for c in t0 if fit(c)], [c for c in t1 if fit(c)], [c for c in t2 if fit(c)]

    def _space(self, defn: Definition, spec: Spec, workloads: list) -> list[dict]:
        n, k = spec.info["n"], spec.info["k"]
        t0, t1, t2 = self._tier_options(n, k)
        base = (t0[len(t0) // 2] if t0 else None, t1[len(t1) // 2] if t1 else None, t2[0])
        return vary_one_tier(base, ((0, t0), (1, t1), (2, t2)), self._params_of)

    @staticmethod
    def _params_of(t0, t1, t2, t0_max: int = 16, t1_max: int = 256) -> dict:
        p = {"T0_MAXM": t0_max, "T1_MAXM": t1_max}
        for i, cfg in enumerate((t0, t1, t2)):
            for key, v in zip(TIER_KEYS, cfg):
                p[f"T{i}_{key}"] = v
        p["T2_SPLIT"] = 1
        return p

    def _check_params(self, defn: Definition, spec: Spec, params: dict) -> None:
        n, k = spec.info["n"], spec.info["k"]
        need = {f"T{i}_{key}" for i in range(3) for key in TIER_KEYS} | {"T0_MAXM", "T1_MAXM"}
        missing = need - set(params)
        if missing:
            raise FamilyError(f"gemm params missing: {sorted(missing)}")
        for i in range(3):
            bm, bn, bk, wm, st, s = (params[f"T{i}_{key}"] for key in TIER_KEYS)
            wn = 4 // wm if wm in (1, 2, 4) else 0
            if not wn or bm % (wm * 16) or bn % (wn * 16) or bk not in (64, 128) or st < 2:
                raise FamilyError(f"tier {i}: bad tile BM={bm} BN={bn} BK={bk} WM={wm} ST={st}")
            if n % bn or k % (bk * s) or s < 1 or (i == 2 and s != 1):
                raise FamilyError(f"tier {i}: BN={bn}, BK*SPLIT={bk * s} must divide N={n}, K={k}")
            if _smem(bm, bn, bk, st) > SMEM_LIMIT:
                raise FamilyError(f"tier {i}: {_smem(bm, bn, bk, st)} bytes of shared memory")
        if not 0 < params["T0_MAXM"] <= params["T1_MAXM"]:
            raise FamilyError("need 0 < T0_MAXM <= T1_MAXM")

    def _build(self, defn: Definition, spec: Spec, params: dict) -> Candidate:
        m, n = spec.info["m"], spec.info["n"]
        p = dict(params)
        sel, grid = tier_select_and_grid(m, n)
        smem = " + ".join(f"{s} * {_smem(p[f'T{i}_BM'], p[f'T{i}_BN'], p[f'T{i}_BK'], p[f'T{i}_ST'])}"
                          for i, s in enumerate(sel))
        tickets = max(4, *(-(-p[f"T{i}_MAXM"] // p[f"T{i}_BM"]) * (n // p[f"T{i}_BN"])
                          for i in (0, 1) if p[f"T{i}_SPLIT"] > 1)) if (
            p["T0_SPLIT"] > 1 or p["T1_SPLIT"] > 1) else 4
        tickets = -(-tickets // 4) * 4
        ws = (f"4 * TICKETS + 4 * {n} * ({m}) * ({sel[0]} * (T0_SPLIT > 1) * T0_SPLIT"
              f" + {sel[1]} * (T1_SPLIT > 1) * T1_SPLIT)")
        src = read_source("gemm", "gemm_tn.cu")
        launch = Launch(kernel="gemm_tn_kernel", grid=[grid], block=["128"], smem=smem,
                        args=[spec.info["a"], spec.info["b"], spec.info["c"], "workspace",
                              f"int32:{m}"])
        return Candidate(problem=defn.name, language="cuda", sources={"gemm_tn.cu": src},
                         params={**spec.fixed, "TICKETS": tickets, **params}, launches=[launch],
                         workspace=ws, notes="family=gemm_tn")

    def combine(self, tier_params: list[dict]) -> dict:
        """One params dict taking tier i's settings from tier_params[i] (the per-tier winners)."""
        out = dict(tier_params[0])
        for i, src in enumerate(tier_params):
            for key in TIER_KEYS:
                out[f"T{i}_{key}"] = src[f"T{i}_{key}"]
        return out


def vary_one_tier(base: tuple, order, params_of) -> list[dict]:
    """Param sets varying one M-tier at a time around `base`, tiers in the given order, no repeats.

    The tiers serve disjoint M ranges, so a benchmark can take each tier's winner from these and
    combine them into one candidate."""
    out, seen = [], set()
    for which, opts in order:
        for c in opts:
            tiers = list(base)
            tiers[which] = c
            key = tuple(tiers)
            if key not in seen:
                seen.add(key)
                out.append(params_of(*tiers))
    return out


def tier_select_and_grid(m: str, n: str) -> tuple[list[str], str]:
    """Launch expressions that pick an M-tier at run time: one selector term per tier (exactly one is
    1 for a given M) and the grid they imply (the kernel makes the same choice from M)."""
    sel = [f"(({m}) <= T0_MAXM)", f"(({m}) > T0_MAXM) * (({m}) <= T1_MAXM)", f"(({m}) > T1_MAXM)"]
    grid = " + ".join(f"{s} * ceil_div({m}, T{i}_BM) * ({n} // T{i}_BN) * T{i}_SPLIT"
                      for i, s in enumerate(sel))
    return sel, grid
