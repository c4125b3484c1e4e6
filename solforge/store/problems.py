"""Problems and workloads into the store: idempotent, one transaction per problem."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Callable, Iterable

from ..problem.loader import Problem
from .store import Store, _to_db, utcnow


class UpsertOutcome(str, Enum):
    INSERTED = "inserted"
    UPDATED = "updated"
    UNCHANGED = "unchanged"


@dataclass
class UpsertSummary:
    inserted: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    def add(self, name: str, outcome: UpsertOutcome) -> None:
        getattr(self, outcome.value).append(name)

    def as_dict(self) -> dict[str, int]:
        return {"inserted": len(self.inserted), "updated": len(self.updated),
                "unchanged": len(self.unchanged)}


def dtypes_of(problem: Problem) -> list[str]:
    d = problem.definition
    return sorted({t.dtype for t in [*d.inputs.values(), *d.outputs.values()]})


def model_tags_of(problem: Problem) -> list[str]:
    d = problem.definition
    tags = [t.split(":", 1)[1] for t in d.tags if t.startswith("model:")]
    if d.hf_id:
        tags.append(d.hf_id)
    return sorted(set(tags))


def problem_row(problem: Problem) -> dict:
    d = problem.definition
    extra = problem.extra or {}
    provenance = dict(extra.get("provenance") or {})
    provenance.setdefault("format", getattr(problem, "format", None))
    if d.hf_id:
        provenance["hf_id"] = d.hf_id
    if "b200_reference" in extra:
        provenance["b200_reference"] = extra["b200_reference"]
    return {
        "name": problem.name, "subset": problem.subset, "op_type": d.op_type,
        "content_hash": problem.content_hash, "source": problem.source,
        "provenance": provenance, "definition": d.model_dump(mode="json"),
        "tags": list(d.tags), "model_tags": model_tags_of(problem), "dtypes": dtypes_of(problem),
        "n_workloads": len(problem.workloads), "warnings": list(problem.warnings),
    }


def _published(problem: Problem) -> dict[int, dict]:
    """NVIDIA's per-workload numbers (b200_reference.json), by workload index, if axes agree."""
    ref = (problem.extra or {}).get("b200_reference")
    if not isinstance(ref, dict):
        return {}
    out = {}
    for entry in ref.get("per_workload") or []:
        if isinstance(entry, dict) and isinstance(entry.get("index"), int):
            out[entry["index"]] = {"gpu": ref.get("gpu"), "sol_ms": entry.get("sol_ms"),
                                   "baseline_latency_ms": entry.get("baseline_latency_ms"),
                                   "axes": entry.get("axes")}
    return out


def workload_rows(problem: Problem) -> list[dict]:
    published = _published(problem)
    rows = []
    for i, rw in enumerate(problem.workloads):
        pub = published.get(i)
        if pub is not None:
            # Only trust the published numbers when they describe the same shapes.
            axes = pub.pop("axes") or {}
            if any(rw.axes.get(k, v) != v for k, v in axes.items()):
                pub = None
        rows.append({
            "problem": problem.name, "uuid": rw.uuid, "workload_index": i,
            "axes": {**rw.axes, **rw.extra_axes},
            "workload": rw.workload.model_dump(mode="json"),
            "tolerance": rw.workload.tolerance.model_dump(mode="json"),
            "input_shapes": {k: (list(v) if v is not None else None)
                             for k, v in rw.input_shapes.items()},
            "output_shapes": {k: (list(v) if v is not None else None)
                              for k, v in rw.output_shapes.items()},
            "published": pub, "warnings": list(rw.warnings),
        })
    return rows


def upsert_problem(store: Store, problem: Problem) -> UpsertOutcome:
    """Write one problem with its workloads in one transaction. Same content hash: untouched."""
    new_hash = problem.content_hash
    with store.transaction() as con:
        # Read inside the transaction (under the file lock): another process may have just written it.
        row = con.execute("SELECT content_hash FROM problems WHERE name = ?",
                          [problem.name]).fetchone()
        known_hash = row[0] if row else None
        if known_hash == new_hash:
            return UpsertOutcome.UNCHANGED
        row = problem_row(problem)
        row["updated_at"] = utcnow()
        if known_hash is None:
            row["ingested_at"] = row["updated_at"]
            store.insert_rows("problems", [row])
        else:
            # Keep ingested_at (first seen); replace everything the content defines.
            sets = {k: v for k, v in row.items() if k != "name"}
            cols = store.columns("problems")
            con.execute("UPDATE problems SET " + ", ".join(f'"{k}" = ?' for k in sets)
                        + " WHERE name = ?",
                        [*(_to_db(v, cols[k]) for k, v in sets.items()), problem.name])
        con.execute("DELETE FROM workloads WHERE problem = ?", [problem.name])
        store.insert_rows("workloads", workload_rows(problem))
    return UpsertOutcome.INSERTED if known_hash is None else UpsertOutcome.UPDATED


def upsert_problems(store: Store, problems: Iterable[Problem],
                    progress: Callable[[Problem, UpsertOutcome], None] | None = None
                    ) -> UpsertSummary:
    summary = UpsertSummary()
    for p in problems:
        outcome = upsert_problem(store, p)
        summary.add(p.name, outcome)
        if progress:
            progress(p, outcome)
    return summary
