"""The candidate runtime on the GPU box: load cubins, evaluate launch expressions, launch in order.

Bare on purpose: stdlib, torch and cuda-python (cuda.bindings.driver) only, no pydantic. It takes the
Candidate as a plain dict (candidate.json, i.e. Candidate.model_dump()) and the compile manifest
(manifest.json written by CompileResult.write_stage) with the cubin files beside it.

    rt = load_stage(stage_dir, candidate_dict)            # or CandidateRuntime(candidate, cubins, manifest)
    rt.launch_all(tensors, axes, scalars)                 # on torch's current stream
    plan = rt.prepare(tensors, axes, scalars)             # resolve + pack once ...
    plan.run()                                            # ... launch many times (timing loops)
    rt.close()

Every CUDA driver call's return code is checked; a failure raises LaunchError naming the call, the
launch index and the kernel. The evaluator runs this in a spawned process, so a faulting kernel only
takes that process down.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import re
import sys
from pathlib import Path

_SCALAR_ARG = re.compile(r"^(int32|int64|uint32|uint64|float32|float64):(.+)$")
_CTYPES = {"int32": ctypes.c_int32, "int64": ctypes.c_int64, "uint32": ctypes.c_uint32,
           "uint64": ctypes.c_uint64, "float32": ctypes.c_float, "float64": ctypes.c_double,
           # short names used by CuTe DSL parameter slots
           "i32": ctypes.c_int32, "i64": ctypes.c_int64, "u32": ctypes.c_uint32,
           "u64": ctypes.c_uint64, "f32": ctypes.c_float, "f64": ctypes.c_double}
# "tmap:TENSOR:BOX_ROWS,BOX_COLS:SWIZZLE": a 128-byte CUtensorMap of a 2-D row-major tensor, encoded
# on the host (cuTensorMapEncodeTiled) and passed by value (a __grid_constant__ kernel parameter,
# 64-byte aligned); the box sizes are expressions like the scalars'
_TMAP_ARG = re.compile(r"^tmap:(\w+):([^:,]+),([^:,]+):(sw128|sw64|sw32|none)$")
TMAP_BYTES, TMAP_ALIGN = 128, 64
_STATIC_SMEM_LIMIT = 48 * 1024  # above this, a kernel must opt in to more dynamic shared memory


def _load_file(key: str, path: Path):
    """The module at `path`, loaded once under the name `key` (no package needed)."""
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[key] = mod
        spec.loader.exec_module(mod)
    return sys.modules[key]


def _axis_expr():
    """solforge.problem.axis_expr without importing solforge.problem (whose __init__ needs pydantic)."""
    mod = sys.modules.get("solforge.problem.axis_expr")
    if mod is not None:
        return mod
    return _load_file("_solforge_axis_expr", Path(__file__).resolve().parent.parent / "problem" / "axis_expr.py")


def _sibling(name: str):
    """solforge.compile.<name> (elf, graph_launch): imported normally inside the package, else loaded
    from this file's folder. The exported torch op (solforge/export/torch_op.py) vendors this file
    with its siblings as standalone modules, where a relative import has no package to resolve."""
    if __package__:
        return importlib.import_module(f"{__package__}.{name}")
    return _load_file(f"_solforge_export_{name}", Path(__file__).resolve().parent / f"{name}.py")


class LaunchError(RuntimeError):
    pass


def _drv():
    from cuda.bindings import driver

    return driver


def check(result, what: str):
    """Unwrap a cuda-python (err, *values) tuple; raise LaunchError with the driver's name for err."""
    drv = _drv()
    err = result[0] if isinstance(result, tuple) else result
    if err != drv.CUresult.CUDA_SUCCESS:
        _, name = drv.cuGetErrorName(err)
        _, desc = drv.cuGetErrorString(err)
        raise LaunchError(f"{what}: {name.decode() if name else err} "
                          f"({desc.decode() if desc else ''})")
    if not isinstance(result, tuple) or len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]


class _Params:
    """One launch's kernel parameters: a byte buffer + the void* array cuLaunchKernel wants."""

    def __init__(self, layout: list[tuple[int, object]], total: int):
        self.buf = ctypes.create_string_buffer(max(total, 1))
        base = ctypes.addressof(self.buf)
        self.ptrs = (ctypes.c_void_p * max(len(layout), 1))(*[base + off for off, _ in layout])
        for off, cval in layout:
            ctypes.memmove(base + off, ctypes.addressof(cval), ctypes.sizeof(cval))

    @property
    def address(self) -> int:
        return ctypes.addressof(self.ptrs)


