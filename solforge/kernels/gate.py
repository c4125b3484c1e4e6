"""The GPU-verified gate of a kernel family: kernels_cuda/<dir>/family.json `"offered"`.

A family whose kernel has not yet been found correct on a GPU keeps `"offered": false` there:
`families_for` then leaves it out (the search must never be offered a kernel that failed
correctness), while `get_family(name)` and the benchmark scripts still reach it for its first GPU
check. A missing file or key counts as not offered.

The gate is one boolean per family, never a list of problems: which problems a family serves is
what its structural matcher (`Family.analyze`) says, and the evaluator checks every candidate on
every workload, so a claim that turns out wrong costs one failed attempt, not a wrong result.
"""

from __future__ import annotations

import json

from .base import CUDA_DIR


def family_offered(source_dir: str) -> bool:
    try:
        return bool(json.loads((CUDA_DIR / source_dir / "family.json").read_text()).get("offered"))
    except (OSError, ValueError):
        return False


class OfferedByFamilyJson:
    """Family mixin: `offered` is kernels_cuda/<source_dir>/family.json's `"offered"`."""

    source_dir: str

    @property
    def offered(self) -> bool:
        return family_offered(self.source_dir)
