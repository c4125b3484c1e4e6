"""Pointwise family: any reference that is a chain of elementwise ops, fused into one kernel.

Serves a problem whose reference, traced to ATen ops (solforge/kernels/pointwise_trace.py), is
only elementwise math (add, mul, sub, div, neg, sin, cos, exp, tanh, sigmoid, pow by a constant,
dtype casts, ...) over float32/float16/bfloat16 tensors, where every input either has the output's
shape or broadcasts to it (a scalar, a [B, S, 1] mask, ...), and float scalar inputs. PyTorch eager
runs one kernel per op with a round trip through memory each; this kernel reads each input once
and writes each output once, with the reference's rounding (see pointwise_trace).

Kept behind the hand-written families (activation, rmsnorm) that serve the same problems, and
only for problems no earlier family claims: the registry lists it last.
"""

from __future__ import annotations

import re
from typing import Optional

from ..candidate import Candidate, Launch
from ..problem.definition import Definition
from .gate import family_offered
from .base import Family, FamilyError, Spec, read_source, reference_code
from .pointwise_trace import INPUT_TYPES, PointwiseGraph, trace_pointwise

# Cheap screen before tracing: calls that are never elementwise.
_NOT_POINTWISE = re.compile(r"\b(?:matmul|linear|einsum|bmm|mm|conv\w*|softmax|\w*norm\w*|mean|"
                            r"cumsum|topk|sort|argsort|gather|scatter\w*|index\w*|cat|stack|"
                            r"chunk|split|where|masked_fill|arange|zeros|ones|empty|full|"
                            r"\w*attention\w*|repeat\w*|roll|flip|pad|item|tolist|nonzero)\s*\(|"
                            r"@|\bfor\b|\[")
_ELEM_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


