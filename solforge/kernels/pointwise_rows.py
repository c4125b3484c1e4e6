"""pointwise_rows family: elementwise chains with row statistics over the last dim, one block per row.

Serves a reference that pointwise_rows_trace reads as elementwise ops plus mean/sum/var/std over
the last dim with keepdim, broadcast back onto the row (053's adaptive threshold: mean + std *
z(target) then relu(x - threshold)). Eager PyTorch runs one kernel per op (and 053 syncs the host
three times for its `mask.any()` branches); this kernel reads the row once from DRAM, keeps the
statistics in registers and writes each output once.

Kernel (generated per problem): one block per row, grid-stride over rows. Pass p (1..P) loops over
the row's elements (VEC consecutive per thread, one wide load when R % VEC == 0), computes the
values that the pass-p sums need and block-reduces them (warp shuffles + 32 floats of shared
memory); the last pass computes and stores the outputs. Passes after the first re-read the row,
which is then in L1/L2 (a row is at most a few tens of KB), so DRAM sees it about once.

Gated by kernels_cuda/pointwise_rows/family.json `"offered"` (the family-wide GPU gate).
"""

from __future__ import annotations

from typing import Optional

from ..candidate import Candidate, Launch
from ..problem.definition import Definition
from .base import Family, FamilyError, Spec, read_source
from .gate import family_offered
from .pointwise_rows_trace import INPUT_TYPES, RowGraph, trace_rows
from .pointwise_trace import _lit as pt_lit

_ELEM_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "bool": 1}
_GRID_BLOCKS = 132 * 16  # rows beyond this many blocks loop (grid-stride)


