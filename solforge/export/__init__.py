"""Export: a stored attempt as an official SOL-ExecBench solution (solution.py) or as a drop-in
torch.library operator package (torch_op.py).

    att = load_attempt(Store(db), "best:069_rms_norm")   # or an attempt id / unique id prefix
    write_solution(att, Path("out/solution"))            # solution.json + its sources
    write_torch_op(att, Path("out/op"))                  # Python package, cubins + launcher inside
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from ..candidate import Candidate
from ..errors import SolforgeError
from ..problem.definition import AxisConst, AxisExpr, AxisVar, Definition


class ExportError(SolforgeError):
    pass


@dataclass
class ExportAttempt:
    attempt_id: str
    problem_name: str
    definition: Definition
    candidate: Candidate
    sol_score: Optional[float] = None
    speedup: Optional[float] = None
    subset: Optional[str] = None
    workloads: list[dict] = None  # workloads rows (axes, input_shapes, output_shapes, tolerance)

    @property
    def problem(self):  # cli prints att.problem.name
        return self.definition


def load_attempt(store, ref: str) -> ExportAttempt:
    """An attempt by id, unique id prefix, or 'best:PROBLEM' (the best correct attempt)."""
    from ..store import report_queries as rq

    if ref.startswith("best:"):
        best = rq.best_correct_attempt(store, ref[5:])
        if best is None:
            raise ExportError(f"no correct, scored attempt for problem {ref[5:]!r}")
        ref = best
    ids = rq.attempt_ids_with_prefix(store, ref)
    if not ids:
        raise ExportError(f"no attempt {ref!r}")
    if len(ids) > 1:
        raise ExportError(f"attempt prefix {ref!r} is ambiguous ({', '.join(i[:12] for i in ids)})")
    aid = ids[0]
    a = rq.attempt_summary(store, aid)
    if not a.get("candidate"):
        raise ExportError(f"attempt {aid} has no candidate stored")
    p = rq.problem_by_name(store, a["problem"])
    if p is None:
        raise ExportError(f"problem {a['problem']!r} of attempt {aid} is not in the store "
                          "(ingest it first: solforge ingest PATH)")
    wl = rq.workload_shapes(store, a["problem"])
    return ExportAttempt(attempt_id=aid, problem_name=a["problem"],
                         definition=Definition.model_validate(p["definition"]),
                         candidate=Candidate.model_validate(a["candidate"]),
                         sol_score=a.get("sol_score"), speedup=a.get("speedup_geomean"),
                         subset=a.get("subset"), workloads=wl)


def axis_sources(defn: Definition, outputs_given: bool) -> list[tuple[str, tuple]]:
    """How the exported code gets each axis, in an order where expr axes follow what they use:
    ("const", value) | ("shape", tensor, dim) | ("expr", expression)."""
    out: list[tuple[str, tuple]] = []
    tensors = list(defn.inputs.items()) + (list(defn.outputs.items()) if outputs_given else [])
    for name, ax in defn.axes.items():
        if isinstance(ax, AxisConst):
            out.append((name, ("const", ax.value)))
        elif isinstance(ax, AxisVar):
            src = next(((t, i) for t, spec in tensors if spec.shape
                        for i, d in enumerate(spec.shape) if d == name), None)
            if src is None:
                where = "input or output" if outputs_given else "input"
                raise ExportError(f"var axis {name!r} appears in no {where} shape: the exported code "
                                  "could not know its value")
            out.append((name, ("shape", *src)))
    for name in defn._expr_order():
        ax = defn.axes[name]
        assert isinstance(ax, AxisExpr)
        out.append((name, ("expr", ax.expression)))
    return out


def safe_ident(text: str, prefix: str = "p") -> str:
    s = re.sub(r"\W+", "_", text).strip("_").lower()
    return s if s and not s[0].isdigit() else f"{prefix}{s}"


def default_name(att: ExportAttempt) -> str:
    return safe_ident(f"{att.problem_name}_{att.attempt_id[:8]}")


__all__ = ["ExportAttempt", "ExportError", "load_attempt", "axis_sources", "default_name",
           "safe_ident"]
