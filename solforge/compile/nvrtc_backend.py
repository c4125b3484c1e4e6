"""CUDA C++ -> cubin with NVRTC (cuda.bindings.nvrtc). Runs inside a compile worker process.

Source units: every `*.cu` file is compiled on its own into one cubin; other files (`*.cuh`, `*.h`,
...) are headers that any unit may `#include "name"`. A candidate with a single file is one unit
whatever its extension. Each unit is compiled under the file name the agent used, so a log line reads
`kernel.cu(12): error: ...` and the agent can find line 12 in what it wrote.

Kernels: a launch's `kernel` is either an `extern "C"` name (recommended) or a C++ name expression
such as `gemm<128, 64>` (resolved through nvrtcAddNameExpression / nvrtcGetLoweredName).
"""

from __future__ import annotations

import re
import time

from . import pch, toolchain
from .elf import kernel_params, read_cubin, sm_of_arch

HEADER_SUFFIXES = (".cuh", ".h", ".hpp", ".hh", ".inc", ".inl")


def split_units(sources: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    if len(sources) == 1:
        return dict(sources), {}
    units = {k: v for k, v in sources.items() if not k.endswith(HEADER_SUFFIXES)}
    headers = {k: v for k, v in sources.items() if k.endswith(HEADER_SUFFIXES)}
    return units, headers


# ---- which files a candidate may #include ----------------------------------------------------------
# NVRTC reads any file the process can open: `#include "/proc/self/environ"` would put the environment
# into the compile log. So only <name> headers (found in the toolchain's include dirs: no absolute
# path, no ..) and "name" for the candidate's own headers are allowed, and the scan errs on the side of
# refusing: every line that could be a directive once comments are gone is checked, digraph (%:) and
# trigraph (??=, ??/) spellings are refused outright, and so are macro-formed includes.
_SPLICE = re.compile(r"\\[ \t]*\r?\n")
_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_DIRECTIVE = re.compile(r"^\s*(?:#|%:)\s*(include_next|include|import)\b(.*)$")
_HAS_INCLUDE = re.compile(r"__has_include(?:_next)?\s*\(\s*(<[^>\n]*>|\"[^\"\n]*\")?")


def _bad_path(name: str) -> str:
    if not name or name.startswith(("/", "\\", "~")) or re.match(r"[A-Za-z]:", name):
        return "an absolute path"
    if ".." in re.split(r"[/\\]", name):
        return "a path with .."
    if any(c in name for c in "\0\n\r"):
        return "a control character"
    return ""


def _check_target(target: str, headers: set[str], where: str) -> str:
    target = _BLOCK_COMMENT.sub(" ", target).split("//", 1)[0].strip()
    if target.startswith("<") and ">" in target:
        name = target[1:target.index(">")]
        why = _bad_path(name.strip())
        return f"{where}: #include <{name}> is {why}" if why else ""
    if target.startswith('"') and target.count('"') >= 2:
        name = target[1:target.index('"', 1)]
        if name in headers:
            return ""
        return (f'{where}: #include "{name}" names no header of this candidate (quoted includes are '
                f"for the candidate's own files {sorted(headers)}; toolchain headers use <...>)")
    return f"{where}: #include {target[:60]!r} is macro-formed or malformed (write <name> or \"name\")"


def check_includes(sources: dict[str, str]) -> list[str]:
    """Problems with the #include lines of CUDA sources (empty: all fine)."""
    headers = set(sources)
    out = []
    for fname, src in sources.items():
        if "??=" in src or "??/" in src:
            out.append(f"{fname}: trigraphs (??= or ??/) are not allowed")
        text = _SPLICE.sub("", src)
        for m in _HAS_INCLUDE.finditer(text):
            arg = m.group(1)
            line = text.count("\n", 0, m.start()) + 1
            why = _check_target(arg, headers, f"{fname}({line})") if arg else \
                f"{fname}({line}): __has_include with a macro-formed argument"
            if why:
                out.append(why.replace("#include", "__has_include"))
        for n, line in enumerate(text.split("\n"), 1):
            # a directive may follow the end of a comment on the same line: check every such start
            starts = [line] + [line[m.end():] for m in re.finditer(r"\*/", line)]
            for part in starts:
                m = _DIRECTIVE.match(_BLOCK_COMMENT.sub(" ", part))
                if m is None:
                    continue
                if m.group(1) != "include":
                    out.append(f"{fname}({n}): #{m.group(1)} is not allowed")
                    break
                why = _check_target(m.group(2), headers, f"{fname}({n})")
                if why:
                    out.append(why)
                break
    return out


def _base_and_extra(arch: str, options: list[str]) -> tuple[list[str], list[str]]:
    extra = toolchain.check_options(options)
    base = toolchain.base_options(arch)
    if any(o.lstrip("-").startswith("std=") for o in extra):
        base = [o for o in base if not o.startswith("-std=")]
    return base, extra


def final_options(arch: str, params: dict, options: list[str]) -> list[str]:
    """All options for NVRTC: base (arch, std, wheel include dirs) + params as -D + candidate's.

    This is what a compile means and what is recorded; with a PCH (pch.py) the params reach NVRTC as
    #define lines after the unit's #include block instead, with the same cubin."""
    base, extra = _base_and_extra(arch, options)
    return base + toolchain.define_options(params) + extra


def public_options(opts: list[str]) -> list[str]:
    """Options as recorded (and hashed): absolute include paths replaced by a stable marker."""
    return [("--include-path=<wheel:" + ("cccl" if o.rstrip("/").endswith("cccl") else "cuda-runtime") + ">")
            if o.startswith("--include-path=") else o for o in opts]


def _check(res, what: str):
    from cuda.bindings import nvrtc

    err = res[0] if isinstance(res, tuple) else res
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"{what} failed: {nvrtc.nvrtcGetErrorString(err)[1].decode()}")
    return res[1:] if isinstance(res, tuple) else ()


