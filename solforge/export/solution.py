"""An attempt as an official SOL-ExecBench solution: CUDA C++ with a torch binding (docs/solution.md).

Layout of the written solution (every file is also inlined in solution.json's `sources`):
- each CUDA source unit of the candidate, under its own name, with the candidate's params as
  `#define`s at the top (NVRTC got them as -D options) and, at the end, a small host function per
  kernel, `solforge_launch_<k>`, that launches it with cudaLaunchKernel (cudaLaunchKernelExC for a
  thread-block cluster) and opts in to more than 48 KB of dynamic shared memory when asked. The
  launcher sits in the unit that defines the kernel, so template and C++ kernel names need no
  declaration elsewhere; it is hidden from NVRTC (`__CUDACC_RTC__`), so the unit still compiles there.
- headers (*.cuh, *.h) as they are;
- `solforge_entry.cu`: the entry point `run(inputs..., outputs...)` (destination passing style:
  outputs last, written in place). It checks every tensor (CUDA, contiguous, dtype, shape), derives
  the axes from the shapes, evaluates the candidate's grid/block/smem/args/workspace expressions
  (translated to C++ by cexpr.py) and launches the kernels in order on torch's current stream.

The evaluator builds it with torch.utils.cpp_extension.load; compile_options carry -std=c++17 and the
arch the candidate was tuned for (a `-gencode ... arch` flag makes torch add no arch flags of its own).
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import Optional

from ..candidate import Candidate, parse_arg
from ..compile.nvrtc_backend import HEADER_SUFFIXES, split_units
from ..problem.solution import Solution
from . import ExportAttempt, ExportError, axis_sources, default_name
from .cexpr import CPP_HELPERS, to_cpp

ENTRY = "solforge_entry.cu"
# definition dtype -> ATen scalar type checked at the entry (unknown ones are not checked)
ATEN_DTYPES = {"float64": "at::kDouble", "float32": "at::kFloat", "float16": "at::kHalf",
               "bfloat16": "at::kBFloat16", "int64": "at::kLong", "int32": "at::kInt",
               "int16": "at::kShort", "int8": "at::kChar", "uint8": "at::kByte", "bool": "at::kBool",
               "float8_e4m3fn": "at::kFloat8_e4m3fn", "float8_e5m2": "at::kFloat8_e5m2"}
SCALAR_CTYPES = {"int32": "int32_t", "int64": "int64_t", "uint32": "uint32_t", "uint64": "uint64_t",
                 "float32": "float", "float64": "double"}


TMAP_SWIZZLE = {"none": "CU_TENSOR_MAP_SWIZZLE_NONE", "sw32": "CU_TENSOR_MAP_SWIZZLE_32B",
                "sw64": "CU_TENSOR_MAP_SWIZZLE_64B", "sw128": "CU_TENSOR_MAP_SWIZZLE_128B"}
# A `tmap:` argument: the CUtensorMap the evaluator's launcher encodes (launcher.tensor_map_bytes:
# 2-D row-major, dims (cols, rows), pitch stride(0), box (cols, rows), L2 256B promotion, OOB zero
# fill), encoded here with the driver's cuTensorMapEncodeTiled, found through the runtime so the
# extension needs no libcuda link, and passed by value (a __grid_constant__ kernel parameter).
TMAP_HELPER = r"""
#include <cuda.h>
static CUtensorMap sf_tmap(const torch::Tensor& t, double box_rows, double box_cols,
                           CUtensorMapSwizzle swizzle, const char* what) {
  typedef CUresult (*encode_fn)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  static encode_fn encode = nullptr;
  if (encode == nullptr) {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found;
#if CUDART_VERSION >= 12050
    cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                      cudaEnableDefault, &found);
#else
    cudaError_t e = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &found);
