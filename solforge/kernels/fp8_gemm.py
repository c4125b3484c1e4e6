"""Blockwise-scaled FP8 GEMM family (DeepSeek-style 1x128 activation / 128x128 weight scales).

Serves a problem whose traced reference (solforge/kernels/structure.py) is exactly "quantize (or
take) the operands blockwise to e4m3, dequantize, one fp32 matmul out = x @ w^T, + bias, cast to
bf16". The operand modes: an fp8 input with given scales (mode 0), a bf16 input quantized in the
call with scales computed in the call (1) or given (2); given weight scales come as [N/128, K/128]
or in the W^T layout [K/128, N/128].

The matcher reads only structure, never names or wording:
- the definition's tensors by dtype and shape: one bf16 output [.., N]; x [.., K] (bf16 or fp8,
  the output's leading dims), w [N, K] (bf16 or fp8), optionally bias [N] (bf16), the scales of x
  [.., K/128] and of w (fp32); K and N constant multiples of 128;
- the trace: only quantize / dequantize / layout ops besides one mm; the output is bf16(mm) or
  bf16(mm + bias); mm's left operand comes from x untransposed and its right one from w transposed
  (an odd number of transposes on its data path); one e4m3 cast per in-call quantized operand with
  clamps at +-448, scales computed as clamp(amax / 448, min=1e-12) over 1x128 (x) and 128x128 (w)
  blocks; each operand dequantized by one multiply with its block scales; a given weight scale
  reaching that multiply through an odd number of transposes is in the W^T layout.

Launches (kernels_cuda/fp8_gemm/fp8_gemm.cu): fp8_quant (both bf16 operands in one launch, only
where a mode is not 0) then fp8_gemm (a CTA per BM x BN tile, mma.sync m16n8k32 e4m3, per-128-K
promotion). Tunables: BM, BN, WARPS_M, WARPS_N, STAGES.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple, Optional

from ..candidate import Candidate, Launch
from ..problem.definition import Definition
from .base import Family, FamilyError, Spec, const_value, product_expr, read_source, shape_dims
from .gate import OfferedByFamilyJson
from .structure import In, Ref, Traced, trace

SMEM_LIMIT = 227 * 1024
QUANT_THREADS = 256   # #define QUANT_THREADS in the .cu
PARAMS = ("BM", "BN", "WARPS_M", "WARPS_N", "STAGES")
E4M3_MAX = 448.0
SCALE_FLOOR = 1e-12
FP8 = "float8_e4m3fn"

# what the reference may do besides its one mm: casts, layout, block amax, scale, clamp, bias add
_ALLOWED = {"_to_copy", "view", "_unsafe_view", "reshape", "abs", "amax", "div", "clamp", "clamp_min",
            "unsqueeze", "squeeze", "permute", "t", "transpose", "clone", "mul", "mm", "add", "expand",
            "alias", "detach", "lift_fresh_copy", "copy"}
_LAYOUT = {"view", "_unsafe_view", "reshape", "unsqueeze", "squeeze", "clone", "alias", "detach",
           "expand", "_to_copy", "lift_fresh_copy", "copy"}
_TRANSPOSE = {"permute", "t", "transpose"}


class Match(NamedTuple):
    a_mode: int          # 0 fp8 + given scales, 1 bf16 + computed scales, 2 bf16 + given scales
    w_mode: int
    w_scales_t: bool     # given weight scales in the W^T layout [K/128, N/128]
    names: dict          # role (x, w, bias, sx, sw) -> input name
    m_expr: str          # rows of x (the product of its leading dims)
    k: int
    n: int

    @property
    def label(self) -> str:
        """A structural label for notes: a<mode>w<mode>[t][+bias]."""
        return f"a{self.a_mode}w{self.w_mode}{'t' if self.w_scales_t else ''}{'+bias' if 'bias' in self.names else ''}"


def _roles(defn: Definition):
    """Every assignment of the roles to the tensor inputs that the dtypes and shapes allow."""
    if len(defn.outputs) != 1:
        return
    out = next(iter(defn.outputs))
    o = shape_dims(defn, out)
    if defn.outputs[out].dtype != "bfloat16" or len(o) < 2:
        return
    n = const_value(defn, o[-1])
    tensors = [k for k, v in defn.inputs.items() if not v.is_scalar]
    if n is None or n <= 0 or n % 128 or len(tensors) != len(defn.inputs) or not 2 <= len(tensors) <= 5:
        return
    dt = {k: defn.inputs[k].dtype for k in tensors}
    for x, w in itertools.permutations(tensors, 2):
        xs, ws = shape_dims(defn, x), shape_dims(defn, w)
        if dt[x] not in ("bfloat16", FP8) or dt[w] not in ("bfloat16", FP8):
            continue
        if len(xs) != len(o) or xs[:-1] != o[:-1] or len(ws) != 2:
            continue
        k, kx, nw = const_value(defn, ws[1]), const_value(defn, xs[-1]), const_value(defn, ws[0])
        if None in (k, kx, nw) or k != kx or nw != n or k <= 0 or k % 128:
            continue
        rest = [t for t in tensors if t not in (x, w)]
        names = {"x": x, "w": w}
        for t in rest:
            ts = shape_dims(defn, t)
            cs = [const_value(defn, d) for d in ts]
            if dt[t] == "bfloat16" and cs == [n] and "bias" not in names:
                names["bias"] = t
            elif dt[t] == "float32" and ts[:-1] == xs[:-1] and cs[-1] == k // 128 and "sx" not in names:
                names["sx"] = t
            elif dt[t] == "float32" and cs in ([n // 128, k // 128], [k // 128, n // 128]) and "sw" not in names:
                names["sw"] = t
            else:
                break
        else:
            if (dt[x] == FP8 and "sx" not in names) or (dt[w] == FP8 and "sw" not in names):
                continue
            yield names, n, k, product_expr(xs[:-1])


def _main(g: Traced, ref, numel: int) -> tuple[Optional[object], int]:
    """Follow a tensor's data path back through layout, scale and cast ops to where it starts (an
    input, or an op of another kind): (the start, transposes on the way). At a binary op the path
    goes on through the operand of the full element count (the data, not its block scales)."""
    flips = 0
    while isinstance(ref, Ref):
        op = g.ops[ref.i]
        if op.name in _TRANSPOSE:
            perm = op.args[1] if op.name == "permute" else None
            if op.shape is None or len(op.shape) != 2 or (perm is not None and tuple(perm) != (1, 0)):
                return None, flips
            flips += 1
        elif op.name in ("mul", "div", "clamp", "clamp_min"):
            pass
        elif op.name not in _LAYOUT:
            return ref, flips
        nxt = [r for r in op.args if isinstance(r, (In, Ref)) and _numel(g, r) == numel]
        if len(nxt) != 1:
            return None, flips
        ref = nxt[0]
    return ref, flips


def _numel(g: Traced, ref) -> Optional[int]:
    s = g.shape_of(ref)
    if s is None:
        return None
    out = 1
    for d in s:
        out *= d
    return out


def _scale_flips(g: Traced, mul_i: int, data_numel: int, scale_input: str) -> Optional[int]:
    """Transposes between a given scale input and the dequantizing multiply it feeds."""
    op = g.ops[mul_i]
    other = [r for r in op.args if isinstance(r, (In, Ref)) and _numel(g, r) != data_numel]
    if len(other) != 1:
        return None
    ref, flips = other[0], 0
    while isinstance(ref, Ref):
        o = g.ops[ref.i]
        if o.name in _TRANSPOSE:
            flips += 1
        elif o.name not in _LAYOUT:
            return None
        refs = [r for r in o.args if isinstance(r, (In, Ref))]
        if len(refs) != 1:
            return None
        ref = refs[0]
    return flips if ref == In(scale_input) else None


def _check_trace(defn: Definition, g: Traced, names: dict, n: int, k: int) -> Optional[Match]:
    if set(g.names()) - _ALLOWED or len(g.find("mm")) != 1:
        return None
    used = {r.name for o in g.ops for r in o.refs() if isinstance(r, In)}
    if used != set(names.values()):
        return None  # an input the reference never reads (or one it reads that has no role)
    # the output: bf16(mm) or bf16(mm + bias), possibly viewed back to x's leading dims
    out = next(iter(g.outputs.values()))
    if not isinstance(out, Ref):
        return None
    while g.ops[out.i].name in ("view", "_unsafe_view", "reshape") and isinstance(g.ops[out.i].args[0], Ref):
        out = g.ops[out.i].args[0]
    cast = g.ops[out.i]
    if cast.name != "_to_copy" or cast.dtype != "bfloat16" or not isinstance(cast.args[0], Ref):
        return None
    acc = g.ops[cast.args[0].i]
    mm_i = g.find("mm")[0]
    if acc.name == "add":
        if "bias" not in names or set(acc.args) != {Ref(mm_i), In(names["bias"])}:
            return None
    elif cast.args[0] != Ref(mm_i) or "bias" in names:
        return None
    mm = g.ops[mm_i]
    if mm.dtype != "float32" or len(mm.args) != 2 or mm.shape is None:
        return None
    m_rows = mm.shape[0]
    a_start, a_flips = _main(g, mm.args[0], m_rows * k)
    b_start, b_flips = _main(g, mm.args[1], n * k)
    if a_start != In(names["x"]) or a_flips % 2 or b_start != In(names["w"]) or b_flips % 2 != 1:
        return None
    # one dequantizing multiply per operand (and nothing else multiplies)
    muls = g.find("mul")
    if len(muls) != 2:
        return None
    x_mul = [i for i in muls if names["x"] in g.sources(Ref(i)) and _numel(g, Ref(i)) == m_rows * k]
    w_mul = [i for i in muls if names["w"] in g.sources(Ref(i)) and _numel(g, Ref(i)) == n * k]
    if len(x_mul) != 1 or len(w_mul) != 1 or x_mul == w_mul:
        return None
    # quantization in the call: e4m3 casts, clamps at +-448, scales clamp(amax / 448, 1e-12)
    dt = {r: defn.inputs[names[r]].dtype for r in ("x", "w")}
    quantized = sum(dt[r] == "bfloat16" for r in ("x", "w"))
    if sum(o.name == "_to_copy" and o.dtype == FP8 for o in g.ops) != quantized:
        return None
    computed = [r for r in ("x", "w") if dt[r] == "bfloat16" and ("sx" if r == "x" else "sw") not in names]
    for o in g.ops:
        c = o.constants()
        if o.name == "clamp" and sorted(c) not in ([-E4M3_MAX, E4M3_MAX], [SCALE_FLOOR]):
            return None
        if o.name in ("div", "clamp_min") and c and c not in ([E4M3_MAX], [SCALE_FLOOR]):
            return None
        if o.name == "add" and c:
            return None
    amax_shapes = sorted(g.ops[i].shape for i in g.find("amax") if len(g.ops[i].shape or ()) == 2)
    want = sorted(s for r in computed for s in (
        [(m_rows, k // 128)] if r == "x" else [(n // 128, k // 128)]))
    if len(g.find("amax")) != 2 * len(computed) or amax_shapes != want:
        return None
    # where the weight scales are given: their layout from the transposes on their way to the multiply
    w_scales_t = False
    if "sw" in names:
        flips = _scale_flips(g, w_mul[0], n * k, names["sw"])
        if flips is None:
            return None
        w_scales_t = flips % 2 == 1
        want_shape = [k // 128, n // 128] if w_scales_t else [n // 128, k // 128]
        if [const_value(defn, d) for d in shape_dims(defn, names["sw"])] != want_shape:
            return None
    if "sx" in names and _scale_flips(g, x_mul[0], m_rows * k, names["sx"]) != 0:
        return None
    a_mode = 0 if dt["x"] == FP8 else (2 if "sx" in names else 1)
    w_mode = 0 if dt["w"] == FP8 else (2 if "sw" in names else 1)
    return Match(a_mode, w_mode, w_scales_t, names, "", k, n)


def match_fp8_gemm(defn: Definition) -> Optional[Match]:
    roles = list(_roles(defn))
    if not roles:
        return None
    g = trace(defn)
    if g is None:
        return None
    for names, n, k, m_expr in roles:
        m = _check_trace(defn, g, names, n, k)
        if m is not None:
            return m._replace(m_expr=m_expr)
    return None


def smem_bytes(bm: int, bn: int, stages: int) -> int:
    return stages * ((bm + bn) * 128 + bm * 4)


SMEM_EXPR = "STAGES * ((BM + BN) * 128 + BM * 4)"


class Fp8GemmFamily(OfferedByFamilyJson, Family):
    name = "fp8_gemm"
    description = ("blockwise-scaled FP8 GEMM (1x128 activation, 128x128 weight scales): in-call "
                   "quantization of bf16 operands (amax -> scale -> e4m3 RNE), mma.sync m16n8k32 e4m3 "
                   "with a cp.async ring, per-128-K promotion by sa * sw, + bias, bf16")
    ops = ("fp8_blockwise_gemm",)
    source_dir = "fp8_gemm"   # family.json "offered": the family-wide GPU gate

    def analyze(self, defn: Definition) -> Optional[Spec]:
        m = match_fp8_gemm(defn)
        if m is None:
            return None
        sw_sn, sw_sk = (1, m.n // 128) if m.w_scales_t else (m.k // 128, 1)
        fixed = {"K_DIM": m.k, "N_DIM": m.n, "A_MODE": m.a_mode, "W_MODE": m.w_mode,
                 "SW_SN": sw_sn, "SW_SK": sw_sk, "HAS_BIAS": int("bias" in m.names)}
        return Spec(fixed=fixed, info={"M": m.m_expr, "names": m.names, "out": next(iter(defn.outputs)),
                                       "recipe": m.label})

    def _space(self, defn: Definition, spec: Spec, workloads: list) -> list[dict]:
        # the first H200 check (data/results/kernels_fp8_gemm/fp8_gemm_h200_check_log.txt): 64x64 tiles with 4 warps
        # won on all four problems (1.2-1.3x over the others: more CTAs in flight per SM), so they
        # go first, with ring depths around the checked 4; the checked larger tiles after them
        return [{"BM": 64, "BN": 64, "WARPS_M": 2, "WARPS_N": 2, "STAGES": 4},
                {"BM": 64, "BN": 64, "WARPS_M": 2, "WARPS_N": 2, "STAGES": 3},
                {"BM": 64, "BN": 64, "WARPS_M": 2, "WARPS_N": 2, "STAGES": 6},
                {"BM": 128, "BN": 64, "WARPS_M": 4, "WARPS_N": 2, "STAGES": 4},
                {"BM": 64, "BN": 128, "WARPS_M": 2, "WARPS_N": 4, "STAGES": 4},
                {"BM": 128, "BN": 64, "WARPS_M": 4, "WARPS_N": 2, "STAGES": 3}]

    def _check_params(self, defn: Definition, spec: Spec, params: dict) -> None:
        if set(params) != set(PARAMS):
            raise FamilyError(f"fp8_gemm params: {', '.join(PARAMS)}")
        bm, bn, wm, wn, st = (params[k] for k in PARAMS)
        if bm not in (64, 128) or bn not in (64, 128):
            raise FamilyError(f"BM={bm}, BN={bn}: 64 or 128")
        if wm * wn not in (2, 4, 8) or bm % (16 * wm) or bn % (16 * wn):
            raise FamilyError(f"WARPS_M={wm}, WARPS_N={wn}: 2-8 warps, warp tiles multiples of 16")
        if (bm // wm) * (bn // wn) > 1024:
            # two fp32 accumulator sets, and on sm_90 the e4m3 mma.sync is lowered to f16 HMMA with
            # fragment conversions (F2FP): 32x64 warp tiles spill
            raise FamilyError(f"{params}: warp tile over 1024 elements")
        if not 2 <= st <= 6:
            raise FamilyError(f"STAGES={st}: 2..6")
        if smem_bytes(bm, bn, st) > SMEM_LIMIT:
            raise FamilyError(f"{params}: too much shared memory")

    def _build(self, defn: Definition, spec: Spec, params: dict) -> Candidate:
        src = read_source("fp8_gemm", "fp8_gemm.cu")
        f, names, M = spec.fixed, spec.info["names"], spec.info["M"]
        a_mode, w_mode = f["A_MODE"], f["W_MODE"]
        kb, nb = f["K_DIM"] // 128, f["N_DIM"] // 128
        ws_parts = []
        if w_mode:
            ws_parts.append("N_DIM * K_DIM")
        if a_mode:
            ws_parts.append(f"({M}) * K_DIM")
        if w_mode == 1:
            ws_parts.append(f"{nb * kb * 4}")
        if a_mode == 1:
            ws_parts.append(f"({M}) * {kb * 4}")
        launches = []
        if a_mode or w_mode:
            n_act = f"ceil_div(({M}) * {kb}, {QUANT_THREADS // 32})" if a_mode else "0"
            n_w = str(nb * kb) if w_mode else "0"
            launches.append(Launch(
                kernel="fp8_quant", grid=[f"{n_act} + {n_w}"], block=[str(QUANT_THREADS)],
                args=[names["x"] if a_mode else "workspace", names["w"] if w_mode else "workspace",
                      names["sx"] if a_mode == 2 else "workspace", names["sw"] if w_mode == 2 else "workspace",
                      "workspace", f"int32:{M}", f"int32:{n_act}"]))
        # an unused pointer arg gets the workspace, or x where there is none (the launcher refuses
        # "workspace" for a 0-byte workspace)
        spare = "workspace" if ws_parts else names["x"]
        launches.append(Launch(
            kernel="fp8_gemm", grid=[f"ceil_div({M}, BM) * (N_DIM // BN)"], block=["WARPS_M * WARPS_N * 32"],
            smem=SMEM_EXPR,
            args=[names["x"] if a_mode == 0 else spare, names["w"] if w_mode == 0 else spare,
                  names["sx"] if a_mode != 1 else spare, names["sw"] if w_mode != 1 else spare,
                  names.get("bias", spare), spec.info["out"], spare, f"int32:{M}"]))
        return Candidate(problem=defn.name, language="cuda", sources={"fp8_gemm.cu": src},
                         params={**f, **params}, launches=launches,
                         workspace=" + ".join(ws_parts) if ws_parts else "0", workspace_zero="0",
                         options=[], notes=f"family=fp8_gemm recipe={spec.info['recipe']} {params}")
