"""Problems and workloads into the store: idempotent, one transaction per problem."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Callable, Iterable

from ..problem.loader import Problem
from .store import Store, utcnow


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
    return _upsert_batch(store, [problem])[0]


def upsert_problems(store: Store, problems: Iterable[Problem],
                    progress: Callable[[Problem, UpsertOutcome], None] | None = None,
                    batch: int = 25) -> UpsertSummary:
    """Upsert many problems. A batch of problems shares one transaction and a handful of
    statements (each statement and commit costs more than a problem's rows), which still never
    leaves a problem half-written."""
    problems = list(problems)
    summary = UpsertSummary()
    for i in range(0, len(problems), batch):
        chunk = problems[i:i + batch]
        for p, outcome in zip(chunk, _upsert_batch(store, chunk)):
            summary.add(p.name, outcome)
            if progress:
                progress(p, outcome)
    return summary


def _upsert_batch(store: Store, problems: list[Problem]) -> list[UpsertOutcome]:
    names = [p.name for p in problems]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate problem names in one batch: {sorted(n for n in set(names) if names.count(n) > 1)}")
    hashes = {p.name: p.content_hash for p in problems}
    with store.transaction() as con:
        # Read inside the transaction (under the file lock): another process may have just written.
        known = dict(con.execute("SELECT name, content_hash FROM problems WHERE list_contains(?, name)",
                                 [names]).fetchall())
        first_seen = dict(con.execute("SELECT name, ingested_at FROM problems "
                                      "WHERE list_contains(?, name)", [names]).fetchall())
        changed = [p for p in problems if known.get(p.name) != hashes[p.name]]
        if changed:
            gone = [p.name for p in changed if p.name in known]
            if gone:
                con.execute("DELETE FROM workloads WHERE list_contains(?, problem)", [gone])
                con.execute("DELETE FROM problems WHERE list_contains(?, name)", [gone])
            now = utcnow()
            rows = []
            for p in changed:
                row = problem_row(p)
                row["updated_at"] = now
                row["ingested_at"] = first_seen.get(p.name, now)  # first ingest survives updates
                rows.append(row)
            store.insert_rows("problems", rows)
            store.insert_rows("workloads", [w for p in changed for w in workload_rows(p)])
    return [UpsertOutcome.UNCHANGED if known.get(p.name) == hashes[p.name]
            else UpsertOutcome.UPDATED if p.name in known else UpsertOutcome.INSERTED
            for p in problems]


# ---- reading problems back: what every command works on after ingest -----------------------------
def problem_index(store: Store) -> list[tuple[str, str | None]]:
    """(name, subset) of every stored problem, for solforge.problem.select."""
    return [(r["name"], r["subset"]) for r in store.query("SELECT name, subset FROM problems")]


def load_problems(store: Store, names: Iterable[str]) -> list[Problem]:
    """Problems rebuilt from the problems/workloads tables (definition + resolved workloads, the
    folder they were ingested from as `source`), in the order of `names`; names not stored are left
    out (the caller says which)."""
    from ..problem.definition import Definition
    from ..problem.workload import Workload, resolve

    names = list(names)
    if not names:
        return []
    rows = {r["name"]: r for r in store.query(
        "SELECT name, subset, source, definition, provenance FROM problems "
        "WHERE list_contains(?, name)", [names])}
    wls: dict[str, list] = {}
    for r in store.query("SELECT problem, workload FROM workloads WHERE list_contains(?, problem) "
                         "ORDER BY problem, workload_index", [names]):
        wls.setdefault(r["problem"], []).append(r["workload"])
    out = []
    for n in names:
        r = rows.get(n)
        if r is None:
            continue
        defn = Definition.model_validate(r["definition"])
        p = Problem(defn, [resolve(defn, Workload.model_validate(w)) for w in wls.get(n, [])],
                    r["source"] or "store", r["subset"])
        prov = r["provenance"] or {}
        p.format = prov.get("format") or p.format
        p.extra["provenance"] = prov
        if isinstance(prov, dict) and prov.get("b200_reference"):
            p.extra["b200_reference"] = prov["b200_reference"]  # NVIDIA's published numbers
        out.append(p)
    return out


def load_problem(store: Store, name: str) -> Problem:
    """One stored problem by name; LookupError when it is not in the store."""
    got = load_problems(store, [name])
    if not got:
        raise LookupError(f"problem {name!r} is not in the store (ingest it first: solforge ingest PATH)")
    return got[0]


def find_problem(store: Store, ref: str) -> Problem:
    """The one stored problem a reference names (name or SUBSET/name, solforge.problem.select);
    LookupError with the reason when none or several match."""
    from ..problem.select import select

    hits = select(problem_index(store), ref)
    if len(hits) != 1:
        why = "is not in the store (ingest it first: solforge ingest PATH)" if not hits else \
            "names several problems: " + ", ".join(f"{s}/{n}" for n, s in hits[:5])
        raise LookupError(f"problem {ref!r} {why}")
    return load_problem(store, hits[0][0])
