"""NVFP4 expert MLP family: out = down(q(silu(gate(q(x))) * up(q(x)))) with FP4 weights.

Serves problems whose reference quantizes the activations and three FP4 weight matrices (E2M1
codes, E4M3 decode scale per 16 elements, fp32 global decode scale) and runs gate/up/down through
scaled_mm GEMMs with a SwiGLU in between. On the H200 the reference's torch._scaled_mm FP4 runs as a dequantizing
bf16 matmul (solforge/evaluate/reference.py); this kernel family instead dequantizes the weights in
registers and feeds mma.sync bf16 tiles. Five launches: amax(x), quantize x, gate+up GEMM with the
SwiGLU epilogue and amax(h), quantize h, down GEMM. Kernel sources: kernels_cuda/nvfp4_moe/.

Offered to the search while kernels_cuda/nvfp4_moe/family.json has `"offered": true` (the
family-wide GPU gate); which problems it serves is what analyze() reads from their structure.
"""

from __future__ import annotations

import ast
from typing import Optional

from ..candidate import Candidate, Launch
from ..problem.definition import Definition
from .base import Family, FamilyError, Spec, const_value, read_source, shape_dims
from .gate import OfferedByFamilyJson

SMEM_LIMIT = 227 * 1024
WS_HEAD = 256  # two amax words, padded

# The reference's float operations that CUDA and CPU torch compute differently. The kernel follows
# the GPU (the evaluation runs there); `reference_as_on_cuda` rewrites the source so that a CPU run
# computes what the GPU computes (on the GPU the rewritten source computes the same as the original):
# - `block_max / self.E2M1FN_MAX` divides by a Python float, which ATen's CUDA kernel
#   (BinaryDivTrueKernel.cu) turns into a multiply by the fp32 reciprocal; the CPU kernel divides.
# - `result * global_scale` with a bf16 result and a 0-dim fp32 CUDA tensor loads the scale as
#   bf16 on CUDA (only CPU 0-dim tensors stay fp32 scalars); for fp32 results a no-op.
_CPU_CUDA = (("block_max / self.E2M1FN_MAX", "block_max * (1.0 / self.E2M1FN_MAX)"),
             ("out[:, :, b] = result * global_scale",
              "out[:, :, b] = result * (global_scale.to(result.dtype) "
              "if result.dtype == torch.bfloat16 else global_scale)"))


def reference_as_on_cuda(code: str) -> str:
    for old, new in _CPU_CUDA:
        if code.count(old) != 1:
            raise ValueError(f"reference has not exactly one '{old}'")
        code = code.replace(old, new)
    return code


def stage_bytes(bm: int, bn: int, nw: int) -> int:
    """Must match Stage<BM, BN, NW>::BYTES in nvfp4_moe.cu."""
    return bm * 128 + nw * (bn * 32 + bn * 4)


def smem_bytes(bm: int, bn: int, st: int, nw: int) -> int:
    return st * stage_bytes(bm, bn, nw)


def workspace_expr(t: str, hid: int, inter: int) -> str:
    """Bytes: amax words, XQ bf16 [T, HID], H fp32 [T, INTER], HQ bf16 [T, INTER]."""
    return f"{WS_HEAD} + 2 * {hid} * ({t}) + 6 * {inter} * ({t})"


