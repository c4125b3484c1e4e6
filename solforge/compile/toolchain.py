"""Where the compiler and its headers come from, and which options a candidate may add.

Headers come ONLY from NVIDIA's wheels installed next to cuda-python (nvidia-cuda-runtime for
cuda_bf16.h, cuda_fp8.h, ...; nvidia-cuda-cccl for cuda/std, cuda/barrier, cuda/ptx). A system CUDA
folder (/usr/local/cuda, $CUDA_HOME) is never searched: its version drifts from the NVRTC we load,
and a compile must mean the same thing on every machine that has the same wheels.
"""

from __future__ import annotations

import importlib.metadata as md
import re
from functools import lru_cache
from pathlib import Path

SUPPORTED_ARCHS = ("sm_90a", "sm_100a", "sm_90", "sm_100", "sm_103a", "sm_120a")


class ToolchainError(RuntimeError):
    pass


def _wheel_dir_with(dist: str, relpath_suffix: str) -> Path | None:
    """The folder inside an installed distribution that holds a file whose path ends in suffix."""
    try:
        files = md.distribution(dist).files or []
    except md.PackageNotFoundError:
        return None
    for f in files:
        p = str(f).replace("\\", "/")
        if p.endswith(relpath_suffix):
            full = Path(md.distribution(dist).locate_file(f)).resolve()
            return Path(str(full)[: -len(relpath_suffix)].rstrip("/"))
    return None


@lru_cache(maxsize=1)
def include_dirs() -> tuple[str, ...]:
    """Include folders from the venv's NVIDIA wheels: the runtime headers, then CCCL."""
    runtime = _wheel_dir_with("nvidia-cuda-runtime", "include/cuda_bf16.h")
    cccl = _wheel_dir_with("nvidia-cuda-cccl", "include/cccl/cuda/barrier")
    if cccl is None:  # older cccl wheels put cuda/ directly under include/
        cccl = _wheel_dir_with("nvidia-cuda-cccl", "include/cuda/barrier")
        cccl = cccl / "include" if cccl else None
    else:
        cccl = cccl / "include" / "cccl"
    if runtime is None:
        raise ToolchainError("nvidia-cuda-runtime is not installed in this environment "
                             "(it provides cuda_bf16.h, cuda_fp8.h): pip install nvidia-cuda-runtime")
    if cccl is None:
        raise ToolchainError("nvidia-cuda-cccl is not installed in this environment "
                             "(it provides cuda/std, cuda/barrier): pip install nvidia-cuda-cccl")
    dirs = (str(runtime / "include"), str(cccl))
    for d in dirs:
        if d.startswith("/usr/local/cuda") or not Path(d).is_dir():
            raise ToolchainError(f"refusing include folder {d}: headers must come from the venv's wheels")
    return dirs


@lru_cache(maxsize=1)
def nvrtc_version() -> str:
    from cuda.bindings import nvrtc

    err, major, minor = nvrtc.nvrtcVersion()
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise ToolchainError(f"nvrtcVersion failed: {err}")
    # the wheel's patch level, so a cache never mixes 13.0.48 and 13.0.88 builds
    try:
        wheel = md.version("nvidia-cuda-nvrtc")
    except md.PackageNotFoundError:
        wheel = ""
    return f"{major}.{minor}" + (f" (nvidia-cuda-nvrtc {wheel})" if wheel else "")


def check_arch(arch: str) -> str:
    from cuda.bindings import nvrtc

    m = re.fullmatch(r"sm_(\d+)([af]?)", arch)
    if not m:
        raise ToolchainError(f"arch {arch!r} is not of the form sm_90a / sm_100a")
    _, archs = nvrtc.nvrtcGetSupportedArchs()
    if int(m.group(1)) not in archs:
        raise ToolchainError(f"this NVRTC ({nvrtc_version()}) cannot target {arch}; "
                             f"supported: {['sm_%d' % a for a in archs]}")
    return arch


# Options a candidate may add. Include paths, pre-includes and output-kind switches are refused:
# they would reach outside the wheels or turn the cubin into something else (PTX, LTO IR).
_ALLOWED_OPTION = re.compile(
    r"^(-lineinfo|--generate-line-info|-G|--device-debug|--use_fast_math|-use_fast_math"
    r"|--ftz=(true|false)|--prec-div=(true|false)|--prec-sqrt=(true|false)|--fmad=(true|false)"
    r"|-ftz=(true|false)|-prec-div=(true|false)|-prec-sqrt=(true|false)|-fmad=(true|false)"
    r"|--extra-device-vectorization|--restrict|-restrict|--std=c\+\+(17|20)|-std=c\+\+(17|20)"
    r"|--maxrregcount=\d+|-maxrregcount=\d+|--dopt=(on|off)|-dopt=(on|off)"
    r"|--ptxas-options=[-\w=,.]+|-Xptxas=[-\w=,.]+|--split-compile=\d+|-split-compile=\d+"
    r"|-D[A-Za-z_]\w*(=[^\s]*)?|-U[A-Za-z_]\w*|--diag-suppress=[\d,]+|-diag-suppress=[\d,]+"
    r"|-w|--disable-warnings|-Wno-deprecated-declarations)$"
)


def check_options(options: list[str]) -> list[str]:
    bad = [o for o in options if not _ALLOWED_OPTION.match(o)]
    if bad:
        raise ToolchainError(f"compiler option(s) not allowed: {bad} (include paths, output-kind "
                             "switches and -arch come from solforge, not from the candidate)")
    return list(options)


def define_options(params: dict) -> list[str]:
    """Candidate params as -D NAME=VALUE (bools as 1/0; strings verbatim, e.g. a type name)."""
    out = []
    for name, value in sorted(params.items()):
        if not re.fullmatch(r"[A-Za-z_]\w*", name):
            raise ToolchainError(f"param name {name!r} is not a C identifier")
        if isinstance(value, bool):
            value = int(value)
        if isinstance(value, float):
            value = repr(value)
        value = str(value)
        if any(c in value for c in "\n\r\0"):
            raise ToolchainError(f"param {name!r} has a line break in its value")
        out.append(f"-D{name}={value}")
    return out


def base_options(arch: str) -> list[str]:
    """What solforge always passes: the arch, C++17, the wheels' include folders."""
    return [f"--gpu-architecture={arch}", "-std=c++17", *(f"--include-path={d}" for d in include_dirs())]
