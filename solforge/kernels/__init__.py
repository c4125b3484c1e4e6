"""Kernel families: parameterized kernels that the offline agent searches over.

    from solforge.kernels import families_for
    for fam in families_for(problem):            # Problem (or Definition)
        for params in fam.param_space(problem):  # tunables, best guess first
            cand = fam.instantiate(problem, params)   # solforge.candidate.Candidate

Sources live in kernels_cuda/<family>/ and kernels_cute/<family>/; the best measured solution per
problem in kernels_cuda/<family>/best/<problem>.json.
"""

from __future__ import annotations

from .attention_decode import AttentionDecodeFamily
from .attention_prefill import AttentionPrefillFamily
from .attention_ragged import AttentionRaggedFamily
from .base import Family, FamilyError, Spec, definition_of
from .compiled import CompiledFamily
from .cute_rmsnorm import CuteRMSNormFamily
from .elementwise import ActivationFamily
from .fp8_gemm import Fp8GemmFamily
from .fp8_gemm_wgmma import Fp8GemmWgmmaFamily
from .gemm import GemmFamily
from .gemm_wgmma import GemmWgmmaFamily
from .moe_group_mask import MoeGroupMaskFamily
from .nvfp4_moe import Nvfp4MoeFamily
from .pointwise import PointwiseFamily
from .pointwise_rows import PointwiseRowsFamily
from .rmsnorm import RMSNormFamily
from .rope import RopeFamily
from .rope_freqs import RopeFreqsFamily
from .softmax import SoftmaxFamily
from .softmax_backward import SoftmaxBackwardFamily

FAMILIES: list[Family] = [RMSNormFamily(), GemmFamily(), ActivationFamily(), CuteRMSNormFamily(),
                          GemmWgmmaFamily(), SoftmaxFamily(), RopeFamily(),
                          RopeFreqsFamily(), SoftmaxBackwardFamily(), AttentionPrefillFamily(),
                          Nvfp4MoeFamily(), AttentionDecodeFamily(),
                          AttentionRaggedFamily(), Fp8GemmFamily(), Fp8GemmWgmmaFamily(), MoeGroupMaskFamily()]
# Generic families go last, and serve only problems no hand-written family above claims.
GENERIC: list[Family] = [PointwiseFamily(), PointwiseRowsFamily()]
FAMILIES += GENERIC
# The compiler serves what it can trace and lower: first where no family above serves, else extra.
COMPILER = CompiledFamily()
FAMILIES.append(COMPILER)


def all_families() -> list[Family]:
    return list(FAMILIES)


def get_family(name: str) -> Family:
    for f in FAMILIES:
        if f.name == name:
            return f
    raise KeyError(f"no kernel family {name!r} (known: {[f.name for f in FAMILIES]})")


def families_for(problem, compiler: bool = False) -> list[Family]:
    """The families whose kernels compute this problem's function, most specific first.

    A family whose `offered` is false (not yet found correct on a GPU, see its family.json) is
    left out: the search must never be offered a kernel that failed correctness.

    compiler=True (the offline worker) appends the compiler's plan: the only candidate where no
    family serves the problem, an extra one otherwise. Off by default: it traces the reference
    (seconds per problem, cached on disk)."""
    specific = [f for f in FAMILIES if f not in GENERIC and f is not COMPILER and _offered(f, problem)
                and f.matches(problem)]
    found = specific or [f for f in GENERIC if _offered(f, problem) and f.matches(problem)]
    if compiler and _offered(COMPILER, problem) and COMPILER.matches(problem):
        found.append(COMPILER)
    return found


def _offered(fam: Family, problem) -> bool:
    """The family's GPU gate; `offered_for(problem)` where a family gates problem by problem."""
    per_problem = getattr(fam, "offered_for", None)
    if per_problem is not None:
        return per_problem(problem)
    return getattr(fam, "offered", True)


__all__ = ["Family", "FamilyError", "Spec", "FAMILIES", "all_families", "get_family",
           "families_for", "definition_of"]