class Nvfp4MoeFamily(OfferedByFamilyJson, Family):
    name = "nvfp4_moe"
    description = ("NVFP4 expert MLP with SwiGLU: reference-exact activation quantizers, "
                   "mma.sync bf16 GEMMs with FP4 weights dequantized in registers")
    ops = ("nvfp4_swiglu_mlp", "fp4_dequant_gemm")
    # family.json "offered": the family-wide GPU gate
    source_dir = "nvfp4_moe"

    def analyze(self, defn: Definition) -> Optional[Spec]:
        """An NVFP4 SwiGLU MLP whatever its token dims (x [T, H] or [B, S, H]); where the gate/up
        scaled_mm return bf16 the SwiGLU is rounded to bf16 at every step (EPI_BF16)."""
        if len(defn.outputs) != 1:
            return None
        (out,) = defn.outputs
        mlp = _swiglu_mlp(defn)
        if mlp is None:
            return None
        x, proj, dts = mlp
        (wg, sg, _), (wd, sd, _) = proj["gate"], proj["down"]
        if shape_dims(defn, proj["up"][0]) != shape_dims(defn, wg) or \
                shape_dims(defn, proj["up"][1]) != shape_dims(defn, sg):
            return None
        if dts[0] != dts[1] or dts[0] not in ("float32", "bfloat16") or dts[2] not in ("float32", "bfloat16"):
            return None
        xs, out_s = shape_dims(defn, x), shape_dims(defn, out)
        wgs, sgs, wds, sds = (shape_dims(defn, n) for n in (wg, sg, wd, sd))
        if len(xs) < 2 or len(wgs) != 3 or len(wds) != 3 or out_s != xs:
            return None
        if defn.inputs[x].dtype != "bfloat16" or defn.outputs[out].dtype != "bfloat16":
            return None
        for w, s in (proj["gate"][:2], proj["up"][:2], proj["down"][:2]):
            if defn.inputs[w].dtype != "float4_e2m1fn_x2" or defn.inputs[s].dtype != "float8_e4m3fn":
                return None
        hid, inter = const_value(defn, xs[-1]), const_value(defn, wgs[1])
        if hid is None or inter is None or const_value(defn, wgs[0]) != 1:
            return None
        # weights [1, N, K/2], scales [1, N, K/16]
        if (const_value(defn, wgs[2]), const_value(defn, sgs[2])) != (hid // 2, hid // 16):
            return None
        if (const_value(defn, wds[1]), const_value(defn, wds[2])) != (hid, inter // 2):
            return None
        if (const_value(defn, sds[1]), const_value(defn, sds[2])) != (hid, inter // 16):
            return None
        if hid % 128 or inter % 128:
            return None
        if any(isinstance(d, str) and d not in defn.var_axes and const_value(defn, d) is None
               for d in xs[:-1]):
            return None
        t = "*".join(str(d) for d in xs[:-1])
        fixed = {"HID": hid, "INTER": inter, "EPI_BF16": int(dts[0] == "bfloat16")}
        if dts[2] == "bfloat16":   # only where it is 1, so the fp32-down candidates stay as GPU-checked
            fixed["DOWN_BF16"] = 1
        return Spec(fixed=fixed,
                    info={"t": t, "hid": hid, "inter": inter, "x": x, "out": out,
                          "glob": {k: v[2] for k, v in proj.items()},
                          "w": {k: v[0] for k, v in proj.items()}, "s": {k: v[1] for k, v in proj.items()}})

    # ---- parameters -----------------------------------------------------------------------
    def _space(self, defn: Definition, spec: Spec, workloads: list) -> list[dict]:
        hid, inter = spec.info["hid"], spec.info["inter"]
        # (BM, BN, WM, WN, ST). WM=1: one warp covers all BM rows, so each weight element is
        # dequantized once per CTA instead of WM times (fewer ALU ops per mma, more A smem reads);
        # the 64-row tiles give small T (128-384 tokens) more CTAs.
        # First the fastest on the H200 (032, results_h200.md: F16 + HOIST, 1x8 warps), so the search's
        # first guess is the measured best; then the others.
        gate = [(128, 64, 1, 8, 3), (128, 64, 1, 8, 3), (128, 64, 2, 4, 3), (64, 128, 2, 4, 3)]
        down = [(128, 128, 1, 8, 3), (128, 128, 1, 8, 3), (128, 128, 2, 4, 3), (64, 128, 2, 4, 4)]
        f16 = [1, 0, 0, 1]  # fp16 mma operands: cheaper weight dequantization (see the .cu)
        hoist = [1, 1, 0, 0]  # hoisted main-loop addresses; two points keep the plain loop as a fallback
        # The permuted K order (KNAT=0) first: on the H200 (2026-11-30 second batch, scripts/gpu_checks_s4.sh) both
        # orders passed the pipeline's evaluation on all 16 workloads of 032 and 029 (every g/u sum is
        # exact in fp32: scripts/nvfp4_order_flips.py), and KNAT=0 was 4-8% faster; KNAT=1 stays as a point.
        rows = [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (3, 0)]   # (tile/format index, KNAT)
        out = []
        for i, knat in rows:
            g, d = gate[min(i, len(gate) - 1)], down[min(i, len(down) - 1)]
            p = {"F16": f16[min(i, len(f16) - 1)], "HOIST": hoist[min(i, len(hoist) - 1)], "KNAT": knat}
            p.update({f"G_{k}": v for k, v in zip(("BM", "BN", "WM", "WN", "ST"), g)})
            p.update({f"D_{k}": v for k, v in zip(("BM", "BN", "WM", "WN", "ST"), d)})
            try:
                self._check_params(defn, spec, p)
            except FamilyError:
                continue
            out.append(p)
        return out

    def _check_params(self, defn: Definition, spec: Spec, params: dict) -> None:
        hid, inter = spec.info["hid"], spec.info["inter"]
        for flag in ("F16", "HOIST"):
            if params.get(flag) not in (0, 1):
                raise FamilyError(f"nvfp4_moe param {flag} must be 0 or 1")
        if params.get("KNAT", 0) not in (0, 1):   # absent: 0, the permuted order of the first checks
            raise FamilyError("nvfp4_moe param KNAT must be 0 or 1")
        for pre, n, nw in (("G", inter, 2), ("D", hid, 1)):
            try:
                bm, bn, wm, wn, st = (int(params[f"{pre}_{k}"]) for k in ("BM", "BN", "WM", "WN", "ST"))
            except KeyError as e:
                raise FamilyError(f"nvfp4_moe params missing {e}") from None
            if wm * wn * 32 > 512 or bm % (16 * wm) or bn % (8 * wn) or n % bn or st < 2:
                raise FamilyError(f"{pre}: bad tile BM={bm} BN={bn} WM={wm} WN={wn} ST={st}")
            if smem_bytes(bm, bn, st, nw) > SMEM_LIMIT:
                raise FamilyError(f"{pre}: {smem_bytes(bm, bn, st, nw)} bytes of shared memory")
            mt, nt = bm // wm // 16, bn // wn // 8
            if nw * mt * nt * 4 > 96:  # accumulators per thread; more would spill
                raise FamilyError(f"{pre}: {nw * mt * nt * 4} accumulator registers per thread")

    def _build(self, defn: Definition, spec: Spec, params: dict) -> Candidate:
        t, hid, inter = spec.info["t"], spec.info["hid"], spec.info["inter"]
        x, glob = spec.info["x"], spec.info["glob"]
        w, sc = spec.info["w"], spec.info["s"]
        p = {k: int(v) for k, v in params.items()}
        g_smem = smem_bytes(p["G_BM"], p["G_BN"], p["G_ST"], 2)
        d_smem = smem_bytes(p["D_BM"], p["D_BN"], p["D_ST"], 1)
        launches = [
            Launch(kernel="nvfp4_amax_x", grid=[f"ceil_div(({t}) * {hid}, 2048)"], block=["256"],
                   smem="0", args=[x, "workspace", f"int32:({t}) * {hid}"]),
            Launch(kernel="nvfp4_quant_x", grid=[f"ceil_div(({t}) * {hid // 16}, 256)"], block=["256"],
                   smem="0", args=[x, "workspace", f"int32:{t}"]),
            Launch(kernel="nvfp4_gateup", grid=[f"{inter} // G_BN", f"ceil_div({t}, G_BM)"],
                   block=["G_WM * G_WN * 32"], smem=str(g_smem),
                   args=[w["gate"], sc["gate"], w["up"], sc["up"],
                         f"float32:{glob['gate']}", f"float32:{glob['up']}", "workspace",
                         f"int32:{t}"]),
            Launch(kernel="nvfp4_quant_h", grid=[f"ceil_div(({t}) * {inter // 16}, 256)"], block=["256"],
                   smem="0", args=["workspace", f"int32:{t}"]),
            Launch(kernel="nvfp4_down", grid=[f"{hid} // D_BN", f"ceil_div({t}, D_BM)"],
                   block=["D_WM * D_WN * 32"], smem=str(d_smem),
                   args=[w["down"], sc["down"], f"float32:{glob['down']}", "workspace",
                         spec.info["out"], f"int32:{t}"]),
        ]
        src = read_source("nvfp4_moe", "nvfp4_moe.cu")
        return Candidate(problem=defn.name, language="cuda", sources={"nvfp4_moe.cu": src},
                         params={**spec.fixed, **p}, launches=launches,
                         workspace=workspace_expr(t, hid, inter),
                         # only the amax words need zeros (atomicMax); every launch writes all of
                         # XQ, H and HQ. Zeroing the whole ~140 MB took ~45 us per call at T=3968.
                         workspace_zero=str(WS_HEAD), notes="family=nvfp4_moe")


# ---- the reference's structure --------------------------------------------------------------
# An NVFP4 reference quantizes with data-dependent control flow (`if scale == 0`, masks written
# element-group by element-group) and calls torch._scaled_mm on FP4, which neither make_fx on fake
# tensors nor a CPU run can do; its structure is read from `run`'s data flow instead: which inputs
# reach which scaled_mm operand, which product goes through silu, which feeds the next GEMM. Names
# and statement order do not matter (dependencies are followed to a fixed point); the API calls do
# (scaled_mm, silu, quantize), as ATen op names do in a trace.

def _dataflow(fn: ast.FunctionDef, seeds: dict) -> dict:
    """Variable -> the seeds (parameters, or call results) it is computed from, over every
    assignment in `fn` (order-insensitive: iterated to a fixed point)."""
    deps = {k: set(v) for k, v in seeds.items()}
    assigns = [n for n in ast.walk(fn) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))]
    changed = True
    while changed:
        changed = False
        for a in assigns:
            value = a.value
            if value is None:
                continue
            src = _expr_deps(value, deps)
            targets = a.targets if isinstance(a, ast.Assign) else [a.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name) and not src <= deps.get(n.id, set()):
                        deps[n.id] = deps.get(n.id, set()) | src
                        changed = True
    return deps


def _expr_deps(expr: ast.AST, deps: dict) -> set:
    out = set()
    for n in ast.walk(expr):
        if isinstance(n, ast.Name):
            out |= deps.get(n.id, set())
        if isinstance(n, ast.Call) and id(n) in deps:
            out |= deps[id(n)]
    return out


def _callee(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _swiglu_mlp(defn: Definition):
    """(x, {gate|up|down: (weight, scale, global scalar)}, [out dtype of gate, up, down]) when `run`
    is down(quantize(silu(gate(q)) * up(q))) with q = quantize(x), each GEMM a scaled_mm of an
    input weight with its input scale and a global decode scalar; None otherwise."""
    try:
        mod = ast.parse(defn.reference)
    except SyntaxError:
        return None
    runs = [n for n in mod.body if isinstance(n, ast.FunctionDef) and n.name == "run"]
    if len(runs) != 1:
        return None
    fn = runs[0]
    params = [a.arg for a in fn.args.args]
    if set(params) != set(defn.inputs):
        return None
    mms = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and _callee(n) == "scaled_mm"]
    quant = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and _callee(n) == "quantize"]
    silus = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and _callee(n) == "silu"]
    if len(mms) != 3 or len(quant) != 2 or len(silus) != 1:
        return None
    # every call result is a seed of its own, so the flow says which GEMM feeds which
    seeds = {p: {p} for p in params}
    seeds.update({id(c): {f"mm{i}"} for i, c in enumerate(mms)})
    seeds.update({id(c): {f"q{i}"} for i, c in enumerate(quant)})
    deps = _dataflow(fn, seeds)

    def of(call, kw):
        k = next((k for k in call.keywords if k.arg == kw), None)
        return _expr_deps(k.value, deps) if k is not None else None

    gemms = []
    for i, c in enumerate(mms):
        w, s, gd, a = of(c, "mat_b"), of(c, "scale_b"), of(c, "global_decode_b"), of(c, "mat_a")
        if not all(v is not None for v in (w, s, gd, a)):
            return None
        # by dtype: the FP4 weight, its FP8 scales, the global scalar (a .device read does not count)
        w, s, gd = (sorted(p for p in v if p in params and test(defn.inputs[p]))
                    for v, test in ((w, lambda t: t.dtype == "float4_e2m1fn_x2"),
                                    (s, lambda t: t.dtype == "float8_e4m3fn"), (gd, lambda t: t.is_scalar)))
        if len(w) != 1 or len(s) != 1 or len(gd) != 1:
            return None
        dt = next((k.value for k in c.keywords if k.arg == "output_dtype"), None)
        dt = dt.attr if isinstance(dt, ast.Attribute) else "float32" if dt is None else None
        gemms.append((w[0], s[0], gd[0], a, dt))
    # silu(gate) * up: the silu's argument comes from one GEMM, the product's other side from another
    silu_arg = _expr_deps(silus[0].args[0], deps) if silus[0].args else set()
    gate = [i for i in range(3) if f"mm{i}" in silu_arg]
    prods = [n for n in ast.walk(fn) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult)
             and silus[0] in (n.left, n.right)]
    if len(gate) != 1 or len(prods) != 1:
        return None
    other = prods[0].right if prods[0].left is silus[0] else prods[0].left
    up = [i for i in range(3) if f"mm{i}" in _expr_deps(other, deps) and i not in gate]
    if len(up) != 1:
        return None
    down = 3 - gate[0] - up[0]
    g, u, d = gemms[gate[0]], gemms[up[0]], gemms[down]
    # gate and up read one quantization of x; down reads the quantized product
    xq = {q for q in g[3] | u[3] if q.startswith("q")}
    if g[3] != u[3] or len(xq) != 1 or f"mm{gate[0]}" not in d[3] or f"mm{up[0]}" not in d[3]:
        return None
    xs = [p for p in g[3] & set(params) if not defn.inputs[p].is_scalar]
    if len(xs) != 1 or len({g[0], u[0], d[0], g[1], u[1], d[1], g[2], u[2], d[2], xs[0]}) != 10:
        return None
    proj = {"gate": g[:3], "up": u[:3], "down": d[:3]}
    return xs[0], proj, [g[4], u[4], d[4]]
