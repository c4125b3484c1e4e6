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
    if ref.startswith("best:"):
        row = store.query_one("SELECT attempt_id FROM v_best_per_problem WHERE problem = ?", [ref[5:]])
        if row is None:
            raise ExportError(f"no correct, scored attempt for problem {ref[5:]!r}")
        ref = row["attempt_id"]
    rows = store.query("SELECT id FROM attempts WHERE id LIKE ? || '%' LIMIT 3", [ref])
    if not rows:
        raise ExportError(f"no attempt {ref!r}")
    if len(rows) > 1:
        raise ExportError(f"attempt prefix {ref!r} is ambiguous ({', '.join(r['id'][:12] for r in rows)})")
    aid = rows[0]["id"]
    a = store.query_one("SELECT s.*, a.candidate FROM v_attempt_summary s JOIN attempts a "
                        "ON a.id = s.attempt_id WHERE s.attempt_id = ?", [aid])
    if not a.get("candidate"):
        raise ExportError(f"attempt {aid} has no candidate stored")
    p = store.query_one("SELECT definition FROM problems WHERE name = ?", [a["problem"]])
    if p is None:
        raise ExportError(f"problem {a['problem']!r} of attempt {aid} is not in the store "
                          "(ingest it first: solforge ingest PATH)")
    wl = store.query("SELECT workload_index, uuid, axes, input_shapes, output_shapes, tolerance "
                     "FROM workloads WHERE problem = ? ORDER BY workload_index", [a["problem"]])
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
