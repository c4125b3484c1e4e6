"""CuTe DSL (nvidia-cutlass-dsl) -> cubin on a CPU machine, launched later without the DSL.

The GPU box does not have the DSL (its libraries are ~92 MB), so a "cute" candidate is compiled here
to one cubin per launched kernel and run there by launcher.py through the driver API, like CUDA C++.
That works because the contract keeps the kernel's parameters flat:

- the source (one `*.py` file) defines a `@cute.kernel` function per launch `kernel` name, whose
  parameters follow the launch's `args` one to one: a tensor name or "workspace" -> `cute.Pointer`
  (global memory, 16-byte aligned; element type from the module's optional `DTYPES = {"arg": cutlass.BFloat16}`,
  default `cutlass.Float32`, or recast inside with `cute.recast_ptr`), "int32:EXPR" -> `cutlass.Int32`,
  "float32:EXPR" -> `cutlass.Float32`, and so on. Inside, the kernel builds its tensors with
  `cute.make_tensor(ptr, layout)` from those scalars;
- the candidate's params are module globals (set before the module runs, like -D for CUDA);
- `block` (and `cluster`) must be constant over the params: the DSL bakes the block size into the
  kernel (.reqntid), so this backend compiles with exactly the launch spec's values.

Why not the DSL's own host wrapper: it is JIT-compiled host code inside the DSL's MLIR engine, which
needs the DSL at run time, and its tensor arguments lower to structs of pointer + dynamic shapes +
strides that the host computes. Flat pointers + scalars give a parameter list we can check: after
compiling, the cubin's own parameter table (EIATTR_KPARAM_INFO) must match the args in count and
size, and those offsets/sizes are what CompileResult.entries[...].params records for the launcher.

On the box itself nothing here runs: its compile step (the same compile_candidate) finds the cubin
this backend produced in a precompiled folder, keyed without the compiler version (cute_prebuilt.py;
every DSL compile also lands in <cache_dir>/cute_prebuilt, which is the folder to carry).

Isolation: the cute worker imports the DSL once (seconds) and forks a child per job, so candidate
Python never runs in the long-lived worker and never in the caller. The worker itself runs in the
sandbox (worker.py: allowlisted env, bwrap); each child gets its own process group, CPU and file-size
limits, none of the worker's pipes, and answers in JSON on a pipe of its own (read with a size cap).
The worker is a child subreaper: whatever a child leaves running is killed when its job ends.
"""

from __future__ import annotations

import os
import re
import signal
import tempfile
import time
import traceback

from .elf import kernel_params, read_cubin, sm_of_arch

SCALAR_DSL_TYPES = {"int32": "Int32", "int64": "Int64", "uint32": "Uint32", "uint64": "Uint64",
                    "float32": "Float32", "float64": "Float64"}
SCALAR_SIZES = {"int32": 4, "int64": 8, "uint32": 4, "uint64": 8, "float32": 4, "float64": 8}
SLOT_KIND = {"int32": "i32", "int64": "i64", "uint32": "u32", "uint64": "u64", "float32": "f32",
             "float64": "f64"}
_SCALAR_ARG = re.compile(r"^(int32|int64|uint32|uint64|float32|float64):(.+)$")


def _err(status: str, log: str, t0: float) -> dict:
    return {"status": status, "log": log, "cubins": {}, "entries": {}, "options": [],
            "compile_seconds": time.perf_counter() - t0}


def _const_dims(exprs, params: dict, what: str) -> list[int]:
    from ..problem import axis_expr

    env = {k: (int(v) if isinstance(v, bool) else v) for k, v in params.items()
           if isinstance(v, (int, float))}
    try:
        vals = [int(axis_expr.evaluate(str(e), env)) for e in exprs]
    except Exception as e:  # noqa: BLE001 - an axis name here means it is not a constant
        raise ValueError(f"{what} {list(exprs)} must be constant over the params for a CuTe kernel "
                         f"(the DSL bakes it into the cubin): {e}") from None
    return vals + [1] * (3 - len(vals))