def _pack_args(values: list) -> tuple[list[tuple[int, object]], int]:
    """Lay out ctypes values with natural alignment, as the kernel's parameter list does; an entry
    (cval, align) gives its alignment (a tensor map: 128 bytes aligned to 64)."""
    layout, off = [], 0
    for cval in values:
        align = None
        if isinstance(cval, tuple):
            cval, align = cval
        size = ctypes.sizeof(cval)
        align = align or size
        off = (off + align - 1) // align * align
        layout.append((off, cval))
        off += size
    return layout, off


def _layout_from_cubin(values: list, cubin: bytes, symbol: str, i: int):
    """The parameter layout ptxas chose (.nv.info of the cubin): a 64-byte aligned struct parameter
    such as a CUtensorMap is placed by its address in the constant bank (on sm_90 the parameters
    start at 0x210: after an int at 32 a tensor map lands at 48), not by its offset from 0."""
    kernel_params = _sibling("elf").kernel_params

    kparams, total = kernel_params(cubin, symbol)
    vals = [v[0] if isinstance(v, tuple) else v for v in values]
    sizes = [ctypes.sizeof(v) for v in vals]
    if sizes != [p.size for p in kparams]:
        raise LaunchError(f"launches[{i}]: args give sizes {sizes}, the kernel takes {[p.size for p in kparams]}")
    return [(p.offset, v) for p, v in zip(kparams, vals)], total


