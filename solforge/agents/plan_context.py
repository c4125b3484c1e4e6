"""The plan an LLM session starts from: the compiler's candidate for the problem, seen as segments
(one kernel each, launched in order), rendered into the prompt within a character budget, and the
base a segment reply is spliced into.

The plan comes from the compiler's public API only (solforge.compiler.api: the Candidate and the
traced op counts); per segment, the kind is read from the kernel's name as the compiler writes it
(`k<i>_<op>`), and the source span from the source text (segments.py).

Times per launch: the evaluator times the whole launch sequence of a call, so nothing records a
kernel's own time yet. `LaunchTimes` is the seam for that: a callable (problem, candidate) ->
{kernel name: ms}; when it gives nothing, the prompt says the split is not measured.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from typing import Callable, Optional

from ..candidate import Candidate
from .prompts import clip
from .segments import (Segment, SegmentError, base_name, device_functions, replace_segment,
                       segments_of, shared_text)

log = logging.getLogger(__name__)

PLAN_BUDGET_CHARS = 24000   # the plan's part of the first prompt (~6k tokens)
MIN_SEGMENT_CHARS = 600     # below this a segment's source is listed without its text

PlanSource = Callable[[object], Optional[tuple[Candidate, dict]]]   # problem -> (plan, traced ops)
LaunchTimes = Callable[[object, Candidate], dict]                    # -> {kernel: ms}

# the compiler names its kernels k<i>_<what>; <what> says the kind of segment
_KINDS = {"mm": "matmul", "bmm": "matmul", "addmm": "matmul", "conv": "convolution (implicit GEMM)",
          "copy": "pointwise (layout copy)", "out": "pointwise (fused elementwise into the outputs)",
          "sum": "reduction", "prod": "reduction", "amax": "reduction", "amin": "reduction",
          "max": "reduction", "min": "reduction", "mean": "reduction", "var": "reduction",
          "any": "reduction", "all": "reduction", "argmax": "reduction", "argmin": "reduction",
          "sort": "sort", "topk": "sort (top-k)", "scatter": "scatter", "index_put": "scatter"}
_COMPILER_NAME = re.compile(r"^k\d+_(\w+)$")


def segment_kind(kernel: str) -> str:
    m = _COMPILER_NAME.match(kernel)
    if not m:
        return "kernel"
    what = m.group(1)
    if what.startswith("cum"):
        return "scan"
    return _KINDS.get(what, what)


def compiler_plan(problem) -> Optional[tuple[Candidate, dict]]:
    """The compiler's candidate for the problem and its traced op counts, or None when it does not
    serve it (the reason is logged, not raised: the session goes on without a plan)."""
    from ..compiler.api import compile_problem

    if not getattr(problem, "workloads", None):
        return None
    out = compile_problem(problem)
    if not out.ok:
        log.info("%s: no compiler plan (%s: %s)", problem.name, out.stage, out.reason)
        return None
    return out.candidate.model_copy(deep=True), dict(out.ops)


@dataclass
class Plan:
    candidate: Candidate                 # the base a segment reply is spliced into
    segments: list[Segment]
    origin: str                          # what the base is, for the prompt
    ops: dict = field(default_factory=dict)          # traced op counts of the whole problem
    launch_ms: dict = field(default_factory=dict)    # kernel -> measured ms (empty: not measured)
    score: Optional[float] = None        # the base's SOL score when it was measured
    covers_best: bool = False            # the base is the best candidate: no separate listing

    def splice(self, kernel: str, source: str, launch: Optional[dict] = None,
               notes: str = "") -> Candidate:
        return replace_segment(self.candidate, self.segments, kernel, source, launch, notes)


def make_plan(plan: Candidate, ops: dict, best: Optional[Candidate] = None,
              best_score: Optional[float] = None) -> Optional[Plan]:
    """The session's plan. The base is the compiler's candidate, or the best candidate so far when
    that is a refinement of it (the same kernels launched in the same order, e.g. an earlier
    spliced segment), so a segment reply builds on what already works best."""
    try:
        segs = segments_of(plan)
    except SegmentError as e:
        log.info("compiler plan not split into segments: %s", e)
        return None
    if best is None or best.language != "cuda":
        return Plan(plan, segs, "the compiler's plan", ops)
    if best.source_hash() == plan.source_hash():
        return Plan(plan, segs, "the compiler's plan (also the best candidate so far)", ops,
                    score=best_score, covers_best=True)
    names = [base_name(x.kernel) for x in plan.launches]
    if [base_name(x.kernel) for x in best.launches] == names:
        try:
            return Plan(best, segments_of(best), "the best candidate so far, a refinement of the "
                        "compiler's plan", ops, score=best_score, covers_best=True)
        except SegmentError:
            pass
    return Plan(plan, segs, "the compiler's plan", ops)


def _launch_line(cand: Candidate, seg: Segment) -> str:
    rows = []
    for i in seg.launches:
        d = cand.launches[i].model_dump(exclude_none=True)
        d.pop("kernel", None)
        rows.append(f"launch #{i + 1}: " + json.dumps(d))
    return "\n".join(rows)


def _shares(lengths: list[int], budget: int) -> list[int]:
    """Water-filling: short texts whole, the rest share what is left evenly."""
    out = [0] * len(lengths)
    left, todo = budget, sorted(range(len(lengths)), key=lambda i: lengths[i])
    while todo:
        each = left // len(todo)
        i = todo[0]
        if lengths[i] <= each:
            out[i] = lengths[i]
            left -= lengths[i]
            todo.pop(0)
            continue
        for j in todo:
            out[j] = each
        break
    return out


def render(plan: Plan, budget_chars: int = PLAN_BUDGET_CHARS) -> str:
    """The plan's section of the first prompt, at most about `budget_chars` characters."""
    cand, segs = plan.candidate, plan.segments
    score = f", SOL score {plan.score:.3f}" if plan.score is not None else ""
    head = [f"## Plan: {plan.origin} ({len(segs)} segment{'s' if len(segs) != 1 else ''}, "
            f"launched in order{score})",
            "Start from it: reply with a whole Candidate, or with ONE replaced segment (see "
            "'Segment replies'); a segment reply keeps everything else below as it is."]
    if plan.ops:
        head.append("Traced ops of the reference: " + ", ".join(
            f"{k.removeprefix('aten.').removesuffix('.default')} x{v}"
            for k, v in sorted(plan.ops.items(), key=lambda kv: -kv[1])))
    if plan.launch_ms:
        total = sum(plan.launch_ms.values()) or 1.0
        head.append("Measured time per segment (ms, share of the launch sequence): " + ", ".join(
            f"{k} {v:.4g} ({100 * v / total:.0f}%)" for k, v in plan.launch_ms.items()))
    else:
        head.append("Time per segment: not measured (the evaluator times the whole launch sequence "
                    "per workload; those totals are in the workload table and the latest attempts).")
    head.append(f"Candidate fields outside the sources: params {json.dumps(cand.params)}, "
                f"workspace {json.dumps(cand.workspace)}, workspace_zero "
                f"{json.dumps(cand.workspace_zero)}, options {json.dumps(cand.options)}.")
    shared = shared_text(cand, segs)
    texts = [s.text(cand) for s in segs]
    fixed = sum(len(x) for x in head) + sum(len(_launch_line(cand, s)) + 80 for s in segs)
    left = max(0, budget_chars - fixed)
    shared_budget = min(len(shared), max(1500, left // 5))
    seg_budget = _shares([len(t) for t in texts], max(0, left - shared_budget))
    parts = ["\n".join(head)]
    if shared:
        block = "### Shared source (outside the segments)\n```cuda\n" + clip(shared, shared_budget) \
            + "\n```"
        if len(shared) > shared_budget:  # what was cut still names what the kernels may call
            block += "\n`__device__` functions it defines: " + ", ".join(device_functions(shared))
        parts.append(block)
    for n, (seg, text, b) in enumerate(zip(segs, texts, seg_budget), 1):
        ms = plan.launch_ms.get(seg.kernel)
        timing = f", measured {ms:.4g} ms" if ms is not None else ""
        block = [f"### Segment {n}/{len(segs)}: `{seg.kernel}` ({segment_kind(seg.kernel)}, "
                 f"{seg.n_params} parameters{timing})", _launch_line(cand, seg)]
        if b >= min(MIN_SEGMENT_CHARS, len(text)):
            block.append("```cuda\n" + clip(text, b) + "\n```")
        else:
            block.append(f"(source of {len(text)} characters not shown: prompt budget)")
        parts.append("\n".join(block))
    return "\n\n".join(parts)
