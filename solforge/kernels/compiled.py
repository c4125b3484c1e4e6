"""The compiler as a kernel family: any problem the trace-driven compiler (solforge/compiler) can
lower gets its plan as a candidate. Matching is the compiler's own: trace, lower, plan; nothing
about the problem's name or wording.

Unlike the hand-written families it needs the workloads (the trace runs the reference at two of
them), so matches/param_space/instantiate take the Problem; a bare Definition is not served.
"""

from __future__ import annotations

from typing import Optional

from ..candidate import Candidate
from .base import Family, FamilyError, Spec
from .gate import family_offered


# The lowering of matmuls and convolutions, a tunable: 1 the GEMM template (wgmma / mma.sync / SIMT
# tiers, solforge/compiler/templates/gemm_adapter.py), the first candidate where the plan has a matmul
# or convolution and the template takes it (101 of 105 shapes correct on the H200 and 1.2x torch in
# geomean, data/results/compiler_templates; the generic kernel ran 8k GEMMs in ~500 ms, past any
# evaluation's time limit); 0 the generic tiled kernel (fp32 accumulation everywhere), the next point
# and the only one for plans without matmuls; 2 the GEMM template with fp32 multiplies on tensor
# cores as 3xTF32 (fp32-level error; SIMT fp32 ran large GEMMs at 0.47-0.64x torch's on the H200),
# a point after the template's where the plan multiplies fp32 operands. The evaluator's verdict
# decides between them.
GEMM_PARAM = "COMPILER_GEMM_TEMPLATE"
GEMM_LOWERING = {0: "generic", 1: "template", 2: "template_3xtf32"}
_GEMM_SEGMENTS = ("matmul", "conv")
# softmax(Q K^T) V patterns as the flash attention template (solforge/compiler/attention_segment.py),
# a tunable: offered (with the GEMM template for the other matmuls) where the matcher finds one, and
# then the first point (128 of 128 shapes correct on the H200, data/results/compiler_templates)
ATTN_PARAM = "COMPILER_ATTENTION"


def _outcome(problem, params: Optional[dict] = None):
    from ..compiler.api import compile_problem

    if not getattr(problem, "workloads", None) or not hasattr(problem, "definition"):
        return None
    gemm = GEMM_LOWERING.get(int((params or {}).get(GEMM_PARAM, 0) or 0), "generic")
    return compile_problem(problem, gemm=gemm, attention=bool(int((params or {}).get(ATTN_PARAM, 0) or 0)))


def answer_kept(problem) -> bool:
    """Whether the compiler's answer for this problem, already asked in this process, is one another
    process reads from the disk cache: a trace past its time box is not kept (compiler.api:
    compile_definition saves every other outcome), so asking again elsewhere traces again."""
    out = _outcome(problem)  # this process's memory: no second trace
    return not (out is not None and out.stage == "trace"
                and out.reason.startswith("tracing the reference took over"))


def _source_kb(cand) -> float:
    return sum(len(v) for v in cand.sources.values()) / 1000.0


def _template_first_max_kb() -> float:
    from ..settings import get

    return float(get().template_first_max_kb)


class CompiledFamily(Family):
    name = "compiler"
    description = ("trace-driven compiler: the reference's ATen graph lowered to generated kernels "
                   "(fused elementwise, reductions over any dims, tiled matmul / implicit-GEMM "
                   "convolution, scans, sorts, gathers and scatters) run in order")
    ops = ("any",)
    source_dir = "compiler"

    @property
    def offered(self) -> bool:
        return family_offered(self.source_dir)

    def matches(self, problem) -> bool:
        out = _outcome(problem)
        return bool(out is not None and out.ok)

    def analyze(self, defn) -> Optional[Spec]:
        return None  # a Definition alone has no workloads to trace at

    def param_space(self, problem) -> list[dict]:
        out = _outcome(problem)
        if out is None or not out.ok:
            return []
        generic = {**out.candidate.params, GEMM_PARAM: 0, ATTN_PARAM: 0}
        if not any(out.segments.get(k) for k in _GEMM_SEGMENTS):
            return [generic]
        # the template points: the flash attention plan where the matcher finds softmax(QK^T)V (it
        # never materialises the scores: the generic plans of a long-sequence attention ran out of
        # memory on the H200), then the GEMM template plan
        templates = []
        for params in ({GEMM_PARAM: 1, ATTN_PARAM: 1}, {GEMM_PARAM: 1, ATTN_PARAM: 0}):
            o = _outcome(problem, params)
            if o is not None and o.ok and (o.segments.get("attention") or not params[ATTN_PARAM]):
                templates.append(({**o.candidate.params, **params}, _source_kb(o.candidate)))
        # a plan with variants renders each variant's templates whole (one such plan: 858 kB of
        # source, 110 s of NVRTC against 7.5 s generic): a template point past
        # settings.template_first_max_kb comes after the generic plan, quick to compile; the
        # others go first, as in a plan without variants (the generic matmul ran projections
        # 20-50x slower than torch on the H200)
        bound = _template_first_max_kb() if out.segments.get("variants") else float("inf")
        space = ([t for t, kb in templates if kb <= bound] + [generic]
                 + [t for t, kb in reversed(templates) if kb > bound])
        # fp32 multiplies on tensor cores: the GEMM template's plan again with its fp32 GEMMs as
        # 3xTF32 (and the flash plan's, where there is one), after the points above
        for t, _ in templates:
            params = {**t, GEMM_PARAM: 2}
            o = _outcome(problem, params)
            if o is not None and o.ok and any("sfg::gemm_tf32<" in v for v in o.candidate.sources.values()):
                space.append({**o.candidate.params, **params})
        return space

    def default_params(self, problem) -> dict:
        space = self.param_space(problem)
        if not space:
            raise FamilyError(f"compiler does not serve {getattr(problem, 'name', problem)}")
        return space[0]

    def instantiate(self, problem, params: Optional[dict] = None) -> Candidate:
        out = _outcome(problem, params)
        if out is None or not out.ok:
            why = out.reason if out is not None else "no workloads"
            raise FamilyError(f"compiler does not serve {getattr(problem, 'name', problem)}: {why}")
        cand = out.candidate.model_copy(deep=True)
        if params:
            unknown = set(params) - set(cand.params) - {GEMM_PARAM, ATTN_PARAM}
            if unknown:
                raise FamilyError(f"compiler: unknown params {sorted(unknown)}")
            cand.params.update(params)
        # the lowering choice travels as a param too: the attempt's params say which one ran
        cand.params[GEMM_PARAM] = int((params or {}).get(GEMM_PARAM, 0) or 0)
        cand.params[ATTN_PARAM] = int((params or {}).get(ATTN_PARAM, 0) or 0)
        defn = problem.definition
        cand.check_tensor_args(set(defn.inputs), set(defn.outputs))
        return cand