#endif
    TORCH_CHECK(e == cudaSuccess && found == cudaDriverEntryPointSuccess && fn != nullptr,
                "solforge: cuTensorMapEncodeTiled not found in the driver");
    encode = reinterpret_cast<encode_fn>(fn);
  }
  CUtensorMapDataType dt;
  switch (t.scalar_type()) {
    case at::kHalf: dt = CU_TENSOR_MAP_DATA_TYPE_FLOAT16; break;
    case at::kBFloat16: dt = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16; break;
    case at::kFloat: dt = CU_TENSOR_MAP_DATA_TYPE_FLOAT32; break;
    case at::kByte: dt = CU_TENSOR_MAP_DATA_TYPE_UINT8; break;
    case at::kInt: dt = CU_TENSOR_MAP_DATA_TYPE_INT32; break;
    default: TORCH_CHECK(false, "solforge: tmap of ", what, ": unsupported dtype ", t.scalar_type());
  }
  TORCH_CHECK(t.dim() == 2 && t.stride(1) == 1, "solforge: tmap of ", what,
              " needs a 2-D row-major tensor");
  const int64_t es = t.element_size();
  TORCH_CHECK((t.stride(0) * es) % 16 == 0 && reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0,
              "solforge: tmap of ", what, ": row pitch and address must be multiples of 16 bytes");
  TORCH_CHECK(box_rows >= 1 && box_rows <= 256 && box_cols >= 1 && box_cols <= 256,
              "solforge: tmap of ", what, ": box ", box_rows, "x", box_cols, " (each 1..256)");
  cuuint64_t dims[2] = {(cuuint64_t)t.size(1), (cuuint64_t)t.size(0)};
  cuuint64_t pitch[1] = {(cuuint64_t)(t.stride(0) * es)};
  cuuint32_t box[2] = {(cuuint32_t)box_cols, (cuuint32_t)box_rows};
  cuuint32_t step[2] = {1, 1};
  CUtensorMap m;
  CUresult r = encode(&m, dt, 2, t.data_ptr(), dims, pitch, box, step, CU_TENSOR_MAP_INTERLEAVE_NONE,
                      swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  TORCH_CHECK(r == CUDA_SUCCESS, "solforge: cuTensorMapEncodeTiled(", what, ") failed: ", (int)r);
  return m;
}
"""


def _define_lines(params: dict) -> str:
    lines = ["// solforge export: the candidate's params (NVRTC was given them as -D options)"]
    for k, v in sorted(params.items()):
        if isinstance(v, bool):
            v = int(v)
        lines += [f"#ifndef {k}", f"#define {k} {v!r}" if isinstance(v, float) else f"#define {k} {v}",
                  "#endif"]
    return "\n".join(lines) + "\n"


def _unit_launchers(kernels: list[tuple[int, str]]) -> str:
    out = ["", "#ifndef __CUDACC_RTC__",
           "// ---- solforge export: host-side launchers of this unit's kernels ----",
           "#include <cuda_runtime.h>"]
    for k, kernel in kernels:
        out.append(f"""extern "C" cudaError_t solforge_launch_{k}(dim3 grid, dim3 block, size_t smem,
    cudaStream_t stream, void** args, dim3 cluster) {{
  const void* fn = reinterpret_cast<const void*>(&{kernel});
  if (smem > 48 * 1024) {{  // above 48 KB a kernel must opt in to its dynamic shared memory
    cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
  }}
  if (cluster.x * cluster.y * cluster.z > 1) {{
    cudaLaunchConfig_t cfg = {{}};
    cfg.gridDim = grid; cfg.blockDim = block; cfg.dynamicSmemBytes = smem; cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = cluster.x; attr[0].val.clusterDim.y = cluster.y;
    attr[0].val.clusterDim.z = cluster.z;
    cfg.attrs = attr; cfg.numAttrs = 1;
    return cudaLaunchKernelExC(&cfg, fn, args);
  }}
  return cudaLaunchKernel(fn, grid, block, args, smem, stream);
}}""")
    out.append("#endif  // __CUDACC_RTC__")
    return "\n".join(out) + "\n"


def _kernel_units(cand: Candidate, entries: Optional[dict]) -> dict[str, str]:
    """kernel -> unit that defines it (compile entries when known, else a search of the sources)."""
    units, headers = split_units(cand.sources)
    out = {}
    for launch in cand.launches:
        k = launch.kernel
        if entries and k in entries:
            out[k] = entries[k]["unit"] if isinstance(entries[k], dict) else entries[k].unit
            continue
        base = k.split("<")[0].split("::")[-1].strip()
        hits = [u for u, src in units.items() if base in src]
        if len(hits) != 1:
            raise ExportError(f"cannot tell which source unit defines kernel {k!r} (found in {hits})")
        out[k] = hits[0]
    return out


def _dims(exprs: Optional[list[str]], name) -> str:
    vals = [f"sf_dim({to_cpp(e, name)}, \"{e}\")" for e in (exprs or [])]
    vals += ["1u"] * (3 - len(vals))
    return "dim3(" + ", ".join(vals) + ")"


def entry_source(att: ExportAttempt, launcher_ids: dict[str, int]) -> str:
    """solforge_entry.cu: the torch-bound `run` entry point (DPS)."""
    defn, cand = att.definition, att.candidate
    if cand.language != "cuda":
        raise ExportError(f"--solution exports CUDA C++ candidates; attempt {att.attempt_id} is "
                          f"{cand.language!r} (use --torch-op, which loads its cubin)")
    sig, checks, lines = [], [], []
    for name, spec in defn.inputs.items():
        if spec.shape is None:
            ctype = {"int": "int64_t", "bool": "bool"}.get(_kind(spec.dtype), "double")
            sig.append(f"{ctype} s_{name}")
        else:
            sig.append(f"torch::Tensor t_{name}")
    for name in defn.outputs:
        sig.append(f"torch::Tensor t_{name}")
    tensors = [(n, s) for n, s in list(defn.inputs.items()) + list(defn.outputs.items())
               if s.shape is not None]
    first = tensors[0][0]

    def ax(n: str) -> str:
        return f"ax_{n}"

    for name, src in axis_sources(defn, outputs_given=True):
        if src[0] == "const":
            lines.append(f"  const double ax_{name} = {float(src[1])!r};")
        elif src[0] == "shape":
            lines.append(f"  const double ax_{name} = (double)t_{src[1]}.size({src[2]});")
        else:
            lines.append(f"  const double ax_{name} = {to_cpp(src[1], ax)};  // {src[1]}")
    for name, spec in tensors:
        if name in defn.inputs:
            # the kernels read dense row-major memory: a strided input (a custom input made as an
            # expanded or transposed view) is read through a dense copy, as solforge's evaluator does
            checks.append(f'  t_{name} = t_{name}.contiguous();')
        checks.append(f'  TORCH_CHECK(t_{name}.is_cuda() && t_{name}.is_contiguous(), '
                      f'"{name} must be a contiguous CUDA tensor");')
        checks.append(f'  TORCH_CHECK(t_{name}.dim() == {len(spec.shape)}, "{name} must have '
                      f'{len(spec.shape)} dimensions, got ", t_{name}.dim());')
        if spec.dtype in ATEN_DTYPES:
            checks.append(f'  TORCH_CHECK(t_{name}.scalar_type() == {ATEN_DTYPES[spec.dtype]}, '
                          f'"{name} must be {spec.dtype}");')
        for i, d in enumerate(spec.shape):
            want = f"(int64_t){ax(d)}" if isinstance(d, str) else str(d)
            checks.append(f'  TORCH_CHECK(t_{name}.size({i}) == {want}, "{name}.shape[{i}] must be ", '
                          f'{want}, ", got ", t_{name}.size({i}));')
    # the launch environment: axes, then numeric scalar inputs, then params (params win)
    env: dict[str, str] = {n: f"ax_{n}" for n in defn.axes}
    for name, spec in defn.inputs.items():
        if spec.shape is None and _kind(spec.dtype) != "bool":
            env[name] = f"(double)s_{name}"
    for k, v in cand.params.items():
        if isinstance(v, (int, float)):
            env[k] = repr(float(v))
    env_lines = [f"  const double e_{k} = {v};" for k, v in env.items()]
    used = set()

    def e(n: str) -> str:
        if n not in env:
            raise ExportError(f"launch expression uses {n!r}, which is no axis, scalar input or param")
        used.add(n)
        return f"e_{n}"

    # The workspace as the evaluator's launch plan keeps it (solforge.compile.launcher): allocated
    # zeroed once per (device, stream) and kept, its first workspace_zero bytes (all by default,
    # none for "0": a kernel that leaves it zeroed itself) cleared by one memset per call. A fresh
    # torch::zeros per call put a fill kernel into every timed call that the evaluator never ran:
    # +3 us on 4-20 us kernels in SOL-ExecBench (docs/timing_agreement.md).
    ws_zero = cand.workspace if cand.workspace_zero is None else cand.workspace_zero
    body = ["  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();",
            f"  const double ws_bytes = {to_cpp(cand.workspace, e)};",
            f"  const double ws_zero = std::min(ws_bytes, (double)({to_cpp(ws_zero, e)}));",
            "  torch::Tensor workspace;",
            "  if (ws_bytes > 0) {",
            "    static std::mutex ws_mu;",
            "    // never destroyed: freeing CUDA memory from a static destructor at exit can fail",
            "    static auto* ws_kept = new std::map<std::pair<int, cudaStream_t>, torch::Tensor>();",
            "    std::lock_guard<std::mutex> lock(ws_mu);",
            f"    torch::Tensor& kept = (*ws_kept)[{{(int)t_{first}.get_device(), stream}}];",
            "    if (!kept.defined() || kept.numel() < (int64_t)ws_bytes) {",
            f"      kept = torch::zeros({{(int64_t)ws_bytes}}, t_{first}.options().dtype(torch::kUInt8));",
            "    } else if (ws_zero > 0) {",
            "      cudaError_t ws_err = cudaMemsetAsync(kept.data_ptr(), 0, (size_t)ws_zero, stream);",
            "      TORCH_CHECK(ws_err == cudaSuccess, \"workspace memset failed: \", "
            "cudaGetErrorString(ws_err));",
            "    }",
            "    workspace = kept;",
            "  }"]
    uses_tmap = False
    for i, launch in enumerate(cand.launches):
        if launch.when:  # another variant's launch at other sizes (solforge.compile.launcher)
            body.append(f"  if ({to_cpp(launch.when, e)} != 0.0) {{  // launches[{i}]: {launch.kernel}")
        else:
            body.append(f"  {{  // launches[{i}]: {launch.kernel}")
        refs = []
        for j, a in enumerate(map(parse_arg, launch.args)):
            if a.kind == "tensor":
                if a.name not in defn.inputs and a.name not in defn.outputs:
                    raise ExportError(f"launches[{i}].args: {a.name!r} is not a tensor of the problem")
                body.append(f"    void* a{j} = t_{a.name}.data_ptr();")
            elif a.kind == "tmap":
                if a.name not in defn.inputs and a.name not in defn.outputs:
                    raise ExportError(f"launches[{i}].args: {a.name!r} is not a tensor of the problem")
                rows, cols = a.expr.split(",")
                uses_tmap = True
                # the launcher's encoding (solforge.compile.launcher.tensor_map_bytes), in C++
                body.append(f"    CUtensorMap a{j} = sf_tmap(t_{a.name}, {to_cpp(rows, e)}, "
                            f"{to_cpp(cols, e)}, {TMAP_SWIZZLE[a.swizzle]}, \"{a.name}\");")
            elif a.kind == "workspace":
                body.append(f'    TORCH_CHECK(workspace.defined(), "launches[{i}] passes the workspace '
                            f'but it is 0 bytes");')
                body.append(f"    void* a{j} = workspace.data_ptr();")
            else:
                ct = SCALAR_CTYPES[a.ctype]
                v = to_cpp(a.expr, e)
                conv = (f"sf_int<{ct}>({v}, \"{a.expr}\")" if a.ctype.startswith(("int", "uint"))
                        else f"({ct})({v})")
                body.append(f"    {ct} a{j} = {conv};")
            refs.append(f"(void*)&a{j}")
        body.append(f"    void* args[] = {{{', '.join(refs) or 'nullptr'}}};")
        cluster = _dims(launch.cluster, e) if launch.cluster else "dim3(1u, 1u, 1u)"
        body.append(f"    cudaError_t err = solforge_launch_{launcher_ids[launch.kernel]}("
                    f"{_dims(launch.grid, e)}, {_dims(launch.block, e)}, "
                    f"(size_t){to_cpp(launch.smem, e)}, stream, args, {cluster});")
        body.append(f'    TORCH_CHECK(err == cudaSuccess, "launches[{i}] ({launch.kernel}) failed: ", '
                    f"cudaGetErrorString(err));")
        body.append("  }")
    env_lines = [ln for ln in env_lines if ln.split("e_", 1)[1].split(" ", 1)[0] in used]
    decls = "\n".join(f'extern "C" cudaError_t solforge_launch_{k}(dim3, dim3, size_t, cudaStream_t, '
                      f"void**, dim3);  // {kern}" for kern, k in launcher_ids.items())
    return f"""// solforge export of attempt {att.attempt_id} for {att.problem_name}
