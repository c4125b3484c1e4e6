"""Helpers of solforge baseline (solforge/baselines/scheduler.py) kept apart from the scheduler: the memory estimate that marks
the tasks to run alone on their GPU, the GPU lease that makes them run alone, and the plan print of a
re-run (what is still missing per problem, and why)."""

from __future__ import annotations

import contextlib
import math
import re
from collections import Counter
from pathlib import Path
from typing import Optional


# ── memory estimate ──────────────────────────────────────────────────────────────────────────────
def workload_bytes(problem_dir: Path) -> list[float]:
    """Per workload (file order): the device bytes a baseline task holds at least: two input sets
    (the timer rotates them) and one output set. Intermediates are not counted (a MoE reference that
    gathers expert weights per token needs more), so this ranks tasks; it does not bound them.
    Zeros where the problem does not load (the worker reports that itself)."""
    from solforge.problem import load_problem_dir
    from solforge.problem.dtypes import itemsize

    try:
        p = load_problem_dir(Path(problem_dir))
    except Exception:  # noqa: BLE001
        return []
    d = p.definition

    def size(shapes: dict, specs: dict) -> float:
        return float(sum(math.prod(s) * itemsize(specs[k].dtype) for k, s in shapes.items()
                         if s is not None and k in specs))

    return [2 * size(w.input_shapes, d.inputs) + size(w.output_shapes, d.outputs)
            for w in p.workloads]


# ── the GPU lease ────────────────────────────────────────────────────────────────────────────────
@contextlib.contextmanager
def gpu_lease(path: Optional[str], alone: bool):
    """A task's hold on its GPU, across the worker processes of that GPU: shared for a normal task,
    exclusive for one that must run alone (it ran out of memory beside the others, or its memory
    estimate is too big to share). Apart from the measurement lock (solforge.evaluate.baseline's
    gpu_lock), which stays held only around each timed measurement.

    Linux flock gives a waiting exclusive locker no priority over new shared lockers, so six workers
    taking turns could starve it. A gate file fixes that: every locker passes the gate (exclusive,
    for an instant) before taking the lease, and the alone task keeps the gate until it holds the
    lease: the others drain (finish their current task) and nobody new starts meanwhile."""
    from solforge.evaluate.gpu_share import held

    with held(path or "", alone):
        yield


def is_alone(task: dict) -> bool:
    return bool(task.get("alone")) or task["id"].endswith(".oom")


# ── the plan print ───────────────────────────────────────────────────────────────────────────────
def compile_rate(log: Optional[Path]) -> Optional[float]:
    """torch.compile workloads per second over the compile phase of an earlier run's log (its
    '[  t s] eager E, compile C, ...' lines after the first 'compile starts'), or None."""
    if not log or not Path(log).exists():
        return None
    pts, started = [], False
    for line in Path(log).read_text(errors="replace").splitlines():
        started = started or "compile starts" in line
        m = re.match(r"\[\s*(\d+) s\] eager \d+, compile (\d+),", line)
        if m and started:
            pts.append((float(m.group(1)), int(m.group(2))))
    if len(pts) < 2 or pts[-1][0] <= pts[0][0] or pts[-1][1] <= pts[0][1]:
        return None
    return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])


def plan_lines(problems: list[dict], existing: dict, tasks: dict, rate: Optional[float] = None,
               rate_log: str = "") -> list[str]:
    """Per problem with work left: the rows missing per variant with their earlier statuses, whether
    the task runs alone and why; then the totals and a time estimate at an earlier run's rate."""
    queued: dict = {}
    for v, ts in tasks.items():
        for t in ts:
            q = queued.setdefault((t["problem"], v), {"n": 0, "alone": False, "mem": 0.0})
            q["n"] += len(t["uuids"])
            q["alone"] |= is_alone(t)
            q["mem"] = max(q["mem"], t.get("mem", 0.0))
    out = ["plan: problem: variant queued/missing (earlier status x rows), [alone: why]"]
    tot = Counter()
    for p in problems:
        parts = []
        for v in tasks:
            miss = Counter()
            for u in p["uuids"]:
                r = existing.get((p["name"], u), {})
                if not r.get(f"{v}_ms"):
                    miss[r.get(f"{v}_status") or "absent"] += 1
            q = queued.get((p["name"], v))
            if not miss and not q:
                continue
            n = q["n"] if q else 0
            tot[v, "queued"] += n
            tot[v, "missing"] += sum(miss.values())
            why = ", ".join(f"{s} x{c}" for s, c in miss.most_common())
            note = ""
            if q and q["alone"]:
                note = " [alone: " + ("ran out of memory before" if miss.get("oom") else
                                      f"~{q['mem'] / 1e9:.0f} GB of inputs and outputs") + "]"
            elif not q:
                note = " [not queued: " + ("no graph captured" if set(miss) == {"skipped"} else
                                           "--skip-reasons or --variants") + "]"
            parts.append(f"{v} {n}/{sum(miss.values())} ({why}){note}")
        if parts:
            out.append(f"  {p['subset']}/{p['name'][:56]}: " + "; ".join(parts))
    for v in tasks:
        alone = sum(len(t["uuids"]) for t in tasks[v] if is_alone(t))
        out.append(f"plan: {v}: {tot[v, 'queued']} workloads queued ({alone} alone on a GPU) of "
                   f"{tot[v, 'missing']} missing")
    if "compile" in tasks and tot["compile", "queued"]:
        if rate:
            out.append(f"plan: at the earlier run's {rate:.2f} compile workloads/s ({rate_log}): "
                       f"~{tot['compile', 'queued'] / rate:.0f} s of compile phase (alone tasks "
                       "stop the other workers of their GPU, so more)")
        else:
            out.append("plan: no earlier compile rate (no log): no time estimate")
    return out
