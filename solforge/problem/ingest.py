"""Ingest problems from anywhere: a SOL-ExecBench tree (`<subset>/<problem>/`), a subset folder, one
problem folder, a FlashInfer-Trace tree (`definitions/` + `workloads/`), a folder mixing these (such
as data/problems), one definition JSON file, or `hf://nvidia/SOL-ExecBench[/<subset>]`.

Every bad problem becomes exactly one InputError in the report (file, line, field); the good ones are
still returned. Problems are sorted by (subset, name) so that two ingests of the same input agree.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError
from .flashinfer_trace import is_flashinfer_tree, load_flashinfer_tree
from .loader import DEFINITION_FILE, REFERENCE_FILE, WORKLOAD_FILE, Problem, load_definition, \
    load_problem_dir

HF_SCHEME = "hf://"
_MAX_DEPTH = 4  # tree/subset/problem is 2; leave room for a folder or two around it
_SKIP_DIRS = {"__pycache__", "node_modules", "blob"}


@dataclass
class IngestReport:
    problems: list[Problem] = field(default_factory=list)
    errors: list[InputError] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    source: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.errors

    def counts_by_subset(self) -> dict[str, dict[str, int]]:
        """{subset: {"problems": n, "workloads": m}}, subsets sorted."""
        out: dict[str, dict[str, int]] = {}
        for p in self.problems:
            c = out.setdefault(p.subset or "", {"problems": 0, "workloads": 0})
            c["problems"] += 1
            c["workloads"] += len(p.workloads)
        return dict(sorted(out.items()))

    def extend(self, other: "IngestReport") -> None:
        self.problems += other.problems
        self.errors += other.errors
        self.warnings += other.warnings


def ingest_local(path: Path, provenance: dict | None = None) -> IngestReport:
    """Ingest a local path; `provenance` (e.g. where a download came from) is stored on each problem."""
    report = IngestReport(source=str(path))
    if not path.exists():
        report.errors.append(InputError("path not found", file=path))
        return report
    if path.is_file():
        _ingest_file(path, report)
    else:
        _walk(path, report, 0, set())
    reject_duplicate_names(report)
    report.problems.sort(key=lambda p: (p.subset or "", p.name))
    for p in report.problems:
        p.extra["provenance"] = {"format": p.format, "path": p.source, **(provenance or {})}
        report.warnings.extend(p.warnings)
    if not report.problems and not report.errors:
        report.warnings.append(f"{path}: no problems found")
    return report


def _ingest_file(path: Path, report: IngestReport) -> None:
    if path.name in (DEFINITION_FILE, WORKLOAD_FILE, REFERENCE_FILE):
        _load_problem(path.parent, report)
    elif path.suffix == ".json":
        # A lone FlashInfer-Trace style definition: a problem with no workloads.
        try:
            d = load_definition(path)
        except InputError as e:
            report.errors.append(e)
            return
        report.problems.append(Problem(d, [], str(path), path.parent.name, format="definition",
                                       warnings=[f"{path}: a lone definition has no workloads"]))
    else:
        report.errors.append(InputError("not a problem file (want a folder, definition.json or a "
                                        "definition .json)", file=path))


def _is_problem_dir(path: Path) -> bool:
    return any((path / f).is_file() for f in (DEFINITION_FILE, WORKLOAD_FILE))


def _walk(path: Path, report: IngestReport, depth: int, visited: set) -> None:
    """One folder of the walk. Every entry's OS error (a symlink loop, a dangling link, no permission)
    is one report error for that entry and the walk goes on; a folder reached twice (through a symlink
    back up the tree) is walked once."""
    try:
        st = path.stat()
        key = (st.st_dev, st.st_ino)
        if key in visited:
            return
        visited.add(key)
        if is_flashinfer_tree(path):
            problems, errors, warnings = load_flashinfer_tree(path)
            report.problems += problems
            report.errors += errors
            report.warnings += warnings
            return
        if _is_problem_dir(path):
            _load_problem(path, report)
            return
    except (OSError, RecursionError) as e:
        report.errors.append(InputError(f"cannot read folder: {getattr(e, 'strerror', None) or e}",
                                        file=path))
        return
    if depth >= _MAX_DEPTH:
        return
    try:
        children = sorted(os.scandir(path), key=lambda e: e.name)
    except OSError as e:
        report.errors.append(InputError(f"cannot list folder: {e.strerror}", file=path))
        return
    for child in children:
        if child.name.startswith(".") or child.name in _SKIP_DIRS:
            continue
        try:
            is_dir = child.is_dir(follow_symlinks=True)
        except OSError as e:  # e.g. a symlink to itself (ELOOP)
            report.errors.append(InputError(f"cannot read entry: {e.strerror or e}", file=child.path))
            continue
        if is_dir:
            _walk(Path(child.path), report, depth + 1, visited)


def _load_problem(path: Path, report: IngestReport) -> None:
    try:
        report.problems.append(load_problem_dir(path, subset=path.resolve().parent.name))
    except InputError as e:
        report.errors.append(e)
    except (OSError, RecursionError, MemoryError) as e:  # a broken file system entry, a huge file
        report.errors.append(InputError(f"cannot load problem: {type(e).__name__}: {e}", file=path))


def reject_duplicate_names(report: IngestReport) -> None:
    # Names key everything downstream (store rows, kernels); two problems sharing one is an error
    # on the second, so what the first means never depends on load order.
    first: dict[str, Problem] = {}
    kept = []
    for p in report.problems:
        if p.name in first:
            where = Path(p.extra.get("provenance", {}).get("path") or p.source)
            f = where / DEFINITION_FILE if where.is_dir() else where
            report.errors.append(InputError(f"duplicate problem name {p.name!r} (also at "
                                            f"{first[p.name].source})", file=f, field="name"))
            continue
        first[p.name] = p
        kept.append(p)
    report.problems = kept


def summarize(report: IngestReport) -> str:
    """A short human summary: counts per subset, errors, warnings."""
    lines = [f"{len(report.problems)} problems, "
             f"{sum(len(p.workloads) for p in report.problems)} workloads, "
             f"{len(report.errors)} errors, {len(report.warnings)} warnings "
             f"({report.seconds:.2f} s) from {report.source}"]
    for subset, c in report.counts_by_subset().items():
        lines.append(f"  {subset or '-'}: {c['problems']} problems, {c['workloads']} workloads")
    formats = Counter(p.format for p in report.problems)
    if len(formats) > 1:
        lines.append("  formats: " + ", ".join(f"{k}={v}" for k, v in sorted(formats.items())))
    return "\n".join(lines)