class PointwiseFamily(Family):
    name = "pointwise"
    description = ("any chain of elementwise ops (with broadcast inputs and float scalars) traced "
                   "from the reference and fused into one kernel; vector loads, the reference's "
                   "rounding, no FMA contraction")
    ops = ("elementwise_chain",)
    source_dir = "pointwise"

    @property
    def offered(self) -> bool:
        return family_offered(self.source_dir)

    def analyze(self, defn: Definition) -> Optional[Spec]:
        body = "\n".join(l for l in reference_code(defn).splitlines()
                         if not re.match(r"\s*(import|from|def|@)", l))
        if _NOT_POINTWISE.search(body.lower()):
            return None
        g = trace_pointwise(defn)
        if g is None:
            return None
        return Spec(fixed={}, info={"graph": g})

    def _space(self, defn: Definition, spec: Spec, workloads: list) -> list[dict]:
        g: PointwiseGraph = spec.info["graph"]
        widest = max(_ELEM_BYTES.get(m.dtype, 1) for m in g.inputs if m.direct)
        best_vec = 16 // widest
        out = []
        for vec in (best_vec, best_vec * 2, max(1, best_vec // 2)):
            for block in (256, 128, 512):
                for unroll in (2, 1, 4):
                    p = {"VEC": vec, "BLOCK": block, "UNROLL": unroll}
                    if p not in out:
                        out.append(p)
        return out

    def _check_params(self, defn: Definition, spec: Spec, params: dict) -> None:
        if {"VEC", "BLOCK", "UNROLL"} - set(params):
            raise FamilyError("pointwise params: VEC, BLOCK, UNROLL")
        v, b, u = params["VEC"], params["BLOCK"], params["UNROLL"]
        if v not in (1, 2, 4, 8, 16) or not 32 <= b <= 1024 or b % 32 or not 1 <= u <= 8:
            raise FamilyError("VEC in 1, 2, 4, 8, 16; BLOCK a multiple of 32 up to 1024; UNROLL 1..8")

    def _build(self, defn: Definition, spec: Spec, params: dict) -> Candidate:
        g: PointwiseGraph = spec.info["graph"]
        src = (read_source("pointwise", "pointwise.cuh") + "\n" + g.cuda_eval() + "\n"
               + (g.cuda_post() + "\n" if g.reductions else "") + kernel_source(g))
        args = ([m.name for m in g.inputs] + [o[0] for o in g.outputs]
                + (["workspace"] if g.reductions else []) + [f"int64:{g.numel}"]
                + [f"int64:{m.div}" for m in g.inputs if not m.direct]
                + [f"int64:{m.mod}" for m in g.inputs if not m.direct]
                + [f"float32:{s}" for s in g.scalars])
        launches = [Launch(kernel="pointwise_kernel",
                           grid=[f"max(1, ceil_div({g.numel}, VEC * BLOCK * UNROLL))"], block=["BLOCK"],
                           args=args)]
        if g.reductions:
            launches.append(Launch(kernel="pointwise_post_kernel", grid=[f"ceil_div({g.kept}, BLOCK)"],
                                   block=["BLOCK"],
                                   args=[m.name for m in g.inputs] + [o[0] for o in g.reduced_outputs]
                                   + ["workspace"] + [f"float32:{s}" for s in g.scalars]))
        return Candidate(problem=defn.name, language="cuda", sources={"pointwise.cu": src},
                         params=dict(params), launches=launches, options=["--fmad=false"],
                         workspace=str(4 * len(g.reductions) * g.kept),
                         notes=f"family=pointwise ops={','.join(o.split('.')[1] for o in g.ops)}")


def kernel_source(g: PointwiseGraph) -> str:
    """pointwise_kernel: per thread UNROLL steps of VEC consecutive elements; full vectors use
    wide accesses for the inputs and outputs of the output's shape, the tail goes element by
    element. With sums: each block adds its elements into shared-memory slots (warp shuffles
    first for a full sum), then into the float workspace; pointwise_post_kernel turns the
    workspace into the reduced outputs."""
    T = lambda dt: INPUT_TYPES[dt]
    bc = [i for i, m in enumerate(g.inputs) if not m.direct]
    nin, nout, ns, nr = len(g.inputs), len(g.outputs), len(g.scalars), len(g.reductions)
    params = ([f"const {T(m.dtype)}* __restrict__ in{i}" for i, m in enumerate(g.inputs)]
              + [f"{T(dt)}* __restrict__ out{i}" for i, (_, _, dt) in enumerate(g.outputs)]
              + (["float* __restrict__ ws"] if nr else [])
              + ["long n"] + [f"long div{i}" for i in bc] + [f"long mod{i}" for i in bc]
              + [f"float s{i}" for i in range(ns)])
    call = lambda j: ("pw_eval(" + ", ".join([f"x{i}[u][{j}]" for i in range(nin)]
                                             + [f"s{i}" for i in range(ns)]
                                             + [f"y{i}[{j}]" for i in range(nout)]
                                             + [f"rv{i}" for i in range(nr)]) + ");")
    call_tail = ("pw_eval(" + ", ".join([f"t{i}" for i in range(nin)] + [f"s{i}" for i in range(ns)]
                                        + [f"r{i}" for i in range(nout)]
                                        + [f"rv{i}" for i in range(nr)]) + ");")
    kept = g.kept
    if kept == 1:
        add = lambda idx: [f"acc{i} += rv{i};" for i in range(nr)]
    else:
        add = lambda idx: [f"atomicAdd(&red_s[{i}][({idx}) % {kept}], rv{i});" for i in range(nr)]
    L = ["extern \"C\" __global__ void __launch_bounds__(BLOCK)",
         "pointwise_kernel(" + ", ".join(params) + ") {",
         "    const long first = ((long)blockIdx.x * BLOCK * UNROLL + threadIdx.x) * VEC;",
         f"    float x{'[UNROLL][VEC], x'.join(str(i) for i in range(nin))}[UNROLL][VEC];"]
    if nr:
        L.append(f"    float rv{', rv'.join(str(i) for i in range(nr))};")
        if kept == 1:
            L.append(f"    float acc{' = 0.0f, acc'.join(str(i) for i in range(nr))} = 0.0f;")
        L += [f"    __shared__ float red_s[{nr}][{kept}];",
              f"    for (int k = threadIdx.x; k < {nr * kept}; k += BLOCK) (&red_s[0][0])[k] = 0.0f;",
              "    __syncthreads();"]
    L += ["#pragma unroll",
          "    for (int u = 0; u < UNROLL; ++u) {",
          "        const long e = first + (long)u * BLOCK * VEC;",
          "        if (e + VEC <= n) {"]
    for i, m in enumerate(g.inputs):
        if m.direct:
            L.append(f"            load_f<{T(m.dtype)}, VEC>(in{i} + e, x{i}[u]);")
        else:
            L.append("#pragma unroll")
            L.append(f"            for (int j = 0; j < VEC; ++j) x{i}[u][j] = "
                     f"to_float(ldg1(in{i} + ((e + j) / div{i}) % mod{i}));")
    L += ["        }", "    }", "#pragma unroll", "    for (int u = 0; u < UNROLL; ++u) {",
          "        const long e = first + (long)u * BLOCK * VEC;",
          "        if (e + VEC <= n) {"]
    if nout:
        L.append(f"            float y{'[VEC], y'.join(str(i) for i in range(nout))}[VEC];")
    L += ["#pragma unroll", "            for (int j = 0; j < VEC; ++j) {", "                " + call("j")]
    L += ["                " + a for a in add("e + j")]
    L.append("            }")
    for i, (_, _, dt) in enumerate(g.outputs):
        L.append(f"            store_f<{T(dt)}, VEC>(out{i} + e, y{i});")
    L += ["        } else {", "            for (long k = e; k < n; ++k) {"]
    for i, m in enumerate(g.inputs):
        idx = "k" if m.direct else f"(k / div{i}) % mod{i}"
        L.append(f"                const float t{i} = to_float(in{i}[{idx}]);")
    if nout:
        L.append(f"                float r{', r'.join(str(i) for i in range(nout))};")
    L.append("                " + call_tail)
    L += ["                " + a for a in add("k")]
    for i, (_, _, dt) in enumerate(g.outputs):
        L.append(f"                out{i}[k] = from_float<{T(dt)}>(r{i});")
    L += ["            }", "        }", "    }"]
    if nr:
        if kept == 1:
            for i in range(nr):
                L += ["#pragma unroll",
                      f"    for (int o = 16; o > 0; o >>= 1) acc{i} += __shfl_xor_sync(0xffffffffu, acc{i}, o);",
                      f"    if ((threadIdx.x & 31) == 0) atomicAdd(&red_s[{i}][0], acc{i});"]
        L += ["    __syncthreads();",
              f"    for (int k = threadIdx.x; k < {nr * kept}; k += BLOCK) atomicAdd(ws + k, (&red_s[0][0])[k]);"]
    L.append("}")
    if nr:
        pp = ([f"const {T(m.dtype)}* __restrict__ in{i}" for i, m in enumerate(g.inputs)]
              + [f"{T(dt)}* __restrict__ out{i}" for i, (_, _, dt) in enumerate(g.reduced_outputs)]
              + ["const float* __restrict__ ws"] + [f"float s{i}" for i in range(ns)])
        L += ["", "extern \"C\" __global__ void __launch_bounds__(BLOCK)",
              "pointwise_post_kernel(" + ", ".join(pp) + ") {",
              "    const int k = blockIdx.x * BLOCK + threadIdx.x;",
              f"    if (k >= {kept}) return;"]
        for i, m in enumerate(g.inputs):  # only scalar-valued inputs are read after the sums
            L.append(f"    const float t{i} = {'to_float(in%d[0])' % i if m.mod == '1' else '0.0f'};")
        L.append(f"    float z{', z'.join(str(i) for i in range(len(g.reduced_outputs)))};")
        L.append("    pw_post(" + ", ".join([f"t{i}" for i in range(nin)] + [f"s{i}" for i in range(ns)]
                                           + [f"ws[{i * kept} + k]" for i in range(nr)]
                                           + [f"z{i}" for i in range(len(g.reduced_outputs))]) + ");")
        for i, (_, _, dt) in enumerate(g.reduced_outputs):
            L.append(f"    out{i}[k] = from_float<{T(dt)}>(z{i});")
        L.append("}")
    return "\n".join(L) + "\n"
