"""The GPU-verified gate of a kernel family: kernels_cuda/<dir>/family.json `"offered"`.

A family whose kernel has not yet been found correct on a GPU keeps `"offered": false` there:
`families_for` then leaves it out (the search must never be offered a kernel that failed
correctness), while `get_family(name)` and the benchmark scripts still reach it for its first GPU
check. A missing file or key counts as not offered.
"""

from __future__ import annotations

import json

from .base import CUDA_DIR, definition_of


def family_offered(source_dir: str) -> bool:
    try:
        return bool(json.loads((CUDA_DIR / source_dir / "family.json").read_text()).get("offered"))
    except (OSError, ValueError):
        return False


def family_offered_for(source_dir: str, problem_name: str) -> bool:
    """Offered for this problem: `"offered": true` and, where family.json lists `"offered_problems"`
    (the problems whose every workload a GPU check found correct), the problem among them. A family
    that serves several problems is opened problem by problem as each one passes its check."""
    try:
        data = json.loads((CUDA_DIR / source_dir / "family.json").read_text())
    except (OSError, ValueError):
        return False
    listed = data.get("offered_problems")
    return bool(data.get("offered")) and (listed is None or problem_name in listed)


class OfferedByProblem:
    """Family mixin for the families opened problem by problem: `offered` is family.json's
    `"offered"`, `offered_for(problem)` also wants the problem in `"offered_problems"` (filed by
    scripts/import_kernel_check.py when every variant was correct on every workload)."""

    source_dir: str

    @property
    def offered(self) -> bool:
        return family_offered(self.source_dir)

    def offered_for(self, problem) -> bool:
        return self.offered and family_offered_for(self.source_dir, definition_of(problem).name)