def compile_cute(job: dict) -> dict:
    """Compile in this process (the DSL must be importable). Returns the worker's plain dict."""
    t0 = time.perf_counter()
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_stream, make_ptr

    arch, params = job["arch"], job.get("params", {})
    py = {k: v for k, v in job["sources"].items() if k.endswith(".py")}
    if len(py) != 1 or len(job["sources"]) != 1:
        return _err("invalid", f"solforge: a cute candidate has exactly one .py source, got "
                    f"{sorted(job['sources'])}", t0)
    (fname, code), = py.items()
    if not re.fullmatch(r"[A-Za-z_][\w.-]*\.py", fname):
        return _err("invalid", f"solforge: source file name {fname!r} is not a plain file name", t0)
    # The DSL reads kernel source with inspect.getsource, so the module must live in a real file.
    # It keeps the agent's file name, and logs drop our temporary folder from paths.
    dump = tempfile.mkdtemp(prefix="solforge-cute-")
    try:
        ns = _load_module(os.path.join(dump, fname), code, params)
    except Exception:  # noqa: BLE001 - the agent's error, with its file name and line
        return _err("error", _user_traceback(fname, dump), t0)
    dtypes = ns.get("DTYPES", {})
    cubins, entries, logs = {}, {}, []
    for i, launch in enumerate(job["launches"]):
        name = launch["kernel"]
        if name in entries:
            continue
        kern = ns.get(name)
        if kern is None:
            return _err("error", f"solforge: {fname} defines no @cute.kernel named {name!r} "
                        f"(launches[{i}].kernel)", t0)
        try:
            block = _const_dims(launch["block"], params, f"launches[{i}].block")
            cluster = _const_dims(launch["cluster"], params, f"launches[{i}].cluster") \
                if launch.get("cluster") else None
        except ValueError as e:
            return _err("invalid", f"solforge: {e}", t0)
        fakes, arg_names, slot_src = [], [], []
        for j, a in enumerate(launch.get("args", [])):
            m = _SCALAR_ARG.match(a.strip())
            if m:
                fakes.append(getattr(cutlass, SCALAR_DSL_TYPES[m.group(1)])(0))
                slot_src.append((SLOT_KIND[m.group(1)], SCALAR_SIZES[m.group(1)], m.group(2).strip()))
            else:
                dt = dtypes.get(a.strip(), cutlass.Uint8 if a.strip() == "workspace" else cutlass.Float32)
                fakes.append(make_ptr(dt, 16 * (j + 1), cute.AddressSpace.gmem, assumed_align=16))
                slot_src.append(("ptr", 8, a.strip()))
            arg_names.append(f"a{j}")
        wrapper = _make_wrapper(cute, kern, arg_names, block, cluster, launch.get("smem", "0"), params,
                                os.path.join(dump, f"_sf_launch_{i}.py"))
        unit_dump = os.path.join(dump, str(i))
        os.makedirs(unit_dump, exist_ok=True)
        try:
            compiled = cute.compile(wrapper, *fakes, make_fake_stream(),
                                    options=f"--gpu-arch {arch} --keep-cubin --dump-dir {unit_dump}")
        except Exception as e:  # noqa: BLE001 - DSL diagnostics name the agent's file and line
            return _err("error", _user_traceback(fname, dump), t0)
        cubin = compiled.__cubin__
        if not isinstance(cubin, (bytes, bytearray)):
            return _err("error", f"solforge: the DSL produced no cubin for {name!r} ({cubin!r})", t0)
        symbols = list(compiled.kernel_info)
        if len(symbols) != 1:
            return _err("error", f"solforge: {name!r} compiled to {len(symbols)} kernels {symbols}; "
                        "one @cute.kernel per launch", t0)
        info = read_cubin(bytes(cubin))
        if info.sm != sm_of_arch(arch) or (info.arch and info.arch != arch):
            return _err("error", f"solforge: cubin for {name!r} targets {info.arch or info.sm}, not {arch}", t0)
        kparams, total = kernel_params(bytes(cubin), symbols[0])
        sizes = [p.size for p in kparams]
        if sizes != [s for _, s, _ in slot_src]:
            return _err("error", f"solforge: kernel {name!r} takes parameters of sizes {sizes} bytes "
                        f"but launches[{i}].args {launch.get('args', [])} give "
                        f"{[s for _, s, _ in slot_src]}", t0)
        unit = f"{fname}:{name}"
        cubins[unit] = bytes(cubin)
        entries[name] = {
            "unit": unit, "symbol": symbols[0], "param_bytes": total,
            "params": [{"kind": kind, "offset": p.offset, "size": p.size, "source": src}
                       for (kind, _, src), p in zip(slot_src, kparams)],
            "block": block, "cluster": cluster,
        }
    return {"status": "ok", "log": "\n".join(logs), "cubins": cubins, "entries": entries,
            "options": [f"--gpu-arch {arch}", *(f"{k}={v}" for k, v in sorted(params.items()))],
            "compile_seconds": time.perf_counter() - t0}


