"""Compile the GPU-check sample candidates (samples.py) here, on a CPU, and stage each for the GPU box.
Its own module because it sits above the compiler (api.py), while samples.py stays a leaf that the
CuTe worker's warm-up (cute_backend.py) can import without pulling the compiler back in."""

from __future__ import annotations

from pathlib import Path

from .api import compile_candidate, stage
from .samples import gpu_check_cases


def build_stages(folder, arch: str = "sm_90a") -> dict[str, str]:
    """Compile every GPU-check case here (CPU) and stage it under folder/<case>/; returns statuses."""
    out = {}
    for name, cand in gpu_check_cases().items():
        res = compile_candidate(cand, arch)
        out[name] = res.status.value if res.ok else f"{res.status.value}: {res.log}"
        if res.ok:
            stage(cand, res, Path(folder) / name)
    return out
