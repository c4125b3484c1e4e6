"""NVFP4 expert MLP family: out = down(q(silu(gate(q(x))) * up(q(x)))) with FP4 weights.

Serves SOL-ExecBench Quant problems whose reference quantizes the activations and three FP4
weight matrices with BlockWiseScalerNVFP4 (E2M1 codes, E4M3 decode scale per 16 elements, fp32
global decode scale) and runs gate/up/down through CuBLASRefBlockwiseGemm.scaled_mm with a SwiGLU
in between (Quant/032). On the H200 the reference's torch._scaled_mm FP4 runs as a dequantizing
bf16 matmul (solforge/evaluate/reference.py); this kernel family instead dequantizes the weights in
registers and feeds mma.sync bf16 tiles. Five launches: amax(x), quantize x, gate+up GEMM with the
SwiGLU epilogue and amax(h), quantize h, down GEMM. Kernel sources: kernels_cuda/nvfp4_moe/.

Offered to the search while kernels_cuda/nvfp4_moe/family.json has `"offered": true` (the
family-wide GPU gate); which problems it serves is what analyze() reads from their structure.
"""

from __future__ import annotations

import re
from typing import Optional

from ..candidate import Candidate, Launch
from ..problem.definition import Definition
from .base import Family, FamilyError, Spec, const_value, read_source, reference_code, shape_dims
from .gate import OfferedByFamilyJson

SMEM_LIMIT = 227 * 1024
WS_HEAD = 256  # two amax words, padded

_WEIGHTS = ("gate_weight_fp4", "gate_scale", "up_weight_fp4", "up_scale", "down_weight_fp4", "down_scale")
_GLOBALS = ("gate", "up", "down")  # scalar inputs <proj>_global_decode[_scale]
_SCALED_MM = re.compile(r"\.scaled_mm\(([^()]*)\)", re.S)
_OUT_DTYPE = re.compile(r"output_dtype\s*=\s*torch\.(\w+)")


