"""Compile a family's Candidate to a cubin.

Uses `solforge.compile.compile_candidate` when it is there; otherwise a direct NVRTC call with the
same conventions (params as -D defines, headers from the venv's NVIDIA wheels, sm_90a), so the
family tests and the benchmark do not wait on the compile stage. The GPU box runs this too: it
needs only cuda-python and the nvidia-cuda-runtime headers (or an include folder given in
SOLFORGE_CUDA_INCLUDE).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Optional

from ..candidate import Candidate


class BuildError(RuntimeError):
    pass


def _include_dirs() -> list[str]:
    env = os.environ.get("SOLFORGE_CUDA_INCLUDE")
    if env:
        return [d for d in env.split(os.pathsep) if d]
    try:
        from ..compile.toolchain import include_dirs
        return list(include_dirs())
    except Exception:
        pass
    # fall back: the nvidia wheel folder next to the installed cuda package
    import importlib.util
    for mod in ("nvidia.cu13", "nvidia.cuda_runtime"):
        try:
            spec = importlib.util.find_spec(mod)
        except ModuleNotFoundError:
            continue
        if spec and spec.submodule_search_locations:
            inc = Path(list(spec.submodule_search_locations)[0]) / "include"
            if (inc / "cuda_fp16.h").exists():
                return [str(inc)]
    raise BuildError("no CUDA headers found (install nvidia-cuda-runtime or set SOLFORGE_CUDA_INCLUDE)")


def _defines(params: dict) -> list[str]:
    out = []
    for k, v in sorted(params.items()):
        if isinstance(v, bool):
            v = int(v)
        out.append(f"-D{k}={v!r}" if isinstance(v, float) else f"-D{k}={v}")
    return out


def nvrtc_compile(source: str, params: dict, arch: str = "sm_90a", options: Optional[list] = None,
                  name: str = "kernel.cu") -> tuple[bytes, str]:
    """(cubin, log). Raises BuildError with the compiler log on failure."""
    from cuda.bindings import nvrtc

    def check(res, what):
        err = res[0] if isinstance(res, tuple) else res
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise BuildError(f"{what}: {err}")
        return res

    _, prog = check(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []),
                    "nvrtcCreateProgram")
    opts = [f"--gpu-architecture={arch}", "-std=c++17", "-default-device",
            *(f"--include-path={d}" for d in _include_dirs()), *_defines(params),
            *(options or [])]
    res = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
    _, n = nvrtc.nvrtcGetProgramLogSize(prog)
    buf = b" " * n
    nvrtc.nvrtcGetProgramLog(prog, buf)
    log = buf.decode(errors="replace").rstrip("\x00").strip()
    if res[0] != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        nvrtc.nvrtcDestroyProgram(prog)
        raise BuildError(f"NVRTC failed for {name}:\n{log}")
    _, size = check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
    cubin = b" " * size
    check(nvrtc.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
    nvrtc.nvrtcDestroyProgram(prog)
    return cubin, log


def compile_cuda_candidate(cand: Candidate, arch: str = "sm_90a") -> tuple[bytes, str]:
    """One cubin for a CUDA candidate (its sources concatenated in name order)."""
    if cand.language != "cuda":
        raise BuildError(f"{cand.problem}: language {cand.language!r} is not compiled here")
    source = "\n".join(cand.sources[k] for k in sorted(cand.sources))
    return nvrtc_compile(source, cand.params, arch, cand.options,
                         name=re.sub(r"[^\w.]", "_", sorted(cand.sources)[0]))
