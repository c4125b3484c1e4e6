"""RMSNorm in the CuTe DSL (kernels_cute/rmsnorm/rmsnorm_cute.py): the plain form only
(y = x * rsqrt(mean(x^2) + eps) * w in float32, rounded once), one CTA per row.

It reuses the CUDA RMSNorm family's reading of the reference and serves the problems where that
reading finds no residual, no per-head weight and no intermediate rounding. The compile stage turns
it into a cubin on the CPU (solforge.compile.cute_backend); the launcher runs it like CUDA C++.
"""

from __future__ import annotations

from typing import Optional

from ..candidate import Candidate, Launch
from ..problem.definition import Definition
from .base import DTYPE_BYTES, Family, FamilyError, Spec, read_source
from .rmsnorm import RMSNormFamily

MIN_ROW_BYTES = 512  # rows smaller than this are left to the CUDA rmsnorm family
_DSL_TYPE = {"float32": "Float32", "float16": "Float16", "bfloat16": "BFloat16"}


class CuteRMSNormFamily(Family):
    name = "cute_rmsnorm"
    description = ("RMSNorm (plain) as a CuTe DSL kernel: a class with the static config, a @cute.jit "
                   "launcher and a @cute.kernel body; one CTA per row, 16-byte vector copies")
    language = "cute"
    ops = ("rmsnorm",)
    source_dir = "rmsnorm"
    cute = True

    def analyze(self, defn: Definition) -> Optional[Spec]:
        spec = RMSNormFamily().analyze(defn)
        if spec is None:
            return None
        f = spec.fixed
        if f["RESID_MODE"] or f["POST_RESID"] or f["WEIGHT_MODE"] or f["WEIGHT_ROWS"] != 1:
            return None
        if len(spec.info["pairs"]) != 1:
            return None
        if f["HIDDEN"] * DTYPE_BYTES[spec.info["dtype"]] < MIN_ROW_BYTES:
            # one CTA per row: a 256-byte row (021, hidden 128) leaves a single warp per CTA and ran
            # at 0.2x of T_b on 520k rows (optimize_h200x2); the CUDA family packs rows per block
            return None
        return Spec(fixed={"DTYPE": f["DTYPE"], "HIDDEN": f["HIDDEN"]}, info=spec.info)

    def _space(self, defn: Definition, spec: Spec, workloads: list) -> list[dict]:
        hidden = spec.fixed["HIDDEN"]
        esize = DTYPE_BYTES[spec.info["dtype"]]
        out = []
        for vec in (16 // esize, 8 // esize):
            for threads in (128, 256, 64, 512, 32, 1024):
                if hidden % (threads * vec) == 0 and hidden // (threads * vec) <= 8:
                    out.append({"THREADS": threads, "VEC": vec})
        return out

    def _check_params(self, defn: Definition, spec: Spec, params: dict) -> None:
        t, v = params.get("THREADS"), params.get("VEC")
        if not t or not v or t % 32 or t > 1024 or spec.fixed["HIDDEN"] % (t * v):
            raise FamilyError(f"THREADS={t}, VEC={v}: THREADS a multiple of 32 and THREADS*VEC "
                              f"dividing HIDDEN={spec.fixed['HIDDEN']}")
        if v * DTYPE_BYTES[spec.info["dtype"]] > 16:
            raise FamilyError(f"VEC={v} is over 16 bytes")

    def _build(self, defn: Definition, spec: Spec, params: dict) -> Candidate:
        x, w, o = spec.info["pairs"][0]
        t = _DSL_TYPE[spec.info["dtype"]]
        header = (f"import cutlass as _cl\nDTYPES = {{{x!r}: _cl.{t}, {w!r}: _cl.{t}, {o!r}: _cl.{t}}}\n")
        src = header + read_source("rmsnorm", "rmsnorm_cute.py", cute=True)
        rows = spec.info["rows"]
        launch = Launch(kernel="rmsnorm_cute", grid=[rows], block=["THREADS"],
                        args=[x, w, o, f"int32:{rows}", f"float32:{spec.info['eps']}"])
        return Candidate(problem=defn.name, language="cute", sources={"rmsnorm_cute.py": src},
                         params={**spec.fixed, **params}, launches=[launch], notes="family=cute_rmsnorm")
