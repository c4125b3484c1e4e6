"""Compile: Candidate -> cubins on a CPU machine (NVRTC for CUDA C++, the CuTe DSL for "cute"), cached;
plus the bare-box launcher (launcher.py) that loads and runs those cubins on the GPU.

Imports are lazy: the compile worker and the GPU box import submodules without pulling pydantic in.
"""

from __future__ import annotations

__all__ = ["compile_candidate", "stage", "CompileResult", "CompileStatus", "KernelEntry", "ParamSlot"]


def __getattr__(name):
    if name in ("compile_candidate", "stage"):
        from . import api

        return getattr(api, name)
    if name in ("CompileResult", "CompileStatus", "KernelEntry", "ParamSlot"):
        from . import result

        return getattr(result, name)
    raise AttributeError(name)
