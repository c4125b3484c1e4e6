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

import math
from typing import Optional

from ..candidate import Candidate, Launch
from ..problem.definition import Definition
from .gate import family_offered
from .base import Family, FamilyError, Spec, read_source
from .pointwise_trace import INPUT_TYPES, PointwiseGraph, trace_pointwise

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
        g = trace_pointwise(defn)
        if g is None:
            return None
        return Spec(fixed={}, info={"graph": g})

    def _space(self, defn: Definition, spec: Spec, workloads: list) -> list[dict]:
        g: PointwiseGraph = spec.info["graph"]
        widest = max(_ELEM_BYTES.get(m.dtype, 1) for m in g.inputs if m.direct)
        best_vec = 16 // widest
        out = []
        # order from the H200 k6 check (kernels_cuda/pointwise/results_h200.md): one vector per
        # thread per pass won everywhere (090: 0.95x vs 0.88x of T_b with 2; 084 even), and the
        # sum kernels (056, 061) liked 32-byte vectors (two 16-byte loads per input)
        vecs = (best_vec * 2, best_vec, max(1, best_vec // 2)) if g.reductions else \
            (best_vec, best_vec * 2, max(1, best_vec // 2))
        for vec in vecs:
            for block in (256, 128, 512):
                for unroll in (1, 2, 4):
                    p = {"VEC": vec, "BLOCK": block, "UNROLL": unroll}
                    if p not in out:
                        out.append(p)
        if g.reductions:  # PF (next pass prefetched to L2, the default) and without, after
            out += [{**p, "PF": 0} for p in out]
            if g.kept > 1:
                nr = len(g.reductions)
                out = [p for p in out
                       if 4 * (p["BLOCK"] * p["VEC"] + nr * g.kept) <= _SMEM_LIMIT]
        return out

    def _check_params(self, defn: Definition, spec: Spec, params: dict) -> None:
        if {"VEC", "BLOCK", "UNROLL"} - set(params):
            raise FamilyError("pointwise params: VEC, BLOCK, UNROLL")
        v, b, u = params["VEC"], params["BLOCK"], params["UNROLL"]
        if v not in (1, 2, 4, 8, 16) or not 32 <= b <= 1024 or b % 32 or not 1 <= u <= 8:
            raise FamilyError("VEC in 1, 2, 4, 8, 16; BLOCK a multiple of 32 up to 1024; UNROLL 1..8")
        g: PointwiseGraph = spec.info["graph"]
        if g.reductions and g.kept > 1 and 4 * (b * v + len(g.reductions) * g.kept) > _SMEM_LIMIT:
            raise FamilyError(f"BLOCK={b} x VEC={v}: the slot sums need {4 * b * v} bytes of shared "
                              f"memory plus {4 * len(g.reductions) * g.kept} (limit {_SMEM_LIMIT})")
        if params.get("PF", 1) not in (0, 1, True, False):
            raise FamilyError(f"PF={params['PF']!r} must be 0 or 1 (absent: 1)")
        if params.get("FIN", 1) not in (0, 1, True, False):
            raise FamilyError(f"FIN={params['FIN']!r} must be 0 or 1 (absent: 1)")

    def _build(self, defn: Definition, spec: Spec, params: dict) -> Candidate:
        g: PointwiseGraph = spec.info["graph"]
        hoisted = hoisted_nodes(g)
        # FIN (default 1): a reduction plan is one kernel whose last block finishes the sums
        fin = bool(g.reductions) and bool(params.get("FIN", 1))
        src = (read_source("pointwise", "pointwise.cuh") + "\n"
               + (g.cuda_pre(hoisted) + "\n" if hoisted else "") + g.cuda_eval(hoisted) + "\n"
               + (g.cuda_post() + "\n" if g.reductions else "") + kernel_source(g, fin))
        args = ([m.name for m in g.inputs] + [o[0] for o in g.outputs]
                + ([o[0] for o in g.reduced_outputs] if fin else [])
                + (["workspace"] if g.reductions else []) + [f"int64:{g.numel}"]
                + [f"int64:{m.div}" for m in g.inputs if not m.direct]
                + [f"int64:{m.mod}" for m in g.inputs if not m.direct]
                + [f"float32:{s}" for s in g.scalars])
        if g.reductions:
            grid = reduction_grid(g, params)[0]
        else:
            steps = f"max(1, min(UNROLL, ceil_div({g.numel}, VEC * {_GRID_THREADS})))"
            grid = f"max(1, ceil_div({g.numel}, VEC * BLOCK * {steps}))"
            args.append(f"int32:{steps}")
        launches = [Launch(kernel="pointwise_kernel", grid=[grid], block=["BLOCK"], args=args)]
        ws, ws_zero = 4 * len(g.reductions) * g.kept, None
        if fin:
            # one kernel: its last block writes the reduced outputs and leaves the workspace (the
            # sums + a finished-blocks counter) zeroed for the next call, so the harness need not
            # memset it and the plan is one direct launch (no graph, no gaps between operations;
            # with FIN=0 the evaluator measured >= 8 us a call however small: memset + 2 kernels)
            ws, ws_zero = ws + 4, "0"
        elif g.reductions:
            launches.append(Launch(kernel="pointwise_post_kernel", grid=[f"ceil_div({g.kept}, BLOCK)"],
                                   block=["BLOCK"],
                                   args=[m.name for m in g.inputs] + [o[0] for o in g.reduced_outputs]
                                   + ["workspace"] + [f"float32:{s}" for s in g.scalars]))
        return Candidate(problem=defn.name, language="cuda", sources={"pointwise.cu": src},
                         params=dict(params), launches=launches, options=["--fmad=false"],
                         workspace=str(ws), workspace_zero=ws_zero,
                         notes=f"family=pointwise ops={','.join(o.split('.')[1] for o in g.ops)}")


# Threads the reduction kernels' grid is capped at: one full wave on an H200 (132 SMs x 2048);
# each thread then loops over the rest, adding into registers, so a block's sums reach the
# workspace once instead of once per BLOCK * UNROLL * VEC elements.
_GRID_THREADS = 132 * 2048
_SMEM_LIMIT = 46 * 1024  # static shared memory of the slot sums (48 KB less the reserved 1 KB and slack)


def hoisted_nodes(g: PointwiseGraph) -> list[str]:
    """Nodes computed once per thread (pw_pre), not per element: those that depend only on 0-d
    inputs and scalars (061: tanh of the gate; inlined per element it was not merged by the
    compiler: 16 tanh per thread)."""
    return g.invariant_nodes({i for i, m in enumerate(g.inputs) if not m.direct and m.mod == "1"})


def reduction_grid(g: PointwiseGraph, params: dict) -> tuple[str, int]:
    """(grid expression, m) for the reduction kernel: a multiple m of blocks such that the grid's
    stride (blocks x BLOCK x UNROLL x VEC elements) is a multiple of `kept`, so that every element
    a thread visits in its grid-stride loop adds into the same reduction slots (kept in registers)."""
    chunk = params["VEC"] * params["BLOCK"] * params["UNROLL"]
    m = g.kept // math.gcd(g.kept, chunk)
    cap = max(1, _GRID_THREADS // params["BLOCK"] // m)
    return f"{m} * max(1, min(ceil_div(ceil_div({g.numel}, {chunk}), {m}), {cap}))", m


def kernel_source(g: PointwiseGraph, fin: bool = False) -> str:
    """pointwise_kernel: per thread UNROLL steps of VEC consecutive elements, all loads of a step
    issued before any math; full vectors use wide accesses for the inputs and outputs of the
    output's shape, the last partial vector element by element (loads still first). A broadcast input is read at
    in[(i / div) % mod]: one 32-bit division per vector (not two 64-bit ones per element), then
    stepped along the vector; an input read at one place (a 0-d tensor) is loaded once.
    With sums: a grid-stride loop (reduction_grid) keeps each element's contribution in a
    register per (step, lane) slot; at the end each thread adds them into shared-memory slots
    (warp shuffles first for a full sum), each block into the float workspace, and
    pointwise_post_kernel turns the workspace into the reduced outputs. With fin (FIN=1) there is
    no second kernel: each block, after its adds, counts itself done on a counter after the sums;
    the last one reads the sums with atomicExch(.., 0) (L2, so it sees every block's adds, and the
    slot is zero again for the next call), writes the reduced outputs and resets the counter."""
    T = lambda dt: INPUT_TYPES[dt]
    bc = [i for i, m in enumerate(g.inputs) if not m.direct]
    const_in = {i for i in bc if g.inputs[i].mod == "1"}   # (i / div) % 1 == 0: one element
    nin, nout, ns, nr = len(g.inputs), len(g.outputs), len(g.scalars), len(g.reductions)
    kept = g.kept
    params = ([f"const {T(m.dtype)}* __restrict__ in{i}" for i, m in enumerate(g.inputs)]
              + [f"{T(dt)}* __restrict__ out{i}" for i, (_, _, dt) in enumerate(g.outputs)]
              + ([f"{T(dt)}* __restrict__ rout{i}" for i, (_, _, dt) in enumerate(g.reduced_outputs)]
                 if fin else [])
              + (["float* __restrict__ ws"] if nr else [])
              + ["long n"] + [f"long div{i}" for i in bc] + [f"long mod{i}" for i in bc]
              + [f"float s{i}" for i in range(ns)] + ([] if nr else ["int steps"]))
    hoisted = hoisted_nodes(g)
    call = lambda j: ("pw_eval(" + ", ".join([f"x{i}[u][{j}]" for i in range(nin)]
                                             + [f"s{i}" for i in range(ns)]
                                             + [f"h_{h}" for h in hoisted]
                                             + [f"y{i}[{j}]" for i in range(nout)]
                                             + [f"rv{i}" for i in range(nr)]) + ");")
    L = (["#ifndef PF", "#define PF 1", "#endif"] if nr else []) + [
         "extern \"C\" __global__ void __launch_bounds__(BLOCK)",
         "pointwise_kernel(" + ", ".join(params) + ") {",
         "    constexpr long CHUNK = (long)BLOCK * UNROLL * VEC;",
         f"    float x{'[UNROLL][VEC], x'.join(str(i) for i in range(nin))}[UNROLL][VEC];"]
    for i in sorted(const_in):
        L.append(f"    const float c{i} = to_float(ldg1(in{i}));")
    if hoisted:
        L.append(f"    float h_{', h_'.join(hoisted)};")
        L.append("    pw_pre(" + ", ".join([f"c{i}" if i in const_in else "0.0f" for i in range(nin)]
                                          + [f"s{i}" for i in range(ns)]
                                          + [f"h_{h}" for h in hoisted]) + ");")
    if nr:
        L.append(f"    float rv{', rv'.join(str(i) for i in range(nr))};")
        if kept == 1:
            L.append(f"    float acc{' = 0.0f, acc'.join(str(i) for i in range(nr))} = 0.0f;")
        else:
            L += [f"    float acc{i}[UNROLL][VEC];" for i in range(nr)]
            L += ["#pragma unroll", "    for (int u = 0; u < UNROLL; ++u)", "#pragma unroll",
                  "        for (int j = 0; j < VEC; ++j) {"]
            L += [f"            acc{i}[u][j] = 0.0f;" for i in range(nr)]
            L += ["        }",
                  "    // every pass of the loop below must land on the same slots",
                  f"    if (((long)gridDim.x * CHUNK) % {kept} != 0) __trap();"]
        L += [f"    __shared__ float red_s[{nr}][{kept}];",
              f"    for (int k = threadIdx.x; k < {nr * kept}; k += BLOCK) (&red_s[0][0])[k] = 0.0f;",
              "    __syncthreads();",
              "    const long stride = (long)gridDim.x * CHUNK;"]
        L.append("    for (long base = (long)blockIdx.x * CHUNK; base < n; base += stride) {")
    else:
        # STEPS (<= UNROLL, from the launch): vectors per thread; 1 while the call is smaller than
        # one full wave, so that a small call spreads over more threads (each thread's chain of
        # dependent math is short) and a large one keeps UNROLL vectors in flight per thread
        L.append("    {")
        L.append("        const long base = (long)blockIdx.x * BLOCK * VEC * steps;")
    live = "u < steps && " if not nr else ""
    if nr:
        # the next pass's vectors of the full-shape inputs go to L2 now (prefetch: no registers),
        # so its loads wait on L2, not DRAM: the loop's in-flight bytes are no longer capped by
        # the registers that hold this pass's values
        L += ["#if PF", "#pragma unroll", "    for (int u = 0; u < UNROLL; ++u) {",
              "        const long en = base + stride + (long)(u * BLOCK + threadIdx.x) * VEC;",
              "        if (en + VEC <= n) {"]
        for i, m in enumerate(g.inputs):
            if m.direct:
                L.append(f"            pw_prefetch_l2<{T(m.dtype)}, VEC>(in{i} + en);")
        L += ["        }", "    }", "#endif"]
    L += ["#pragma unroll",
          "    for (int u = 0; u < UNROLL; ++u) {",
          "        const long e = base + (long)(u * BLOCK + threadIdx.x) * VEC;",
          f"        if ({live}e + VEC <= n) {{"]
    for i, m in enumerate(g.inputs):
        if m.direct:
            L.append(f"            load_f<{T(m.dtype)}, VEC>(in{i} + e, x{i}[u]);")
        elif i in const_in:
            L += ["#pragma unroll", f"            for (int j = 0; j < VEC; ++j) x{i}[u][j] = c{i};"]
        else:
            L.append(f"            pw_bcast<{T(m.dtype)}, VEC>(in{i}, e, div{i}, mod{i}, x{i}[u]);")
    # the last, partial vector (one thread of the grid): its elements one by one, but still all
    # loaded before any math
    L += [f"        }} else if ({live}e < n) {{", "#pragma unroll", "            for (int j = 0; j < VEC; ++j) {",
          "                const long k = e + j < n ? e + j : n - 1;"]
    for i, m in enumerate(g.inputs):
        idx = "k" if m.direct else "0" if i in const_in else f"(k / div{i}) % mod{i}"
        L.append(f"                x{i}[u][j] = to_float(in{i}[{idx}]);")
    L += ["            }", "        }", "    }", "#pragma unroll", "    for (int u = 0; u < UNROLL; ++u) {",
          "        const long e = base + (long)(u * BLOCK + threadIdx.x) * VEC;",
          f"        if ({live}e < n) {{"]
    if nout:
        L.append(f"            float y{'[VEC], y'.join(str(i) for i in range(nout))}[VEC];")
    L += ["#pragma unroll", "            for (int j = 0; j < VEC; ++j) {", "                " + call("j")]
    if nr:  # a partial vector's slots follow the same mapping: its lanes past n add nothing
        L += [f"                if (e + j < n) acc{i} += rv{i};" if kept == 1
              else f"                if (e + j < n) acc{i}[u][j] += rv{i};" for i in range(nr)]
    L.append("            }")
    L.append("            if (e + VEC <= n) {")
    for i, (_, _, dt) in enumerate(g.outputs):
        L.append(f"                store_f<{T(dt)}, VEC>(out{i} + e, y{i});")
    L += ["            } else {", "#pragma unroll", "                for (int j = 0; j < VEC; ++j) {",
          "                    if (e + j < n) {"]
    for i, (_, _, dt) in enumerate(g.outputs):
        L.append(f"                        out{i}[e + j] = from_float<{T(dt)}>(y{i}[j]);")
    L += ["                    }", "                }", "            }", "        }", "    }", "    }"]
    if nr:
        if kept == 1:
            for i in range(nr):
                L += ["#pragma unroll",
                      f"    for (int o = 16; o > 0; o >>= 1) acc{i} += __shfl_xor_sync(0xffffffffu, acc{i}, o);",
                      f"    if ((threadIdx.x & 31) == 0) atomicAdd(&red_s[{i}][0], acc{i});"]
            L += ["    __syncthreads();",
                  f"    for (int k = threadIdx.x; k < {nr}; k += BLOCK) atomicAdd(ws + k, red_s[k][0]);"]
        else:
            # Slot sums without shared atomics (float atomicAdd on shared memory is a CAS loop on
            # sm_90: 4096 of them into 40 slots cost 056 ~20 us a call). Per pass u the block's
            # values go to part[] in element order; element Eu + idx adds into slot (Eu + idx) %
            # KEPT, so slot s is the sum of part[idx] over idx = (s - Eu) mod KEPT, + KEPT, ...
            # KEPT <= BLOCK: G = BLOCK / KEPT threads per slot take every G-th of those and keep
            # their share in a register across passes, then one shared step adds the G shares;
            # KEPT > BLOCK: each slot has one owner thread that adds into red_s[][slot].
            L += ["    __shared__ __align__(16) float part[BLOCK * VEC];",
                  f"    constexpr int KEPT = {kept};",
                  "    constexpr int G = KEPT <= BLOCK ? BLOCK / KEPT : 1;",
                  "    const int rt = threadIdx.x, rs = rt % KEPT, rg = rt / KEPT;"]
            for i in range(nr):
                L += ["    {", "        float tot = 0.0f;", "#pragma unroll",
                      "        for (int u = 0; u < UNROLL; ++u) {", "            __syncthreads();",
                      "#pragma unroll",
                      f"            for (int j = 0; j < VEC; ++j) part[rt * VEC + j] = acc{i}[u][j];",
                      "            __syncthreads();",
                      "            const int eu = (int)(((long)blockIdx.x * CHUNK + (long)u * BLOCK * VEC) % KEPT);",
                      "            if (KEPT <= BLOCK) {",
                      "                if (rt < G * KEPT)",
                      "                    for (int idx = (rs - eu + KEPT) % KEPT + rg * KEPT; idx < BLOCK * VEC; idx += G * KEPT)",
                      "                        tot += part[idx];",
                      "            } else {",
                      "                for (int s = rt; s < KEPT; s += BLOCK) {",
                      "                    float sum = 0.0f;",
                      "                    for (int idx = (s - eu + KEPT) % KEPT; idx < BLOCK * VEC; idx += KEPT) sum += part[idx];",
                      f"                    red_s[{i}][s] += sum;",
                      "                }", "            }", "        }", "        __syncthreads();",
                      "        if (KEPT <= BLOCK) {",
                      "            if (rt < G * KEPT) part[rg * KEPT + rs] = tot;",
                      "            __syncthreads();",
                      "            if (rt < KEPT) {",
                      "                float sum = 0.0f;",
                      "                for (int gg = 0; gg < G; ++gg) sum += part[gg * KEPT + rt];",
                      f"                atomicAdd(ws + {i * kept} + rt, sum);",
                      "            }", "        } else {",
                      f"            for (int s = rt; s < KEPT; s += BLOCK) atomicAdd(ws + {i * kept} + s, red_s[{i}][s]);",
                      "        }", "    }"]
    if nr and fin:
        L += _finish_source(g)
    L.append("}")
    if nr and not fin:
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


def _finish_source(g: PointwiseGraph) -> list[str]:
    """The end of a FIN=1 reduction kernel: the last block to finish turns the sums into the reduced
    outputs (what pointwise_post_kernel does after a second launch) and leaves the workspace zeroed.
    Every thread fences its own adds before the block's count goes up (the threadFenceReduction
    pattern), so the block that sees count == gridDim.x - 1 finds every sum complete in L2."""
    T = lambda dt: INPUT_TYPES[dt]
    nr, kept = len(g.reductions), g.kept
    L = ["    __shared__ bool pw_last;",
         "    __threadfence();",
         "    __syncthreads();",
         f"    unsigned* pw_count = reinterpret_cast<unsigned*>(ws + {nr * kept});",
         "    if (threadIdx.x == 0) pw_last = atomicAdd(pw_count, 1u) == gridDim.x - 1;",
         "    __syncthreads();",
         "    if (pw_last) {",
         "        __threadfence();"]
    for i, m in enumerate(g.inputs):  # only scalar-valued inputs are read after the sums
        L.append(f"        const float t{i} = {'to_float(ldg1(in%d))' % i if m.mod == '1' else '0.0f'};")
    L.append(f"        for (int k = threadIdx.x; k < {kept}; k += BLOCK) {{")
    for i in range(nr):
        L.append(f"            const float r{i} = atomicExch(ws + {i * kept} + k, 0.0f);")
    L.append(f"            float z{', z'.join(str(i) for i in range(len(g.reduced_outputs)))};")
    L.append("            pw_post(" + ", ".join([f"t{i}" for i in range(len(g.inputs))]
                                        + [f"s{i}" for i in range(len(g.scalars))]
                                        + [f"r{i}" for i in range(nr)]
                                        + [f"z{i}" for i in range(len(g.reduced_outputs))]) + ");")
    for i, (_, _, dt) in enumerate(g.reduced_outputs):
        L.append(f"            rout{i}[k] = from_float<{T(dt)}>(z{i});")
    L += ["        }",
          "        if (threadIdx.x == 0) atomicExch(pw_count, 0u);",
          "    }"]
    return L