// Entry point (DPS): run({", ".join(list(defn.inputs) + list(defn.outputs))}); outputs are written in place.
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>

{decls}
{CPP_HELPERS}{TMAP_HELPER if uses_tmap else ""}
static inline unsigned int sf_dim(double v, const char* what) {{
  TORCH_CHECK(v >= 1.0 && v == std::floor(v) && v <= 4294967295.0, "solforge: ", what, " = ", v,
              " is not a positive integer");
  return (unsigned int)v;
}}
template <typename T> static inline T sf_int(double v, const char* what) {{
  TORCH_CHECK(v == std::floor(v), "solforge: ", what, " = ", v, " is not an integer");
  return (T)v;
}}

void run({", ".join(sig)}) {{
  const at::cuda::CUDAGuard guard(t_{first}.device());
{chr(10).join(lines)}
{chr(10).join(checks)}
{chr(10).join(env_lines)}
{chr(10).join(body)}
}}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{
  m.def("run", &run, "solforge kernel for {att.problem_name} (attempt {att.attempt_id[:12]})");
}}
"""


def _kind(dtype: str) -> str:
    from ..problem.dtypes import kind

    return kind(dtype)


def build_solution(att: ExportAttempt, *, name: Optional[str] = None, author: str = "solforge",
                   arch: Optional[str] = None, entries: Optional[dict] = None) -> Solution:
    """The Solution (validated by solforge.problem.solution, which mirrors the documented schema)."""
    from .. import settings

    cand = att.candidate
    arch = arch or settings.get().arch
    kunits = _kernel_units(cand, entries)
    units, headers = split_units(cand.sources)
    launcher_ids = {k: i for i, k in enumerate(dict.fromkeys(l.kernel for l in cand.launches))}
    rename = {}
    for u in units:  # a lone header-named file is one unit: give it a suffix the builder compiles
        rename[u] = u if PurePosixPath(u).suffix in (".cu",) else u + ".cu"
    if ENTRY in rename.values() or ENTRY in headers:
        raise ExportError(f"the candidate has a file named {ENTRY}; rename it")
    sources = []
    for u, src in units.items():
        mine = [(launcher_ids[k], k) for k, uu in kunits.items() if uu == u]
        text = _define_lines(cand.params) + src + ("\n" if not src.endswith("\n") else "")
        if mine:
            text += _unit_launchers(sorted(mine))
        sources.append({"path": rename[u], "content": text})
    for h, src in headers.items():
        if PurePosixPath(h).suffix not in HEADER_SUFFIXES:
            continue
        sources.append({"path": h, "content": src})
    sources.append({"path": ENTRY, "content": entry_source(att, launcher_ids)})
    sm = arch.replace("sm_", "")
    cflags = ["-O3", "-std=c++17", f"-gencode=arch=compute_{sm},code=sm_{sm}", *cand.options]
    score = f"SOL score {att.sol_score:.3f}" if att.sol_score is not None else "not scored"
    speed = f", geomean speedup {att.speedup:.2f}x" if att.speedup is not None else ""
    return Solution.model_validate({
        "name": name or default_name(att),
        "definition": att.problem_name,
        "author": author,
        "description": (f"solforge attempt {att.attempt_id} ({score}{speed} on the H200 where it was "
                        f"measured); kernels {', '.join(launcher_ids)} launched per the candidate's "
                        f"launch spec. {cand.notes}".strip()),
        "spec": {"languages": ["cuda_cpp"], "target_hardware": ["LOCAL"],
                 "entry_point": f"{ENTRY}::run", "dependencies": [],
                 "destination_passing_style": True, "binding": "torch",
                 # ld_flags empty on purpose: the code uses only the runtime API (torch links
                 # cudart); their default when the field is left out, -lcuda, needs a libcuda.so on the
                 # linker's path, which a machine with only the driver's libcuda.so.1 lacks
                 "compile_options": {"cflags": [], "cuda_cflags": cflags, "ld_flags": []}},
        "sources": sources})


def write_solution(att: ExportAttempt, folder: Path, **kw) -> Path:
    """Write solution.json and its sources (as files too, for reading and building by hand)."""
    entries = kw.pop("entries", None)
    if entries is None:
        entries = _compile_entries(att, kw.get("arch"))
    sol = build_solution(att, entries=entries, **kw)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for s in sol.sources:
        p = folder / s.path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(s.content)
    out = folder / "solution.json"
    out.write_text(json.dumps(sol.model_dump(mode="json", exclude_none=True), indent=2) + "\n")
    return out


def _compile_entries(att: ExportAttempt, arch: Optional[str]) -> dict:
    """Compile the candidate (NVRTC, cached) to learn which unit defines each kernel, and to refuse
    exporting something that does not compile."""
    from ..compile import api

    res = api.compile_candidate(att.candidate, arch)
    if not res.ok:
        raise ExportError(f"attempt {att.attempt_id} does not compile ({res.status.value}):\n"
                          f"{res.log[:2000]}")
    return {k: v.model_dump() for k, v in res.entries.items()}
