"""RunReport.phases -> one flat {phase: seconds} dict, the shape the store keeps (attempts.eval_phases).

RunReport.phases comes in two shapes (runner._phases, screening.py):
  one process:      {"seconds": {phase: s}, "mode", "driver_s", "pid", "first_line_s", "total_s"}
  screen then rest: {"screen": <one process>, "rest": <one process>, "total_s"}
SQL over nested, shape-dependent JSON is error-prone, so the store gets the phase seconds summed over
the processes, plus "total" (runner start -> last exit) and "driver" (the driver's own wall time), and
where the runner measured them (its "cpu" dict): "cpu_user" / "cpu_sys" (the evaluator processes' own
CPU-seconds), "host_busy_cpu" / "host_steal" (the whole host's busy and hypervisor-stolen CPU-seconds
while they ran). These are not phases: like "total" and "driver" they overlap the phases. Keys that
start with "n_" are counts, not seconds: "n_waits" / "n_preempted" (voluntary / involuntary context
switches of the evaluator processes) and "n_minflt" (their minor page faults).
Stdlib only (the store side and the bare GPU box both import it).
"""

from __future__ import annotations

import math
from typing import Any, Optional


# runner's "cpu" dict key -> eval_phases name (seconds; not phases: they overlap them)
CPU_KEYS = {"user_s": "cpu_user", "sys_s": "cpu_sys", "host_busy_cpu_s": "host_busy_cpu",
            "host_steal_s": "host_steal", "nvcsw": "n_waits", "nivcsw": "n_preempted",
            "minflt": "n_minflt"}


def _num(v: Any) -> Optional[float]:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def flat_seconds(phases: Optional[dict]) -> dict[str, float]:
    """Seconds per phase name, summed over the report's processes; {} when there is nothing."""
    if not isinstance(phases, dict) or not phases:
        return {}
    nested = [p for p in (phases.get("screen"), phases.get("rest")) if isinstance(p, dict)]
    parts = nested or [phases]
    out: dict[str, float] = {}

    def add(name: str, v: Any) -> None:
        x = _num(v)
        if x is not None:
            out[name] = out.get(name, 0.0) + x

    for p in parts:
        secs = p.get("seconds")
        if isinstance(secs, dict):
            for k, v in secs.items():
                add(str(k), v)
        else:  # already flat: {phase: seconds}
            for k, v in p.items():
                if k not in ("total_s", "driver_s", "first_line_s", "pid", "mode", "total", "driver",
                             "cpu"):
                    add(str(k), v)
        add("driver", p.get("driver_s", p.get("driver")))
        cpu = p.get("cpu")
        if isinstance(cpu, dict):
            for key, name in CPU_KEYS.items():
                add(name, cpu.get(key))
    total = _num(phases.get("total_s", phases.get("total")))
    if total is None and nested:
        total = sum(_num(p.get("total_s")) or 0.0 for p in nested) or None
    if total is not None:
        out["total"] = total
    return {k: round(v, 6) for k, v in out.items()}
