"""Prompts for the LLM worker, built from protocol.md (the one source of the rules) and the problem.

The system message is the protocol (format, rules, tests, tools) plus the guide of the language asked
for; the user message is the problem: definition, reference, workload shapes, target GPU and its
roofline numbers, the best source so far and the feedback of the latest attempts.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Optional, Sequence

from .outcome import Outcome

PROTOCOL_FILE = Path(__file__).with_name("protocol.md")
_SECTION = re.compile(r"<!-- section: ([a-z0-9-]+) -->\n")
MAX_WORKLOADS_SHOWN = 12
MAX_LOG_CHARS = 4000


@cache
def protocol_sections() -> dict[str, str]:
    """protocol.md split at its `<!-- section: name -->` markers; the text before the first is 'intro'."""
    text = PROTOCOL_FILE.read_text()
    parts = _SECTION.split(text)
    out = {"intro": parts[0].strip()}
    for name, body in zip(parts[1::2], parts[2::2]):
        out[name] = body.strip()
    return out


def system_prompt(language: str, with_tools: bool = True, with_plan: bool = False) -> str:
    s = protocol_sections()
    names = ["intro", "format"] + (["segment"] if with_plan else []) + ["rules", "tests"]
    names += ["tools"] if with_tools else []
    names.append("guide-cute" if language == "cute" else "guide-cuda")
    return "\n\n".join(s[n] for n in names if n in s)


@dataclass
class GpuInfo:
    """The target GPU as the model needs it: name, arch, and the roofline ceilings."""

    name: str
    arch: str
    dram_bytes_per_s: Optional[float] = None
    peaks: dict[str, float] = field(default_factory=dict)  # unit -> FLOP/s
    sm_count: Optional[int] = None
    l2_bytes: Optional[int] = None

    def describe(self) -> str:
        lines = [f"Target GPU: {self.name} ({self.arch})"]
        if self.sm_count:
            lines.append(f"- {self.sm_count} SMs" + (f", L2 {self.l2_bytes / 2**20:.0f} MiB"
                                                     if self.l2_bytes else ""))
        if self.dram_bytes_per_s:
            lines.append(f"- DRAM bandwidth {self.dram_bytes_per_s / 1e12:.2f} TB/s")
        for unit, f in sorted(self.peaks.items()):
            lines.append(f"- {unit}: {f / 1e12:.1f} TFLOP/s dense")
        return "\n".join(lines)


@dataclass
class WorkloadSol:
    """One workload's roofline: speed-of-light time, bound, and baseline time (when measured)."""

    uuid: str
    axes: dict
    t_sol_ms: Optional[float] = None
    t_base_ms: Optional[float] = None
    t_base_variant: Optional[str] = None  # which baseline gave T_b: eager or compile
    bound: str = ""
    source: str = ""


def problem_prompt(problem, language: str, gpu: GpuInfo, sols: Sequence[WorkloadSol],
                   best_source: Optional[dict] = None, best_score: Optional[float] = None,
                   feedback: Sequence[tuple[str, Outcome]] = (), plan_text: str = "") -> str:
    """The user message. `best_source` is a Candidate as a dict; `feedback` (label, Outcome) pairs,
    newest last; `plan_text` the plan's section (plan_context.render), already within its budget."""
    d = problem.definition
    parts = [f"# Problem: {d.name}"]
    if d.description:
        parts.append(d.description.strip())
    spec = {"axes": {k: v.model_dump(exclude_none=True) for k, v in d.axes.items()},
            "inputs": {k: v.model_dump(exclude_none=True) for k, v in d.inputs.items()},
            "outputs": {k: v.model_dump(exclude_none=True) for k, v in d.outputs.items()}}
    if d.constraints:
        spec["constraints"] = d.constraints
    parts.append("## Definition\n```json\n" + json.dumps(spec, indent=1) + "\n```")
    parts.append("## Reference (PyTorch)\n```python\n" + d.reference.strip() + "\n```")
    parts.append(_workload_table(problem, sols))
    parts.append("## " + gpu.describe())
    parts.append(f"Write the candidate in language `{language}`; the problem name is `{d.name}`.")
    if plan_text:
        parts.append(plan_text)
    if best_source:
        score = f" (SOL score {best_score:.3f})" if best_score is not None else ""
        parts.append(f"## Best candidate so far{score}\nImprove on it.\n```json\n"
                     + json.dumps(best_source, indent=1) + "\n```")
    if feedback:
        parts.append("## Latest attempts (newest last)\n" + "\n\n".join(
            format_feedback(label, o) for label, o in feedback))
    return "\n\n".join(parts)