def tensor_map_bytes(t, box_rows: int, box_cols: int, swizzle: str) -> bytes:
    """The 128-byte CUtensorMap of a 2-D row-major tensor `t` (torch, on the GPU): global dims
    (cols, rows), row pitch t.stride(0), box (box_cols, box_rows) elements, the given smem swizzle,
    out-of-bounds elements zero-filled (they still count toward the transaction bytes)."""
    import torch

    drv = _drv()
    dts = {torch.float16: "FLOAT16", torch.bfloat16: "BFLOAT16", torch.float32: "FLOAT32",
           torch.uint8: "UINT8", torch.int32: "INT32"}
    if t.dim() != 2 or t.stride(1) != 1 or t.dtype not in dts:
        raise LaunchError(f"tmap: needs a 2-D row-major tensor of {sorted(map(str, dts))}, got "
                          f"{tuple(t.shape)} stride {t.stride()} {t.dtype}")
    es = t.element_size()
    if (t.stride(0) * es) % 16 or t.data_ptr() % 16:
        raise LaunchError(f"tmap: row pitch {t.stride(0) * es} and address must be multiples of 16")
    if swizzle != "none" and box_cols * es > int(swizzle[2:]):
        raise LaunchError(f"tmap: a {swizzle} box row is at most {swizzle[2:]} bytes, got {box_cols * es}")
    sw = {"none": "NONE", "sw32": "32B", "sw64": "64B", "sw128": "128B"}[swizzle]
    u64, u32 = drv.cuuint64_t, drv.cuuint32_t  # the binding takes these, not Python ints
    if not (1 <= box_rows <= 256 and 1 <= box_cols <= 256):
        raise LaunchError(f"tmap: box {box_rows}x{box_cols} (each 1..256)")
    tm = check(drv.cuTensorMapEncodeTiled(
        getattr(drv.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{dts[t.dtype]}"), 2, t.data_ptr(),
        [u64(t.shape[1]), u64(t.shape[0])], [u64(t.stride(0) * es)], [u32(box_cols), u32(box_rows)],
        [u32(1), u32(1)],
        drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(drv.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{sw}"),
        drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE), "cuTensorMapEncodeTiled")
    return ctypes.string_at(int(tm.getPtr()), TMAP_BYTES)


class LaunchPlan:
    """Everything resolved for one set of tensors: call run() as often as needed."""

    def __init__(self, runtime: "CandidateRuntime", steps: list, workspace, zero_bytes=None):
        self.runtime = runtime
        self.steps = steps      # (function, grid, block, smem, cluster, _Params, index, kernel)
        self.workspace = workspace
        full = 0 if workspace is None else workspace.numel() * workspace.element_size()
        # bytes zeroed before every call: all by default; fewer when the candidate says its kernels
        # need no more (workspace_zero), none for a kernel that leaves its workspace zeroed itself
        self.zero_bytes = full if zero_bytes is None else max(0, min(int(zero_bytes), full))
        # one kernel and nothing to zero: a direct launch, as for a plan without a workspace
        multi = len(steps) > 1 or self.zero_bytes > 0
        self._graph = None
        self._graph_state = "off" if not multi or not _graph_launch_enabled() else "pending"
        self.graph_note = ""

    def run(self, stream=None) -> None:
        drv = _drv()
        hstream = drv.CUstream(_stream_handle(stream))
        if self._graph_state == "pending":
            GraphLaunch = _sibling("graph_launch").GraphLaunch

            self._graph, self.graph_note = GraphLaunch.build(self.steps, self.workspace, check,
                                                             zero_bytes=self.zero_bytes)
            self._graph_state = "on" if self._graph is not None else "failed"
        if self._graph is not None:
            self._graph.launch(hstream, check)
            return
        if self.zero_bytes:
            if self.zero_bytes == self.workspace.numel() * self.workspace.element_size():
                self.workspace.zero_()
            else:
                import torch

                self.workspace.view(-1).view(torch.uint8)[:self.zero_bytes].zero_()
        for fn, grid, block, smem, cluster, params, i, kernel in self.steps:
            where = f"launches[{i}] ({kernel})"
            if cluster is None:
                check(drv.cuLaunchKernel(fn, *grid, *block, smem, hstream, params.address, 0),
                      f"cuLaunchKernel {where}")
            else:
                cfg = drv.CUlaunchConfig()
                cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid
                cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block
                cfg.sharedMemBytes = smem
                cfg.hStream = hstream
                attr = drv.CUlaunchAttribute()
                attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
                attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster
                cfg.attrs = [attr]
                cfg.numAttrs = 1
                check(drv.cuLaunchKernelEx(cfg, fn, params.address, 0), f"cuLaunchKernelEx {where}")


def _graph_launch_enabled() -> bool:
    if not __package__:  # vendored in an exported op: no solforge settings, the default (on)
        return True
    from .. import settings

    return settings.get().graph_launch


def _stream_handle(stream) -> int:
    if stream is None:
        import torch

        return torch.cuda.current_stream().cuda_stream
    if hasattr(stream, "cuda_stream"):
        return stream.cuda_stream
    return int(stream)


def _dims(exprs, env, what: str, i: int) -> tuple[int, int, int]:
    ax = _axis_expr()
    vals = []
    for e in exprs:
        v = ax.evaluate(str(e), env)
        if v != int(v) or v < 1:
            raise LaunchError(f"launches[{i}].{what}: {e!r} = {v}, not a positive integer")
        vals.append(int(v))
    return tuple(vals + [1] * (3 - len(vals)))


def workspace_zero_bytes(candidate: dict, env: dict, ws_bytes: int) -> int:
    """Bytes of the workspace zeroed before every call: all of it unless the candidate's
    workspace_zero expression says fewer (clamped to the workspace; negative is an error)."""
    expr = candidate.get("workspace_zero")
    if expr is None:
        return ws_bytes
    v = _axis_expr().evaluate(str(expr), env)
    if v != int(v) or v < 0:
        raise LaunchError(f"workspace_zero: {expr!r} = {v}, not a non-negative integer")
    return min(int(v), ws_bytes)


def launch_env(axes: dict, scalars: dict, params: dict) -> dict:
    """Names a launch expression may use; params win over axes (same rule as solforge.candidate)."""
    # a bool scalar input is 0/1 (a compiler plan tests it in its kernels' guards)
    env = {**axes, **{k: (int(v) if isinstance(v, bool) else v) for k, v in scalars.items()
                      if isinstance(v, (int, float))}}
    env.update({k: (int(v) if isinstance(v, bool) else v) for k, v in params.items()
                if isinstance(v, (int, float))})
    return env


def resolve_entries(candidate: dict, manifest: dict, cubins=None) -> dict[str, dict]:
    """{kernel name: manifest entry} for every kernel the launches name, checked without a GPU.

    A manifest without entries is what a failed compile leaves (e.g. a CuTe candidate compiled where
    the DSL is missing and no precompiled cubin was carried): say so rather than only "no entry"."""
    entries = manifest.get("entries", {})
    units = set(manifest.get("cubins", {})) if cubins is None else set(cubins)
    out = {}
    for i, launch in enumerate(candidate["launches"]):
        name = launch["kernel"]
        if name in out:
            continue
        entry = entries.get(name)
        if entry is None:
            why = (" (the manifest has no entries at all: was it written by a failed compile? "
                   "A CuTe DSL candidate needs its precompiled cubin where the DSL is missing, see "
                   "solforge.compile.cute_prebuilt)") if not entries else f" (it has {sorted(entries)})"
            raise LaunchError(f"kernel {name!r} has no entry in the compile manifest{why}")
        if entry.get("unit") not in units:
            raise LaunchError(f"launches[{i}] ({name}): manifest unit {entry.get('unit')!r} has no "
                              f"cubin (have {sorted(units)})")
        out[name] = entry
    return out


class CandidateRuntime:
    """Loaded modules and functions of one candidate, in the current CUDA context."""

    def __init__(self, candidate: dict, cubins: dict[str, bytes], manifest: dict, device=None):
        import torch

        if hasattr(candidate, "model_dump"):
            candidate = candidate.model_dump()
        self.candidate = candidate
        self.manifest = manifest
        self._cubins = cubins  # a launch with tensor maps packs at the cubin's parameter offsets
        self.entries = manifest.get("entries", {})
        resolved = resolve_entries(candidate, manifest, cubins)  # before touching the GPU
        drv = _drv()
        self.device = torch.device("cuda", torch.cuda.current_device() if device is None else device)
        torch.cuda.init()
        with torch.cuda.device(self.device):
            torch.empty(1, device=self.device)  # makes torch's primary context current here
            check(drv.cuInit(0), "cuInit")
            ctx = check(drv.cuCtxGetCurrent(), "cuCtxGetCurrent")
            if ctx is None or int(ctx) == 0:
                dev = check(drv.cuDeviceGet(self.device.index), "cuDeviceGet")
                ctx = check(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
                check(drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
            self.modules = {}
            for unit, blob in cubins.items():
                if blob[:4] != b"\x7fELF":
                    raise LaunchError(f"{unit}: not a cubin (PTX is not loaded on purpose)")
                self.modules[unit] = check(drv.cuModuleLoadData(blob), f"cuModuleLoadData({unit})")
            self.functions = {}
            for name, entry in resolved.items():
                mod = self.modules[entry["unit"]]
                self.functions[name] = check(drv.cuModuleGetFunction(mod, entry["symbol"].encode()),
                                             f"cuModuleGetFunction({entry['symbol']})")
        self._smem_set: dict[str, int] = {}

    def _ensure_smem(self, kernel: str, smem: int) -> None:
        """Opt a kernel in to `smem` bytes of dynamic shared memory when dynamic plus its static shared
        memory exceed 48 KB (48 KB dynamic + 1 KB static fails to launch without the opt-in)."""
        if self._smem_set.get(kernel, 0) >= smem:
            return
        drv = _drv()
        if smem <= _STATIC_SMEM_LIMIT:
            static = check(drv.cuFuncGetAttribute(
                drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, self.functions[kernel]),
                f"cuFuncGetAttribute(SHARED_SIZE_BYTES) for {kernel}")
            if smem + int(static) <= _STATIC_SMEM_LIMIT:
                self._smem_set[kernel] = smem  # fits without the opt-in
                return
        attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        check(drv.cuFuncSetAttribute(self.functions[kernel], attr, smem),
              f"cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES={smem}) for {kernel}")
        self._smem_set[kernel] = smem

    def _arg_values(self, launch: dict, entry: dict, tensors, workspace, env, i: int):
        ax = _axis_expr()

        def pointer(name: str) -> int:
            if name == "workspace":
                if workspace is None:
                    raise LaunchError(f"launches[{i}]: 'workspace' is passed but the workspace is 0 bytes")
                return workspace.data_ptr()
            if name not in tensors:
                raise LaunchError(f"launches[{i}]: no tensor named {name!r} (have {sorted(tensors)})")
            t = tensors[name]
            # a kernel gets a bare pointer and reads dense row-major memory: a strided view (e.g. a
            # custom input made by `w.T.to(dtype)`, which keeps the transposed strides) would be
            # read as the wrong elements, so it is refused here rather than judged "incorrect" (the
            # evaluator's CudaCaller hands strided inputs over as dense copies)
            if not t.is_contiguous():
                raise LaunchError(f"launches[{i}]: tensor {name!r} is not contiguous (shape "
                                  f"{tuple(t.shape)}, strides {tuple(t.stride())}); candidates read "
                                  f"their tensors as dense row-major memory")
            return t.data_ptr()

        if entry.get("params"):  # CuTe DSL: the kernel's real parameter layout, from the compiler
            layout = []
            for slot in entry["params"]:
                if slot["kind"] == "ptr":
                    cval = ctypes.c_uint64(pointer(slot["source"]))
                elif slot["kind"] == "bytes":
                    cval = ctypes.create_string_buffer(bytes.fromhex(slot["value"]), slot["size"])
                else:
                    ctor = _CTYPES[slot["kind"]]
                    cval = ctor(ax.evaluate(slot["source"], env))
                if ctypes.sizeof(cval) != slot["size"]:
                    raise LaunchError(f"launches[{i}]: param slot {slot} does not match its kind")
                layout.append((slot["offset"], cval))
            return layout, entry.get("param_bytes") or sum(s["size"] for s in entry["params"])
        values, has_tmap = [], False
        for a in launch.get("args", []):
            a = a.strip()
            t = _TMAP_ARG.match(a)
            if t:
                if t.group(1) not in tensors:
                    raise LaunchError(f"launches[{i}]: {a!r}: no tensor named {t.group(1)!r}")
                rows, cols = (int(ax.evaluate(x, env)) for x in (t.group(2), t.group(3)))
                raw = tensor_map_bytes(tensors[t.group(1)], rows, cols, t.group(4))
                values.append((ctypes.create_string_buffer(raw, TMAP_BYTES), TMAP_ALIGN))
                has_tmap = True
                continue
            m = _SCALAR_ARG.match(a)
            if m:
                v = ax.evaluate(m.group(2), env)
                if m.group(1).startswith(("int", "uint")):
                    if v != int(v):
                        raise LaunchError(f"launches[{i}]: {a!r} = {v} is not an integer")
                    v = int(v)
                values.append(_CTYPES[m.group(1)](v if isinstance(v, int) else float(v)))
            else:
                values.append(ctypes.c_uint64(pointer(a)))
        if has_tmap:
            return _layout_from_cubin(values, self._cubins[entry["unit"]], entry["symbol"], i)
        return _pack_args(values)

    def prepare(self, tensors: dict, axes: dict, scalars: dict | None = None,
                workspace=None) -> LaunchPlan:
        """Resolve grid/block/smem/args for these tensors and sizes; allocate the workspace."""
        import torch

        cand = self.candidate
        env = launch_env(axes, scalars or {}, cand.get("params", {}))
        ax = _axis_expr()
        ws_bytes = int(ax.evaluate(str(cand.get("workspace", "0")), env))
        if workspace is None and ws_bytes > 0:
            workspace = torch.zeros(ws_bytes, dtype=torch.uint8, device=self.device)
        steps = []
        for i, launch in enumerate(cand["launches"]):
            if launch.get("when") and not ax.evaluate(str(launch["when"]), env):
                continue  # another variant's launch: not at these sizes
            name = launch["kernel"]
            entry = self.entries[name]
            grid = _dims(launch["grid"], env, "grid", i)
            block = _dims(launch["block"], env, "block", i)
            smem = int(ax.evaluate(str(launch.get("smem", "0")), env))
            cluster = _dims(launch["cluster"], env, "cluster", i) if launch.get("cluster") else None
            if cluster is None and entry.get("cluster") and any(c > 1 for c in entry["cluster"]):
                cluster = tuple(entry["cluster"])
            self._ensure_smem(name, smem)
            layout, total = self._arg_values(launch, entry, tensors, workspace, env, i)
            steps.append((self.functions[name], grid, block, smem, cluster, _Params(layout, total),
                          i, name))
        return LaunchPlan(self, steps, workspace, workspace_zero_bytes(cand, env, ws_bytes))

    def launch_all(self, tensors: dict, axes: dict, scalars: dict | None = None, stream=None,
                   workspace=None) -> None:
        """Launch every kernel of the candidate, in order, on `stream` (default: torch's current)."""
        self.prepare(tensors, axes, scalars, workspace).run(stream)

    def close(self) -> None:
        drv = _drv()
        for unit, mod in list(self.modules.items()):
            check(drv.cuModuleUnload(mod), f"cuModuleUnload({unit})")
        self.modules.clear()
        self.functions.clear()


def read_stage(folder) -> tuple[dict[str, bytes], dict]:
    """(cubins, manifest) from a folder written by CompileResult.write_stage."""
    folder = Path(folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    cubins = {unit: (folder / fname).read_bytes() for unit, fname in manifest["cubins"].items()}
    return cubins, manifest


def load_stage(folder, candidate: dict | None = None, device=None) -> CandidateRuntime:
    """A runtime from a staging folder; the candidate defaults to folder/candidate.json."""
    cubins, manifest = read_stage(folder)
    if candidate is None:
        candidate = json.loads((Path(folder) / "candidate.json").read_text())
    return CandidateRuntime(candidate, cubins, manifest, device=device)


__all__ = ["CandidateRuntime", "LaunchPlan", "LaunchError", "load_stage", "read_stage", "launch_env",
           "check", "resolve_entries", "workspace_zero_bytes", "tensor_map_bytes"]
