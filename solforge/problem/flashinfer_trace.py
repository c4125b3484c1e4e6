"""The FlashInfer-Trace layout: `definitions/<op>/<name>.json` and `workloads/<op>/*.jsonl`, whose lines
are Traces (`{definition, solution, workload, evaluation}`; workload-only when the last are null).

Workloads are attached to the definition their line names. A definition without workloads is still a
problem (zero workloads). A bad line makes its definition's problem bad (one InputError), unless the
line names no known definition, when it is an error of its own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..errors import InputError
from .blobs import check_safetensors
from .definition import Definition
from .loader import (MISSING_BLOBS, Problem, iter_jsonl, load_definition, parse_model, resolve_at,
                     workload_warnings)
from .trace import Trace

FORMAT = "flashinfer-trace"
SUBSET = "FlashInfer-Trace"


def is_flashinfer_tree(path: Path) -> bool:
    return (path / "definitions").is_dir()


@dataclass
class _Entry:
    definition: Definition
    file: Path
    workloads: list = field(default_factory=list)
    uuids: dict = field(default_factory=dict)  # uuid -> (file, line, workload json)
    error: Optional[InputError] = None
    traces_with_results: int = 0


def load_flashinfer_tree(root: Path) -> tuple[list[Problem], list[InputError], list[str]]:
    root = Path(root)
    errors: list[InputError] = []
    warnings: list[str] = []
    entries: dict[str, _Entry] = {}
    failed: set[str] = set()  # names (or file stems) of definitions that did not load
    for f in sorted((root / "definitions").rglob("*.json")):
        try:
            d = load_definition(f)
        except InputError as e:
            errors.append(e)
            failed.add(_name_hint(f))
            continue
        if d.name in entries:
            errors.append(InputError(f"duplicate definition name {d.name!r} (also in "
                                     f"{entries[d.name].file})", file=f, field="name"))
            continue
        entries[d.name] = _Entry(d, f)

    wdir = root / "workloads"
    for f in sorted(wdir.rglob("*.jsonl")) if wdir.is_dir() else []:
        _read_trace_file(f, entries, failed, errors, warnings)

    problems = []
    for name, e in entries.items():
        if e.error is not None:
            errors.append(e.error)
            continue
        p = Problem(e.definition, e.workloads, str(e.file), SUBSET, format=FORMAT)
        p.warnings = workload_warnings(e.file, e.workloads)
        if e.traces_with_results:
            p.warnings.append(f"{e.file}: {e.traces_with_results} trace line(s) carry a solution or "
                              "evaluation; only their workloads were taken")
        if not e.workloads:
            p.warnings.append(f"{e.file}: no workloads in {wdir}")
        problems.append(p)
    return problems, errors, warnings


def _name_hint(f: Path) -> str:
    """The definition name a file probably holds, to keep its workloads from being called orphans."""
    try:
        from .loader import read_regular  # a FIFO or a device named *.json must not hang the walk

        data = json.loads(read_regular(f).decode("utf-8"))
        if isinstance(data, dict) and isinstance(data.get("name"), str):
            return data["name"]
    except (OSError, ValueError):  # InputError is a ValueError
        pass
    return f.stem


def _read_trace_file(f: Path, entries: dict[str, _Entry], failed: set[str],
                     errors: list[InputError], warnings: list[str]) -> None:
    stem_owner = entries.get(f.stem)  # files are named after their definition by convention
    lines = 0
    try:
        it = iter_jsonl(f)
        while True:
            try:
                lineno, obj = next(it)
            except StopIteration:
                break
            except InputError as e:  # a line that is not JSON: blame the file's definition if known
                if not _fail(stem_owner, e):
                    errors.append(e)
                continue
            lines += 1
            _take_line(f, lineno, obj, entries, failed, errors)
    except InputError as e:  # unreadable file (not UTF-8, ...)
        if not _fail(stem_owner, e):
            errors.append(e)
        return
    if lines == 0:
        warnings.append(f"{f}: no trace lines")


def _fail(entry: Optional[_Entry], err: InputError) -> bool:
    if entry is None:
        return False
    if entry.error is None:  # one clear error per problem: the first one
        entry.error = err
    return True


def _take_line(f: Path, lineno: int, obj, entries: dict[str, _Entry], failed: set[str],
               errors: list[InputError]) -> None:
    name = obj.get("definition") if isinstance(obj, dict) else None
    entry = entries.get(name) if isinstance(name, str) else None
    if entry is None:
        if isinstance(name, str) and name in failed:
            return  # its definition's own error is already reported
        if not isinstance(name, str):
            err = InputError("trace line needs a 'definition' name", file=f, line=lineno,
                             field="definition")
        else:
            err = InputError(f"unknown definition {name!r}", file=f, line=lineno, field="definition")
        if not _fail(entries.get(f.stem), err):
            errors.append(err)
        return
    if entry.error is not None:
        return
    try:
        tr = parse_model(Trace, obj, f, lineno)
        prev = entry.uuids.get(tr.workload.uuid)
        wl_json = tr.workload.model_dump_json()
        if prev is not None:
            if prev[2] != wl_json:  # the same workload again (another solution's run) is fine
                raise InputError(f"duplicate uuid {tr.workload.uuid!r} with different content "
                                 f"(first at {prev[0]}:{prev[1]})", file=f, line=lineno,
                                 field="workload.uuid")
            return
        rw = resolve_at(entry.definition, tr.workload, f, lineno, prefix="workload")
        if check_safetensors(rw, f, lineno, field_prefix="workload"):
            rw.warnings.append(MISSING_BLOBS)
    except InputError as e:
        entry.error = e
        return
    entry.uuids[tr.workload.uuid] = (f, lineno, wl_json)
    if not tr.is_workload_trace:
        entry.traces_with_results += 1
    entry.workloads.append(rw)