class PointwiseRowsFamily(Family):
    name = "pointwise_rows"
    description = ("elementwise chains with row statistics over the last dim (mean, sum, var, std "
                   "with keepdim, broadcast back) traced from the reference: one block per row, "
                   "block reductions, the row re-read from L1/L2 per pass")
    ops = ("row_stat_chain",)
    source_dir = "pointwise_rows"

    @property
    def offered(self) -> bool:
        return family_offered(self.source_dir)

    def analyze(self, defn: Definition) -> Optional[Spec]:
        g = trace_rows(defn)
        if g is None:
            return None
        return Spec(fixed={}, info={"graph": g})

    def _space(self, defn: Definition, spec: Spec, workloads: list) -> list[dict]:
        g: RowGraph = spec.info["graph"]
        widest = max([_ELEM_BYTES[m.dtype] for m, k in zip(g.inputs, g.kinds) if k == "direct"]
                     + [_ELEM_BYTES[dt] for _, _, dt in g.outputs])
        vec = 16 // widest
        out = []
        for v in (vec, max(1, vec // 2)):
            for block in (256, 512, 128, 1024):
                out.append({"VEC": v, "BLOCK": block})
        return out

    def _check_params(self, defn: Definition, spec: Spec, params: dict) -> None:
        if {"VEC", "BLOCK"} - set(params):
            raise FamilyError("pointwise_rows params: VEC, BLOCK")
        v, b = params["VEC"], params["BLOCK"]
        if v not in (1, 2, 4, 8, 16) or not 32 <= b <= 1024 or b % 32:
            raise FamilyError("VEC in 1, 2, 4, 8, 16; BLOCK a multiple of 32 up to 1024")

    def _build(self, defn: Definition, spec: Spec, params: dict) -> Candidate:
        g: RowGraph = spec.info["graph"]
        src = read_source("pointwise", "pointwise.cuh") + "\n" + kernel_source(g)
        rows = f"({g.numel}) // ({g.rlen})"  # an exact integer division
        bc = [i for i, k in enumerate(g.kinds) if k in ("elem", "row")]
        args = ([m.name for m in g.inputs] + [o[0] for o in g.outputs]
                + [f"int64:{rows}", f"int64:{g.rlen}"]
                + [f"int64:{g.inputs[i].div}" for i in bc] + [f"int64:{g.inputs[i].mod}" for i in bc]
                + [f"float32:{s}" for s in g.scalars])
        grid = f"max(1, min({rows}, {_GRID_BLOCKS}))"
        return Candidate(problem=defn.name, language="cuda", sources={"pointwise_rows.cu": src},
                         params=dict(params),
                         launches=[Launch(kernel="pointwise_rows_kernel", grid=[grid], block=["BLOCK"],
                                          args=args)],
                         options=["--fmad=false"],
                         notes=f"family=pointwise_rows passes={g.passes} "
                               f"ops={','.join(o.split('.')[-2 if o.startswith('aten.') else -1] for o in g.ops)}")


def _elem_code(g: RowGraph, need: list[str], indent: str) -> list[str]:
    """Declarations of the per-element nodes in `need` (graph order); inputs come from x<i>[j]."""
    L = []
    for n in g.nodes:
        if n.name not in need:
            continue
        if n.op == "input":
            L.append(f"{indent}const float v_{n.name} = x{n.args[0][1:]}[j];")
        else:
            L.append(f"{indent}const float v_{n.name} = {g.expr(n)};")
    return L


def _closure(g: RowGraph, roots: list[str]) -> list[str]:
    """Per-element nodes that the roots need (row/const values are already in registers)."""
    need: set[str] = set()
    stack = list(roots)
    while stack:
        name = stack.pop()
        if name in need or g.klass[name] != "elem":
            continue
        need.add(name)
        if g.node(name).op != "input":
            stack += [a for a in g.node(name).args if isinstance(a, str)]
    return [n.name for n in g.nodes if n.name in need]


def kernel_source(g: RowGraph) -> str:
    T = lambda dt: INPUT_TYPES[dt]
    nin, nout, ns = len(g.inputs), len(g.outputs), len(g.scalars)
    bc = [i for i, k in enumerate(g.kinds) if k in ("elem", "row")]
    params = ([f"const {T(m.dtype)}* __restrict__ in{i}" for i, m in enumerate(g.inputs)]
              + [f"{T(dt)}* __restrict__ out{i}" for i, (_, _, dt) in enumerate(g.outputs)]
              + ["long rows", "long R"] + [f"long div{i}" for i in bc] + [f"long mod{i}" for i in bc]
              + [f"float s{i}" for i in range(ns)])
    inputs_by_idx = {int(n.args[0][1:]): n.name for n in g.nodes if n.op == "input"}
    L = ["__device__ __forceinline__ long pw_at(long e, long div, long mod) {",
         "    if (((unsigned long)e | (unsigned long)div | (unsigned long)mod) <= 0xffffffffUL)",
         "        return (long)(((unsigned)e / (unsigned)div) % (unsigned)mod);",
         "    return (e / div) % mod;",
         "}",
         "// sum of v over the block, returned to every thread (sh: 32 floats, reused per call)",
         "__device__ __forceinline__ float pw_block_sum(float v, float* sh) {",
         "#pragma unroll",
         "    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);",
         "    __syncthreads();",
         "    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;",
         "    __syncthreads();",
         "    float t = (threadIdx.x & 31) < (BLOCK >> 5) ? sh[threadIdx.x & 31] : 0.0f;",
         "#pragma unroll",
         "    for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);",
         "    return t;",
         "}",
         "",
         "extern \"C\" __global__ void __launch_bounds__(BLOCK)",
         "pointwise_rows_kernel(" + ", ".join(params) + ") {",
         "    __shared__ float pw_sh[32];",
         "    const float pw_rlen = (float)R;",
         "    const float pw_rinv = 1.0f / (float)R;  // ATen's mean: the sum times 1/R",
         "    const bool vec_ok = (R % VEC) == 0;"]
    L.append("    (void)pw_rinv; (void)pw_rlen;")
    for si, op, num, res in g.guards:  # the Python branches the trace took on scalar inputs
        L.append(f"    if (((s{si} {op} {pt_lit(num)}) ? 1 : 0) != {int(res)}) __trap();  // traced for {'' if res else 'not '}s{si} {op} {num!r}")
    # const values: 0-d inputs, then every const node (the scalar inputs' functions), once
    for i, k in enumerate(g.kinds):
        if k == "const" and i in inputs_by_idx:
            L.append(f"    const float v_{inputs_by_idx[i]} = to_float(ldg1(in{i}));")
    for n in g.nodes:
        if g.klass[n.name] == "const" and n.op != "input":
            L.append(f"    const float v_{n.name} = {g.expr(n)};")
    L += ["    for (long row = blockIdx.x; row < rows; row += gridDim.x) {",
          "        const long rb = row * R;"]
    for i, k in enumerate(g.kinds):
        if k == "row" and i in inputs_by_idx:
            L.append(f"        const float v_{inputs_by_idx[i]} = to_float(ldg1(in{i} + pw_at(rb, div{i}, mod{i})));")

    def row_nodes(level: int) -> list[str]:
        out = []
        for n in g.nodes:
            if g.klass[n.name] == "row" and n.op not in ("input", "row.sum") and g.level[n.name] == level:
                out.append(f"        const float v_{n.name} = {g.expr(n)};")
        return out

    def loop(roots: list[str], body_end: list[str], stores: bool) -> list[str]:
        need = _closure(g, roots)
        used_in = sorted({int(g.node(x).args[0][1:]) for x in need if g.node(x).op == "input"})
        out = ["        for (long c = (long)threadIdx.x * VEC; c < R; c += (long)BLOCK * VEC) {",
               "            const bool full = vec_ok && c + VEC <= R;"]
        for i in used_in:
            out.append(f"            float x{i}[VEC];")
            if g.kinds[i] == "direct":
                out += [f"            if (full) load_f<{T(g.inputs[i].dtype)}, VEC>(in{i} + rb + c, x{i});",
                        "            else {", "#pragma unroll",
                        "                for (int j = 0; j < VEC; ++j)",
                        f"                    x{i}[j] = c + j < R ? to_float(in{i}[rb + c + j]) : 0.0f;",
                        "            }"]
            else:
                out += ["#pragma unroll", "            for (int j = 0; j < VEC; ++j)",
                        f"                x{i}[j] = c + j < R ? to_float(ldg1(in{i} + pw_at(rb + c + j, div{i}, mod{i}))) : 0.0f;"]
        if stores:
            out.append(f"            float y{'[VEC], y'.join(str(i) for i in range(nout))}[VEC];")
        out += ["#pragma unroll", "            for (int j = 0; j < VEC; ++j) {",
                "                if (c + j < R) {"]
        out += _elem_code(g, need, "                    ")
        out += ["                    " + s for s in body_end]
        out += ["                }", "            }"]
        if stores:
            out.append("            if (full) {")
            out += [f"                store_f<{T(dt)}, VEC>(out{i} + rb + c, y{i});"
                    for i, (_, _, dt) in enumerate(g.outputs)]
            out += ["            } else {", "#pragma unroll", "                for (int j = 0; j < VEC; ++j) {",
                    "                    if (c + j < R) {"]
            out += [f"                        out{i}[rb + c + j] = from_float<{T(dt)}>(y{i}[j]);"
                    for i, (_, _, dt) in enumerate(g.outputs)]
            out += ["                    }", "                }", "            }"]
        out.append("        }")
        return out

    L += row_nodes(0)
    for p in range(1, g.passes + 1):
        sums = [s for s in g.sums if g.level[s] == p]
        L.append(f"        // pass {p}: {', '.join(sums)}")
        L += [f"        float acc_{s} = 0.0f;" for s in sums]
        L += loop([g.node(s).args[0] for s in sums],
                  [f"acc_{s} += v_{g.node(s).args[0]};" for s in sums], stores=False)
        L += [f"        const float v_{s} = pw_block_sum(acc_{s}, pw_sh);" for s in sums]
        L += row_nodes(p)
    L.append("        // outputs")
    L += loop([o[1] for o in g.outputs], [f"y{i}[j] = v_{o[1]};" for i, o in enumerate(g.outputs)],
              stores=True)
    L += ["    }", "}"]
    src = "\n".join(L) + "\n"
    return src.replace("pw_red_", "v_")