def _load_module(path: str, code: str, params: dict):
    import importlib.util
    import sys

    with open(path, "w") as f:
        f.write(code)
    name = "solforge_cute_" + os.path.basename(path)[:-3].replace("-", "_").replace(".", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    mod.__dict__.update(params)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod.__dict__


def _make_wrapper(cute, kern, arg_names: list[str], block, cluster, smem_expr: str, params: dict,
                  path: str):
    """A @cute.jit host function with one parameter per launch arg (the DSL reads the signature)."""
    from ..problem import axis_expr

    env = {k: v for k, v in params.items() if isinstance(v, (int, float))}
    try:
        smem = int(axis_expr.evaluate(str(smem_expr), env))
    except Exception:  # noqa: BLE001 - depends on axes: the launcher passes it at run time
        smem = 0
    launch_kw = {"grid": [1, 1, 1], "block": block, "smem": smem}
    if cluster:
        launch_kw["cluster"] = cluster
    args = ", ".join(arg_names)
    src = (f"def _sf_launch({args}{', ' if args else ''}stream):\n"
           f"    _sf_kernel({args}).launch(**_sf_kw, stream=stream)\n")
    ns = _load_module(path, src, {"_sf_kernel": kern, "_sf_kw": launch_kw})
    return cute.jit(ns["_sf_launch"])


def _user_traceback(fname: str, folder: str) -> str:
    """The frames in the agent's file, then the exception with the DSL's diagnostics; our temporary
    folder is cut from paths so they read "kernel.py", line N."""
    import sys

    etype, exc, tb = sys.exc_info()
    frames = [f for f in traceback.extract_tb(tb) if os.path.basename(f.filename) == fname]
    out = ["Traceback (frames in " + fname + "):"] + traceback.format_list(frames)
    out.append(f"{etype.__name__}: {exc}")
    text = "".join(x if x.endswith("\n") else x + "\n" for x in out)
    return re.sub(r"\x1b\[[0-9;]*m", "", text).replace(folder + os.sep, "")


def warm_up(arch: str = "sm_90a") -> None:
    """Compile our own sample once in the worker (trusted code): the DSL's lazy setup (MLIR context,
    pass pipelines) then happens before the fork, not again in every job's child."""
    from .samples import cute_candidate

    cand = cute_candidate()
    compile_cute({"sources": cand["sources"], "params": cand["params"], "arch": arch,
                  "launches": cand["launches"]})


WORKER_FDS: list[int] = []  # the worker's own pipes (set by worker.py), closed in each job's child
MAX_ANSWER_BYTES = 512 << 20
CHILD_FSIZE_BYTES = 1 << 30


def _become_subreaper() -> None:
    """Orphans of a job's child are re-parented to the worker (not init), so they can be found."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def _kill_leftovers(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    me = str(os.getpid())
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = f.read().rsplit(")", 1)[1].split()[1]
        except (OSError, IndexError):
            continue
        if ppid == me:
            try:
                os.kill(int(d), signal.SIGKILL)
                os.waitpid(int(d), 0)
            except (OSError, ChildProcessError):
                pass


def _child_limits(timeout_s: float | None) -> None:
    import resource

    if timeout_s:
        cpu = int(timeout_s) + 5
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 2))
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    lim = CHILD_FSIZE_BYTES if hard == resource.RLIM_INFINITY else min(hard, CHILD_FSIZE_BYTES)
    resource.setrlimit(resource.RLIMIT_FSIZE, (lim, lim))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def compile_cute_isolated(job: dict) -> dict:
    """Fork a child that runs compile_cute (candidate Python never runs in the worker itself)."""
    import cutlass.cute  # noqa: F401 - imported once in the worker; the child inherits it

    from .frames import dumps, loads

    _become_subreaper()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            os.setpgid(0, 0)
            os.close(r)
            for fd in WORKER_FDS:
                try:
                    os.close(fd)
                except OSError:
                    pass
            _child_limits(job.get("timeout_s"))
            from ..sandbox.child import install_guard

            install_guard(allow_subprocess=False)  # a clear refusal; bwrap and the limits are the walls
            try:
                out = compile_cute(job)
            except BaseException:  # noqa: BLE001
                out = _err("error", "solforge: internal CuTe compile error\n" + traceback.format_exc(),
                           time.perf_counter())
            with os.fdopen(w, "wb") as f:
                f.write(dumps(out))
        except BaseException:  # noqa: BLE001 - nothing may escape a forked child
            code = 70
        finally:
            os._exit(code)
    os.close(w)
    chunks, size = [], 0
    with os.fdopen(r, "rb") as f:
        while size <= MAX_ANSWER_BYTES:
            chunk = f.read(1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    _, status, usage = os.wait4(pid, 0)
    _kill_leftovers(pid)
    if size > MAX_ANSWER_BYTES:
        return _err("error", f"solforge: the CuTe compile answered more than {MAX_ANSWER_BYTES} bytes",
                    time.perf_counter())
    try:
        out = loads(b"".join(chunks)) if chunks else None
    except ValueError:
        out = None
    if not isinstance(out, dict) or "status" not in out:
        return _err("error", f"solforge: the CuTe compile process died or gave no answer (wait status "
                    f"{status})", time.perf_counter())
    out["compile_cpu_seconds"] = usage.ru_utime + usage.ru_stime  # the child's CPU (load-proof time)
    return out