# The reference's float operations that CUDA and CPU torch compute differently. The kernel follows
# the GPU (the evaluation runs there); `reference_as_on_cuda` rewrites the source so that a CPU run
# computes what the GPU computes (on the GPU the rewritten source computes the same as the original):
# - `block_max / self.E2M1FN_MAX` divides by a Python float, which ATen's CUDA kernel
#   (BinaryDivTrueKernel.cu) turns into a multiply by the fp32 reciprocal; the CPU kernel divides.
# - `result * global_scale` with a bf16 result (Quant/029) and a 0-dim fp32 CUDA tensor loads the
#   scale as bf16 on CUDA (only CPU 0-dim tensors stay fp32 scalars); for fp32 results (032) a no-op.
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
    description = ("NVFP4 expert MLP with SwiGLU (Quant/032): reference-exact activation quantizers, "
                   "mma.sync bf16 GEMMs with FP4 weights dequantized in registers")
    ops = ("nvfp4_swiglu_mlp", "fp4_dequant_gemm")
    # family.json "offered": the family-wide GPU gate
    source_dir = "nvfp4_moe"

    def analyze(self, defn: Definition) -> Optional[Spec]:
        """Quant/032 (hidden_states [T, H]) and Quant/029 (x [B, S, H]): the same pipeline; 029's
        gate/up scaled_mm return bf16, so its SwiGLU is rounded to bf16 at every step (EPI_BF16)."""
        if set(defn.outputs) != {"output"} or not set(_WEIGHTS) <= set(defn.inputs):
            return None
        glob = {}
        for proj in _GLOBALS:
            names = [n for n in (f"{proj}_global_decode", f"{proj}_global_decode_scale") if n in defn.inputs]
            if len(names) != 1 or defn.inputs[names[0]].shape:
                return None
            glob[proj] = names[0]
        rest = set(defn.inputs) - set(_WEIGHTS) - set(glob.values())
        if len(rest) != 1:
            return None
        x = rest.pop()
        code = reference_code(defn)
        body = code[code.find("def run("):]
        if "BlockWiseScalerNVFP4" not in code or "_scaled_mm" not in code or "def run(" not in code:
            return None
        calls = _SCALED_MM.findall(body)
        if len(calls) != 3 or body.count("scaler.quantize(") != 2 or not re.search(r"F\.silu\(\w+\)\s*\*\s*\w+", body):
            return None
        order = [("gate_weight_fp4", "gate_scale"), ("up_weight_fp4", "up_scale"),
                 ("down_weight_fp4", "down_scale")]
        dts = []
        for call, (w, sc) in zip(calls, order):
            if f"mat_b={w}" not in call.replace(" ", "") or f"scale_b={sc}" not in call.replace(" ", ""):
                return None
            m = _OUT_DTYPE.search(call)
            dts.append(m.group(1) if m else "float32")
        if dts[0] != dts[1] or dts[0] not in ("float32", "bfloat16") or dts[2] not in ("float32", "bfloat16"):
            return None
        xs, wg, sg = shape_dims(defn, x), shape_dims(defn, "gate_weight_fp4"), shape_dims(defn, "gate_scale")
        wd, out = shape_dims(defn, "down_weight_fp4"), shape_dims(defn, "output")
        if len(xs) < 2 or len(wg) != 3 or len(wd) != 3 or out != xs:
            return None
        if defn.inputs[x].dtype != "bfloat16" or defn.outputs["output"].dtype != "bfloat16":
            return None
        if defn.inputs["gate_weight_fp4"].dtype != "float4_e2m1fn_x2" or \
                defn.inputs["gate_scale"].dtype != "float8_e4m3fn":
            return None
        hid, inter = const_value(defn, xs[-1]), const_value(defn, wg[1])
        if hid is None or inter is None or const_value(defn, wg[0]) != 1:
            return None
        # weights [1, N, K/2], scales [1, N, K/16]
        if (const_value(defn, wg[2]), const_value(defn, sg[2])) != (hid // 2, hid // 16):
            return None
        if (const_value(defn, wd[1]), const_value(defn, wd[2])) != (hid, inter // 2):
            return None
        if hid % 128 or inter % 128:
            return None
        if any(isinstance(d, str) and d not in defn.var_axes and const_value(defn, d) is None
               for d in xs[:-1]):
            return None
        t = "*".join(str(d) for d in xs[:-1])
        fixed = {"HID": hid, "INTER": inter, "EPI_BF16": int(dts[0] == "bfloat16")}
        if dts[2] == "bfloat16":   # only where it is 1, so 032's candidates stay as GPU-checked
            fixed["DOWN_BF16"] = 1
        return Spec(fixed=fixed,
                    info={"t": t, "hid": hid, "inter": inter, "x": x, "glob": glob})

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
        # The permuted K order (KNAT=0) first: on the H200 (session 4, scripts/gpu_checks_s4.sh) both
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
                   args=["gate_weight_fp4", "gate_scale", "up_weight_fp4", "up_scale",
                         f"float32:{glob['gate']}", f"float32:{glob['up']}", "workspace",
                         f"int32:{t}"]),
            Launch(kernel="nvfp4_quant_h", grid=[f"ceil_div(({t}) * {inter // 16}, 256)"], block=["256"],
                   smem="0", args=["workspace", f"int32:{t}"]),
            Launch(kernel="nvfp4_down", grid=[f"{hid} // D_BN", f"ceil_div({t}, D_BM)"],
                   block=["D_WM * D_WN * 32"], smem=str(d_smem),
                   args=["down_weight_fp4", "down_scale", f"float32:{glob['down']}", "workspace",
                         "output", f"int32:{t}"]),
        ]
        src = read_source("nvfp4_moe", "nvfp4_moe.cu")
        return Candidate(problem=defn.name, language="cuda", sources={"nvfp4_moe.cu": src},
                         params={**spec.fixed, **p}, launches=launches,
                         workspace=workspace_expr(t, hid, inter),
                         # only the amax words need zeros (atomicMax); every launch writes all of
                         # XQ, H and HQ. Zeroing the whole ~140 MB took ~45 us per call at T=3968.
                         workspace_zero=str(WS_HEAD), notes="family=nvfp4_moe")