def _workload_table(problem, sols: Sequence[WorkloadSol]) -> str:
    by_uuid = {s.uuid: s for s in sols}
    rows = ["| workload | axes | scalars | tolerance (atol/rtol/ratio) | T_sol ms | T_base ms | bound |",
            "|---|---|---|---|---|---|---|"]
    wls = problem.workloads
    for w in wls[:MAX_WORKLOADS_SHOWN]:
        s = by_uuid.get(w.uuid)
        tol = w.workload.tolerance
        var = {k: w.axes[k] for k in problem.definition.var_axes if k in w.axes}
        rows.append(f"| {w.uuid[:8]} | {json.dumps(var)} | {json.dumps(w.scalars())} | "
                    f"{tol.max_atol}/{tol.max_rtol}/{tol.required_matched_ratio} | "
                    f"{_ms(s.t_sol_ms if s else None)} | {_ms(s.t_base_ms if s else None)} | "
                    f"{s.bound if s else ''} |")
    more = f"\n({len(wls) - MAX_WORKLOADS_SHOWN} more workloads not shown)" if len(wls) > MAX_WORKLOADS_SHOWN else ""
    return f"## Workloads ({len(wls)})\n" + "\n".join(rows) + more


def _ms(x: Optional[float]) -> str:
    return "?" if x is None else f"{x:.4g}"


def format_feedback(label: str, o: Outcome) -> str:
    lines = [f"### {label}: {o.status.value}" + (f" - {o.message}" if o.message else "")]
    if o.compile_log and o.status.value in ("compile_error", "parse_error", "invalid"):
        lines.append("```\n" + clip(o.compile_log, MAX_LOG_CHARS) + "\n```")
    if o.workloads:
        lines.append("| workload | status | correct | max_abs_err | max_rel_err | matched | ms | "
                     "T_sol ms | SOL score |")
        lines.append("|---|---|---|---|---|---|---|---|---|")
        for w in o.workloads[:MAX_WORKLOADS_SHOWN]:
            lines.append(f"| {w.uuid[:8]} | {w.status} | {w.correct} | {_g(w.max_abs_err)} | "
                         f"{_g(w.max_rel_err)} | {_g(w.matched_ratio)} | {_g(w.median_ms)} | "
                         f"{_g(w.t_sol_ms)} | {_g(w.sol_score)} |"
                         + (f" {clip(w.error, 300)}" if w.error else ""))
        if o.sol_score is not None:
            lines.append(f"Mean SOL score {o.sol_score:.3f}; gap to SOL {1 - o.sol_score:.3f}.")
    return "\n".join(lines)


def _g(x) -> str:
    return "" if x is None else (f"{x:.4g}" if isinstance(x, float) else str(x))


def clip(text: str, n: int) -> str:
    if len(text) <= n:
        return text
    half = n // 2
    return text[:half] + f"\n... [{len(text) - n} characters cut] ...\n" + text[-half:]


def repair_message(o: Outcome, with_plan: bool = False) -> str:
    """What the model is told after a candidate it proposed failed."""
    what = {"parse_error": "Your reply did not contain a valid Candidate JSON block.",
            "invalid": "The candidate does not fit the problem.",
            "compile_error": "The candidate failed to compile. Fix the errors below.",
            "incorrect": "The candidate compiled but does not match the reference. Fix it.",
            "runtime_error": "The candidate crashed or was rejected at run time. Fix it.",
            "timeout": "The candidate ran past the time limit."}.get(o.status.value, "It failed.")
    ask = ("Reply with the corrected segment (a segment reply) or the whole corrected Candidate "
           "JSON block." if with_plan else "Reply with the whole corrected Candidate JSON block.")
    return what + "\n\n" + format_feedback("your last candidate", o) + "\n\n" + ask


def refusal_message(why: str) -> str:
    """A segment reply that cannot be spliced into the plan: one line saying why, and what to send."""
    return (f"Refused: {why}.\n\nReply with one segment of the plan replaced (a segment reply) or a "
            "whole Candidate JSON block.")


# ---- secrets never reach a log ------------------------------------------------------------------
# one scrub for every path (compile logs, store, prompts): solforge/sandbox/redact.py
from ..sandbox.redact import REDACTED, scrub, secret_values  # noqa: E402,F401
