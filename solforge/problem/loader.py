"""Reading problems from disk with errors that name the file, the line (JSONL) and the field.

A problem directory holds `definition.json`, `workload.jsonl` and optionally `reference.py`
(the reference is also inside the definition; the file wins only where the JSON has none).
"""

from __future__ import annotations

import os

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional, TypeVar

from pydantic import BaseModel, ValidationError

from ..errors import InputError
from .blobs import check_safetensors
from .definition import Definition
from .workload import ResolvedWorkload, Workload, WorkloadMismatch, resolve

MISSING_BLOBS = ("safetensors input file(s) not found (a separate download); the workload cannot run "
                 "until they are present")

M = TypeVar("M", bound=BaseModel)

DEFINITION_FILE = "definition.json"
WORKLOAD_FILE = "workload.jsonl"
REFERENCE_FILE = "reference.py"


_FIELD_PREFIX = re.compile(r"^(?:Value error, )?([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*): (.*)$", re.S)


def _field_of(err: dict, data=None) -> str:
    """The dotted path of the user's keys. pydantic adds union tags ("expr", "random") and model
    names to locs; keep only the parts that exist in the input data."""
    parts: list[str] = []
    cur = data
    for p in err.get("loc", ()):
        if data is None:
            parts.append(str(p))
            continue
        if isinstance(cur, dict) and p in cur:
            parts.append(str(p))
            cur = cur[p]
        elif isinstance(cur, list) and isinstance(p, int) and 0 <= p < len(cur):
            parts.append(str(p))
            cur = cur[p]
        elif isinstance(cur, dict) and err.get("type") == "missing":
            parts.append(str(p))  # a missing key is the field to name
            cur = None
        # else: a union tag or model name pydantic inserted; not a user key
    return ".".join(parts)


def validation_to_input_error(e: ValidationError, file: Path | str, line: Optional[int] = None,
                              prefix: str | None = None, data=None) -> InputError:
    err = e.errors()[0]
    fld = _field_of(err, data)
    msg = err.get("msg", str(e))
    # Validators that see the whole model name the field at the start of their message ("axes.m: ...").
    m = _FIELD_PREFIX.match(msg)
    if m and err.get("type") == "value_error":
        named, msg = m.group(1), m.group(2)
        fld = named if not fld or named == fld or named.startswith(fld + ".") else f"{fld}.{named}"
    elif msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    if prefix:
        fld = f"{prefix}.{fld}" if fld else prefix
    if len(e.errors()) > 1:
        msg += f" (and {len(e.errors()) - 1} more error(s))"
    return InputError(msg, file=file, line=line, field=fld or None)


def parse_json_text(text: str, file: Path | str, line: Optional[int] = None):
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        return _raise(InputError(f"invalid JSON: {e.msg} (column {e.colno})", file=file,
                                 line=line if line is not None else e.lineno))
    except RecursionError:
        return _raise(InputError("JSON nested too deeply", file=file, line=line))


def _raise(e: Exception):
    raise e


def parse_model(model: type[M], data, file: Path | str, line: Optional[int] = None,
                prefix: str | None = None) -> M:
    if not isinstance(data, dict):
        raise InputError(f"expected a JSON object, got {type(data).__name__}", file=file, line=line,
                         field=prefix)
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise validation_to_input_error(e, file, line, prefix, data) from None


_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+=@,\-]{0,199}$")


def name_problem(name: str) -> str:
    """Why a problem name is refused ("" when fine). Names become folder and file names downstream
    (staging dirs, exported solutions, unpacked datasets), so no separator, no .., no control
    character, no leading dot or dash."""
    if not _NAME.match(name):
        return "use letters, digits and _ . + = @ , - only (no path separators), at most 200"
    if ".." in name:
        return "no .. in a name"
    return ""


def load_definition(path: Path, reference_file: Optional[Path] = None) -> Definition:
    text = _read_text(path)
    data = parse_json_text(text, path)
    if isinstance(data, dict) and not data.get("reference") and reference_file and reference_file.exists():
        data["reference"] = _read_text(reference_file)
        try:
            return _named(parse_model(Definition, data, path), path)
        except InputError as e:
            if e.field == "reference":  # the code came from reference.py: name that file
                raise InputError(e.message, file=reference_file, field="reference") from None
            raise
    return _named(parse_model(Definition, data, path), path)