def _compile_unit(name: str, src: str, headers: dict[str, str], opts: list[str],
                  name_exprs: list[str], on_compiled=None) -> tuple[bool, str, bytes, dict[str, str]]:
    """One NVRTC program. on_compiled(prog) runs right after nvrtcCompileProgram (PCH bookkeeping)."""
    from cuda.bindings import nvrtc

    hnames = list(headers)
    (prog,) = _check(nvrtc.nvrtcCreateProgram(src.encode(), name.encode(), len(hnames),
                                              [headers[h].encode() for h in hnames],
                                              [h.encode() for h in hnames]), "nvrtcCreateProgram")
    try:
        for e in name_exprs:
            _check(nvrtc.nvrtcAddNameExpression(prog, e.encode()), f"nvrtcAddNameExpression({e})")
        bopts = [o.encode() for o in opts]
        (res,) = nvrtc.nvrtcCompileProgram(prog, len(bopts), bopts)
        if on_compiled is not None:
            on_compiled(prog)
        (size,) = _check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
        buf = b" " * size
        _check(nvrtc.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
        log = buf.rstrip(b"\0").decode("utf-8", "replace")
        if res != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return False, log, b"", {}
        (size,) = _check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
        cubin = b" " * size
        _check(nvrtc.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
        lowered = {}
        for e in name_exprs:
            (low,) = _check(nvrtc.nvrtcGetLoweredName(prog, e.encode()), f"nvrtcGetLoweredName({e})")
            lowered[e] = low.decode()
        return True, log, bytes(cubin), lowered
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _is_name_expr(kernel: str) -> bool:
    return not re.fullmatch(r"[A-Za-z_]\w*", kernel)


def _base_ident(kernel: str) -> str:
    return re.split(r"[<(\s]", kernel.split("::")[-1], maxsplit=1)[0]


_ARG_SIZES = {"int32": 4, "uint32": 4, "float32": 4, "int64": 8, "uint64": 8, "float64": 8,
              "tmap": 128}  # a CUtensorMap by value (launcher: "tmap:TENSOR:ROWS,COLS:SWIZZLE")


def check_launch_args(launches: list[dict], entries: dict, cubins: dict[str, bytes]) -> list[str]:
    """Each launch's args against the kernel's real parameter list (from the cubin): same count,
    same sizes. A mismatch would otherwise be a silent wrong launch on the GPU."""
    out = []
    for i, launch in enumerate(launches):
        entry = entries.get(launch["kernel"])
        if entry is None:
            continue
        kparams, _ = kernel_params(cubins[entry["unit"]], entry["symbol"])
        want = [p.size for p in kparams]
        give = [_ARG_SIZES.get(a.split(":", 1)[0].strip(), 8) if ":" in a else 8
                for a in launch.get("args", [])]
        if want != give:
            out.append(f"solforge: launches[{i}] ({launch['kernel']}): the kernel takes {len(want)} "
                       f"parameter(s) of sizes {want} bytes, but args {launch.get('args', [])} give "
                       f"{give} (a tensor or workspace is an 8-byte pointer)")
    return out


def _pch_plan(job: dict, headers: dict[str, str]):
    """(PchFiles, options without params, params header text), or None for the plain -D way."""
    root = job.get("pch_dir")
    if not root or pch.PARAMS_HEADER in job["sources"]:
        return None
    defines = toolchain.define_options(job.get("params", {}))
    try:
        if not pch.supported():
            return None
        files = pch.files_for(root, job.get("pch_max_bytes") or pch.MAX_BYTES)
        if not pch.injectable(job.get("params", {}), defines, files.tag_dir):
            return None
    except (OSError, RuntimeError, toolchain.ToolchainError):
        return None  # no PCH is only slower
    base, extra = _base_and_extra(job["arch"], job.get("options", []))
    return files, base + extra + pch.PCH_OPTIONS, pch.params_header(defines)


def _compile_unit_pch(name: str, src: str, headers: dict[str, str], name_exprs: list[str],
                      files: "pch.PchFiles", opts: list[str], params_text: str):
    """The unit with params after its #include block, making or using the PCH of that block."""
    if src.startswith("\ufeff"):
        src = src[1:]  # a byte-order mark must stay first; NVRTC ignores it there anyway
    n = pch.include_block_lines(src, headers)
    head = "".join(src.splitlines(keepends=True)[:n])
    unit_headers = {**headers, pch.PARAMS_HEADER: params_text}
    key = files.key(head, opts)
    try:
        popts, creates = files.options_for(key)
    except OSError:  # PCH folder not writable: only slower
        popts, creates = [], False

    def on_compiled(prog):
        if creates:
            try:
                files.after_create(prog, key)
            except OSError:
                files.failed.add(key)

    src2 = pch.rewrite(src, n)
    out = _compile_unit(name, src2, unit_headers, opts + popts, name_exprs, on_compiled)
    if not out[0] and popts and "precompiled header" in out[1]:
        # the PCH file vanished or could not be read: compile without it
        out = _compile_unit(name, src2, unit_headers, opts, name_exprs)
    return out


def compile_cuda(job: dict) -> dict:
    """job: sources, params, options, arch, kernels. Returns a plain dict (crosses a process pipe)."""
    t0, c0 = time.perf_counter(), time.process_time()
    arch = job["arch"]
    try:
        toolchain.check_arch(arch)
        opts = final_options(arch, job.get("params", {}), job.get("options", []))
    except toolchain.ToolchainError as e:
        return {"status": "invalid", "log": f"solforge: {e}", "cubins": {}, "entries": {},
                "options": [], "compile_seconds": time.perf_counter() - t0}
    bad = check_includes(job["sources"])
    if bad:
        return {"status": "invalid", "log": "solforge: " + "\nsolforge: ".join(bad), "cubins": {},
                "entries": {}, "options": public_options(opts), "compile_seconds": time.perf_counter() - t0}
    units, headers = split_units(job["sources"])
    if not units:
        return {"status": "invalid", "log": "solforge: no source unit (*.cu) among the sources "
                f"{sorted(job['sources'])}", "cubins": {}, "entries": {}, "options": public_options(opts),
                "compile_seconds": time.perf_counter() - t0}
    kernels = list(dict.fromkeys(job.get("kernels", [])))
    header_text = "\n".join(headers.values())
    pch_plan = _pch_plan(job, headers)
    logs, cubins, entries, ok = [], {}, {}, True
    for uname, src in units.items():
        exprs = [k for k in kernels if _is_name_expr(k) and _base_ident(k) in src + header_text]
        if pch_plan is None:
            good, log, cubin, lowered = _compile_unit(uname, src, headers, opts, exprs)
        else:
            good, log, cubin, lowered = _compile_unit_pch(uname, src, headers, exprs, *pch_plan)
        if log.strip():
            logs.append(log if len(units) == 1 else f"== {uname} ==\n{log}")
        if not good:
            ok = False
            continue
        cubins[uname] = cubin
        info = read_cubin(cubin)
        if info.sm != sm_of_arch(arch) or (info.arch and info.arch != arch):
            ok = False
            logs.append(f"solforge: {uname}: cubin targets {info.arch or info.sm}, asked for {arch}")
        funcs = set(info.functions)
        for e, low in lowered.items():
            entries.setdefault(e, {"unit": uname, "symbol": low})
        for k in kernels:
            if k in entries or _is_name_expr(k):
                continue
            if k in funcs:
                entries[k] = {"unit": uname, "symbol": k}
            else:  # a C++ (not extern "C") kernel without templates/namespaces: _Z<len><name>...
                mangled = [f for f in funcs if f.startswith(f"_Z{len(k)}{k}")]
                if len(mangled) == 1:
                    entries[k] = {"unit": uname, "symbol": mangled[0]}
    if ok:
        missing = [k for k in kernels if k not in entries]
        if missing:
            ok = False
            logs.append(f"solforge: kernel(s) {missing} not found in the compiled code; declare them "
                        "extern \"C\" __global__ (or name a template instance, e.g. \"gemm<128>\")")
    if ok:
        problems = check_launch_args(job.get("launches", []), entries, cubins)
        if problems:
            ok = False
            logs.extend(problems)
    return {"status": "ok" if ok else "error", "log": "\n".join(logs), "cubins": cubins if ok else {},
            "entries": entries if ok else {}, "options": public_options(opts),
            "compile_seconds": time.perf_counter() - t0, "compile_cpu_seconds": time.process_time() - c0}
