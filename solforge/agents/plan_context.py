"""The plan an LLM session starts from: the compiler's candidate for the problem, seen as segments
(one kernel each, launched in order), rendered into the prompt within a character budget, and the
base a segment reply is spliced into.

The plan comes from the compiler's public API only (solforge.compiler.api: the Candidate and the
traced op counts); per segment, the kind is read from the kernel's name as the compiler writes it
(`k<i>_<op>`), and the source span from the source text (segments.py).

Times per launch: the evaluator's profiler records every kernel of a call, and each workload's
row keeps each kernel's median time within a call (eval_results.kernel_ms). `LaunchTimes` reads
them: a callable (problem, candidate) -> {kernel name: ms} (agents.history.launch_times, the
newest evaluation of the same source); when it gives nothing, the prompt says the split is not
measured.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from typing import Callable, Optional

from ..candidate import Candidate
from .prompts import clip
from .segments import (Segment, SegmentError, base_name, device_functions, headers,
                       replace_segment, segments_of, shared_text, signature)

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


_HEAVY = ("matmul", "convolution")


def _priority(plan: Plan, seg: Segment, n: int) -> tuple:
    """Which sources to show first when not all fit: the measured slowest, else the heavy kinds
    (matmul, convolution), then reductions/scans/sorts, then the rest; in launch order within."""
    ms = plan.launch_ms.get(seg.kernel)
    kind = segment_kind(seg.kernel)
    rank = 0 if kind.startswith(_HEAVY) else 2 if kind.startswith(("pointwise", "kernel")) else 1
    return (0 if ms is not None else 1, -(ms or 0.0), rank, n)


def _budgets(plan: Plan, texts: list[str], same_as: dict, budget: int) -> dict[int, int]:
    """Characters of source shown per segment index: whole texts greedily in priority order, then one
    clipped text in what is left; a segment equal to an earlier one up to its name costs nothing."""
    order = sorted(range(len(texts)), key=lambda i: _priority(plan, plan.segments[i], i))
    out, left = {}, budget
    for i in order:
        if i not in same_as and len(texts[i]) <= left:
            out[i] = len(texts[i])
            left -= len(texts[i])
    for i in order:
        if i not in out and i not in same_as and left >= MIN_SEGMENT_CHARS:
            out[i], left = left, 0
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
    hdrs = headers(cand)
    if hdrs:  # library code: named, not shown; a segment reply keeps them, a whole Candidate may not
        head.append("Headers the source includes (kept as they are, not shown): " + ", ".join(
            f"`{f}` ({n} characters)" for f, n in hdrs.items()) + ".")
    shared = shared_text(cand, segs)
    texts = [s.text(cand) for s in segs]
    first: dict[str, int] = {}
    same_as: dict[int, int] = {}   # segment index -> earlier segment it equals up to its name
    for i, (seg, text) in enumerate(zip(segs, texts)):
        key = re.sub(rf"\b{re.escape(seg.kernel)}\b", "@", text)
        if key in first:
            same_as[i] = first[key]
        else:
            first[key] = i
    fixed = sum(len(x) for x in head) + sum(len(_launch_line(cand, s)) + 100 for s in segs) \
        + sum(len(signature(t)) + 90 for t in texts)
    left = max(budget_chars // 3, budget_chars - fixed)  # some source even when many launches
    shared_budget = min(len(shared), max(1500, left // 8))
    shown = _budgets(plan, texts, same_as, max(0, left - shared_budget))
    parts = ["\n".join(head)]
    if shared:
        block = "### Shared source (outside the segments)\n```cuda\n" + clip(shared, shared_budget) \
            + "\n```"
        if len(shared) > shared_budget:  # what was cut still names what the kernels may call
            block += "\n`__device__` functions it defines: " + ", ".join(device_functions(shared))
        parts.append(block)
    blocks = {}
    for n, (seg, text) in enumerate(zip(segs, texts)):
        ms = plan.launch_ms.get(seg.kernel)
        timing = f", measured {ms:.4g} ms" if ms is not None else ""
        title = (f"### Segment {n + 1}/{len(segs)}: `{seg.kernel}` ({segment_kind(seg.kernel)}, "
                 f"{seg.n_params} parameters{timing})")
        block = [title, _launch_line(cand, seg)]
        if n in same_as:
            block.append(f"(source: the same as `{segs[same_as[n]].kernel}` but named `{seg.kernel}`)")
        elif n in shown:
            block.append("```cuda\n" + clip(text, shown[n]) + "\n```")
        else:
            block.append(f"(source of {len(text)} characters not shown: prompt budget; its "
                         f"signature:)\n```cuda\n{signature(text)} {{ ... }}\n```")
        blocks[n] = ("\n".join(block), f"### Segment {n + 1}/{len(segs)}: `{seg.kernel}` "
                     f"({segment_kind(seg.kernel).split(' (')[0]}; not shown: prompt budget)")
    # a plan with very many segments: the least important ones shrink to one line
    size = sum(len(p) + 2 for p in parts) + sum(len(b[0]) + 2 for b in blocks.values())
    # segments without source shrink first, then those with, each from its least important end
    detailed = sorted([n for n in blocks if n not in shown],
                      key=lambda i: _priority(plan, segs[i], i), reverse=True) + \
        sorted([n for n in blocks if n in shown], key=lambda i: _priority(plan, segs[i], i),
               reverse=True)
    compact = set()
    for n in detailed:
        if size <= budget_chars:
            break
        size -= len(blocks[n][0]) - len(blocks[n][1])
        compact.add(n)
    parts += [blocks[n][1] if n in compact else blocks[n][0] for n in sorted(blocks)]
    return "\n\n".join(parts)