def _named(defn: Definition, path: Path) -> Definition:
    why = name_problem(defn.name)
    if why:
        raise InputError(f"problem name {defn.name[:80]!r} is not usable: {why}", file=path, field="name")
    return defn


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line."""
    for lineno, line in enumerate(_read_text(path).splitlines(), start=1):
        if line.strip():
            yield lineno, parse_json_text(line, path, lineno)


def load_workloads(path: Path, defn: Definition) -> list[ResolvedWorkload]:
    """Every workload in a JSONL file, resolved against its definition. Uuids must be unique."""
    out: list[ResolvedWorkload] = []
    seen: dict[str, int] = {}
    for lineno, obj in iter_jsonl(path):
        wl = parse_model(Workload, obj, path, lineno)
        if wl.uuid in seen:
            raise InputError(f"duplicate uuid {wl.uuid!r} (first on line {seen[wl.uuid]})",
                             file=path, line=lineno, field="uuid")
        seen[wl.uuid] = lineno
        rw = resolve_at(defn, wl, path, lineno)
        if check_safetensors(rw, path, lineno):
            rw.warnings.append(MISSING_BLOBS)
        out.append(rw)
    if not out:
        raise InputError("no workloads", file=path)
    return out


def resolve_at(defn: Definition, wl: Workload, path: Path, lineno: Optional[int],
               prefix: str | None = None) -> ResolvedWorkload:
    try:
        return resolve(defn, wl)
    except WorkloadMismatch as e:
        fld = f"{prefix}.{e.field}" if prefix else e.field
        raise InputError(str(e), file=path, line=lineno, field=fld) from None


MAX_FILE_BYTES = 64 << 20  # a definition, reference or workload file; the largest known is ~40 KB


def read_regular(path: Path, limit: int = MAX_FILE_BYTES) -> bytes:
    """A regular file's bytes, refusing anything else before reading: a FIFO (would block forever),
    a device such as /dev/zero (endless), a folder, or a file over `limit` bytes. Raises InputError."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputError("file not found", file=path) from None
    except IsADirectoryError:
        raise InputError("is a folder, not a file", file=path) from None
    except OSError as e:
        raise InputError(f"cannot open: {e.strerror or e}", file=path) from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise InputError("is a folder, not a file", file=path)
        if not stat.S_ISREG(st.st_mode):
            raise InputError("not a regular file (a FIFO, socket or device is never read)", file=path)
        if st.st_size > limit:
            raise InputError(f"file is {st.st_size} bytes, over the {limit}-byte limit", file=path)
        try:
            raw = f.read(limit + 1)
        except OSError as e:
            raise InputError(f"cannot read: {e.strerror or e}", file=path) from None
    if len(raw) > limit:  # grew while we read it
        raise InputError(f"file is over the {limit}-byte limit", file=path)
    return raw


def _read_text(path: Path) -> str:
    raw = read_regular(path)
    try:
        return raw.decode("utf-8-sig")  # a leading BOM is harmless; drop it rather than fail JSON
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise InputError(f"not UTF-8 text: {e.reason} at byte {e.start}", file=path, line=line) from None


def _canonical(model: BaseModel) -> bytes:
    data = model.model_dump(mode="json", exclude_defaults=True)
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass
class Problem:
    """A definition with its workloads, as loaded from one place."""

    definition: Definition
    workloads: list[ResolvedWorkload]
    source: str  # where it came from: a directory, a file, or hf://...
    subset: Optional[str] = None
    warnings: list[str] = field(default_factory=list)
    extra: dict = field(default_factory=dict)  # e.g. published B200 reference numbers, provenance
    format: str = "sol-execbench"  # the on-disk format it was read from ("flashinfer-trace", ...)

    @property
    def name(self) -> str:
        return self.definition.name

    @property
    def content_hash(self) -> str:
        """sha256 over what defines the problem (definition and workloads), not where it lives.

        Canonical JSON: keys sorted, defaults left out, so key order in the files, a field spelled
        out at its default value, or a new optional field in our models do not change it."""
        h = hashlib.sha256()
        h.update(_canonical(self.definition))
        for w in self.workloads:
            h.update(b"\n")
            h.update(_canonical(w.workload))
        return h.hexdigest()


def workload_warnings(file: Path | str, workloads: list[ResolvedWorkload]) -> list[str]:
    """One line per distinct warning, with how many workloads share it (not one line each)."""
    seen: dict[str, list[str]] = {}
    for w in workloads:
        for m in w.warnings:
            seen.setdefault(m, []).append(w.uuid)
    return [f"{file}: {m} ({len(u)} workload(s), e.g. {u[0]})" for m, u in seen.items()]


def load_problem_dir(path: Path, subset: Optional[str] = None) -> Problem:
    path = Path(path)
    defn = load_definition(path / DEFINITION_FILE, path / REFERENCE_FILE)
    workloads = load_workloads(path / WORKLOAD_FILE, defn)
    warnings = workload_warnings(path / WORKLOAD_FILE, workloads)
    ref_file = path / REFERENCE_FILE
    if ref_file.is_file() and _read_text(ref_file) != defn.reference:
        warnings.append(f"{ref_file}: differs from definition.json's reference; the JSON's is used")
    extra = {}
    ref = path / "b200_reference.json"
    if ref.exists():
        extra["b200_reference"] = parse_json_text(_read_text(ref), ref)
    return Problem(defn, workloads, str(path), subset, warnings, extra)


def problem_to_json(problem: Problem) -> dict:
    """A problem as plain JSON (definition and workloads as ingested): how a problem crosses into a
    sandboxed process (never pickle). problem_from_json reads it back, resolving the workloads again."""
    return {"definition": problem.definition.model_dump(mode="json"),
            "workloads": [w.workload.model_dump(mode="json") for w in problem.workloads],
            "source": problem.source, "subset": problem.subset}


def problem_from_json(data: dict) -> Problem:
    defn = Definition.model_validate(data["definition"])
    wls = [resolve(defn, Workload.model_validate(w)) for w in data["workloads"]]
    return Problem(defn, wls, data.get("source") or "", data.get("subset"))
