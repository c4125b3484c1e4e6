"""hf://nvidia/SOL-ExecBench[/<subset>][@<revision>]: download the dataset's parquet files with
huggingface_hub, unpack them into the SOL-ExecBench folder layout in the cache, then ingest that.

The Hub dataset has one config per subset (L1, L2, Quant, FlashInfer-Bench); a row holds name, hf_id,
description, reference, custom_inputs_entrypoint, and axes/inputs/outputs/workloads as JSON strings.
Unpacking writes what NVIDIA's own download script writes (definition.json, reference.py,
workload.jsonl), so a problem downloaded here hashes the same as the same problem on disk.
HF_ENDPOINT and HF_TOKEN are honoured by huggingface_hub itself.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Optional

from ..errors import InputError
from .ingest import HF_SCHEME, IngestReport, ingest_local, reject_duplicate_names

DEFAULT_REPO = "nvidia/SOL-ExecBench"
SUBSETS = ("L1", "L2", "Quant", "FlashInfer-Bench")
JSON_COLUMNS = ("axes", "inputs", "outputs", "workloads")
REQUIRED_COLUMNS = ("name", "reference", *JSON_COLUMNS)
PARQUET_REF = "refs/convert/parquet"
_UNPACK_VERSION = "1"  # bump when the unpacked layout changes, so old caches are rebuilt


def parse_uri(uri: str) -> tuple[str, Optional[str], Optional[str]]:
    """hf://owner/name[/subset][@revision] -> (repo_id, subset or None, revision or None)."""
    if not uri.startswith(HF_SCHEME):
        raise InputError(f"not an hf:// URI: {uri!r}", file=uri)
    rest = uri[len(HF_SCHEME):].strip("/")
    revision = None
    if "@" in rest:
        rest, revision = rest.rsplit("@", 1)
    parts = [p for p in rest.split("/") if p]
    if parts and parts[0] == "datasets":  # hf://datasets/owner/name is the Hub's own spelling
        parts = parts[1:]
    if len(parts) < 2 or len(parts) > 3:
        raise InputError("expected hf://<owner>/<dataset>[/<subset>][@<revision>]", file=uri)
    for part in parts[:3]:
        if not _SAFE_NAME.match(part) or ".." in part:
            raise InputError(f"{part!r} is not a valid owner, dataset or subset name", file=uri)
    return f"{parts[0]}/{parts[1]}", (parts[2] if len(parts) == 3 else None), revision or None


def inside(path: Path, root: Path) -> bool:
    """Whether `path`, resolved (symlinks and .. followed), lies inside `root`, resolved."""
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def cache_root() -> Path:
    from ..settings import get
    return Path(get().cache_dir) / "hf"


def ingest_hf(uri: str, cache_dir: Path | None = None) -> IngestReport:
    try:
        repo_id, subset, revision = parse_uri(uri)
    except InputError as e:
        return IngestReport(errors=[e], source=uri)
    cache = Path(cache_dir) if cache_dir else cache_root()
    try:
        snapshot, commit = download(repo_id, revision, cache / "hub")
        if revision is None and not parquet_by_subset(snapshot):
            # The branch holds the dataset in another format: the Hub keeps a parquet copy of every
            # config on this ref ({config}/{split}/NNNN.parquet).
            snapshot, commit = download(repo_id, PARQUET_REF, cache / "hub")
    except Exception as e:  # noqa: BLE001 - network and Hub errors become one report error
        return IngestReport(errors=[InputError(f"download failed: {type(e).__name__}: {e}",
                                               file=uri)], source=uri)
    report = IngestReport(source=uri)
    files = parquet_by_subset(snapshot)
    if subset is not None:
        if subset not in files:
            known = ", ".join(sorted(files)) or "none"
            report.errors.append(InputError(f"subset {subset!r} not in {repo_id} (has: {known})",
                                            file=uri))
            return report
        files = {subset: files[subset]}
    if not files:
        report.errors.append(InputError(f"no parquet files in {repo_id}@{commit}", file=uri))
        return report
    if not _SAFE_NAME.match(commit):
        report.errors.append(InputError(f"revision {commit!r} is not a usable folder name", file=uri))
        return report
    out = cache / "unpacked" / repo_id.replace("/", "__") / commit
    for name, paths in sorted(files.items()):
        # config names come from the dataset card: a name like ../../x must never become a path
        subset_dir = out / name
        if not _SAFE_NAME.match(name) or ".." in name or not inside(subset_dir, out):
            report.errors.append(InputError(f"config name {name!r} is not usable as a folder name; "
                                            "subset skipped", file=uri, field="configs"))
            continue
        errors = unpack_subset(paths, subset_dir, root=out)
        report.errors += errors
        sub = ingest_local(subset_dir, provenance={"uri": uri, "repo": repo_id, "revision": commit,
                                                   "parquet": [p.name for p in paths]})
        for p in sub.problems:
            p.source = f"{HF_SCHEME}{repo_id}/{name}/{p.name}@{commit}"
        report.extend(sub)
    reject_duplicate_names(report)  # across subsets too
    report.problems.sort(key=lambda p: (p.subset or "", p.name))
    return report


def download(repo_id: str, revision: Optional[str], cache_dir: Path) -> tuple[Path, str]:
    """The dataset's parquet files and card, via huggingface_hub's snapshot_download (resumable,
    cached by commit). Returns the snapshot folder and the commit hash it resolved to."""
    from huggingface_hub import snapshot_download

    path = Path(snapshot_download(repo_id, repo_type="dataset", revision=revision,
                                  cache_dir=str(cache_dir),
                                  allow_patterns=["*.parquet", "README.md"]))
    return path, path.name  # snapshots/<commit>


def parquet_by_subset(snapshot: Path) -> dict[str, list[Path]]:
    """Which parquet files make which subset: the dataset card's `configs` when it has them, else the
    subset name as a folder or file-name prefix (Hub conventions: L1/train-*.parquet, data/L1-*.parquet)."""
    files = sorted(p for p in snapshot.rglob("*.parquet"))
    rel = {p: p.relative_to(snapshot).as_posix() for p in files}
    out: dict[str, list[Path]] = {}
    for name, patterns in _card_configs(snapshot / "README.md").items():
        hits = [p for p in files if any(fnmatch.fnmatch(rel[p], pat) for pat in patterns)]
        if hits:
            out[name] = hits
    if out:
        return out
    for p in files:
        parts = rel[p].split("/")
        for s in SUBSETS:
            if s in parts[:-1] or re.match(rf"^{re.escape(s)}([-_.]|$)", parts[-1]):
                out.setdefault(s, []).append(p)
                break
    return out


def _card_configs(readme: Path) -> dict[str, list[str]]:
    """config_name -> data file patterns, from the dataset card's YAML front matter."""
    if not readme.is_file():
        return {}
    text = readme.read_text(encoding="utf-8", errors="replace")
    m = re.match(r"^---\s*\n(.*?)\n---", text, re.S)
    if not m:
        return {}
    import yaml

    try:
        meta = yaml.safe_load(m.group(1)) or {}
    except yaml.YAMLError:
        return {}
    out: dict[str, list[str]] = {}
    for cfg in meta.get("configs") or []:
        if not isinstance(cfg, dict) or "config_name" not in cfg:
            continue
        df = cfg.get("data_files")
        pats: list[str] = []
        for item in df if isinstance(df, list) else [df]:
            if isinstance(item, str):
                pats.append(item)
            elif isinstance(item, dict):
                p = item.get("path")
                pats += p if isinstance(p, list) else [p] if isinstance(p, str) else []
        out[str(cfg["config_name"])] = pats
    return out


def read_rows(path: Path) -> list[dict]:
    import polars as pl

    return pl.read_parquet(path).to_dicts()


MAX_PARQUET_BYTES = 8 << 30


def unpack_subset(parquet_files: list[Path], out_dir: Path, root: Path | None = None) -> list[InputError]:
    """Write one problem folder per row. Rebuilt only when the parquet files change (a stamp holds
    their digest); written to a temporary folder first so a crash never leaves half a subset.
    `root` (default: out_dir's parent) is the folder out_dir must stay inside: nothing outside it is
    ever written or removed."""
    root = Path(root) if root is not None else out_dir.parent
    if out_dir.name in ("", ".", "..") or not inside(out_dir, root) or \
            out_dir.resolve() == root.resolve():
        return [InputError(f"refusing to unpack into {out_dir}: not inside {root}", file=out_dir)]
    digest = hashlib.sha256(_UNPACK_VERSION.encode())
    for p in parquet_files:
        digest.update(p.name.encode())
        try:
            _hash_regular(p, digest)
        except (OSError, ValueError) as e:
            return [InputError(f"cannot read parquet: {e}", file=p)]
    stamp = out_dir / ".unpacked"
    errors_file = out_dir / ".errors.json"
    if stamp.is_file() and stamp.read_text() == digest.hexdigest():
        return [InputError(e["message"], file=e["file"], line=e["line"], field=e["field"])
                for e in json.loads(errors_file.read_text())] if errors_file.is_file() else []
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=out_dir.parent))
    errors: list[InputError] = []
    for pq in parquet_files:
        try:
            rows = read_rows(pq)
        except Exception as e:  # noqa: BLE001 - a corrupt download
            errors.append(InputError(f"cannot read parquet: {type(e).__name__}: {e}", file=pq))
            continue
        for i, row in enumerate(rows, start=1):
            try:
                _write_problem(row, tmp, pq, i)
            except InputError as e:
                errors.append(e)
    (tmp / ".errors.json").write_text(json.dumps(
        [{"message": e.message, "file": e.file, "line": e.line, "field": e.field} for e in errors]))
    (tmp / ".unpacked").write_text(digest.hexdigest())
    if out_dir.exists() or out_dir.is_symlink():
        if out_dir.is_symlink() or not inside(out_dir, root):  # swapped for a link meanwhile
            shutil.rmtree(tmp, ignore_errors=True)
            return errors + [InputError(f"refusing to replace {out_dir}: it leads outside {root}",
                                        file=out_dir)]
        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)
    return errors


def _hash_regular(path: Path, digest) -> None:
    """Feed a regular file (symlinks followed: the Hub's cache links snapshots to blobs) to digest."""
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        if st.st_size > MAX_PARQUET_BYTES:
            raise ValueError(f"{st.st_size} bytes, over the {MAX_PARQUET_BYTES}-byte limit")
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)


_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


def _write_problem(row: dict, root: Path, pq: Path, rowno: int) -> None:
    # Rows are addressed as file=<parquet>, line=<row number, 1-based>, field=<column>.
    for col in REQUIRED_COLUMNS:
        if row.get(col) is None:
            raise InputError("missing value", file=pq, line=rowno, field=col)
    name = row["name"]
    if not isinstance(name, str) or not _SAFE_NAME.match(name) or ".." in name:
        raise InputError(f"{name!r} is not usable as a folder name", file=pq, line=rowno, field="name")
    parsed = {}
    for col in JSON_COLUMNS:
        try:
            parsed[col] = json.loads(row[col])
        except (TypeError, json.JSONDecodeError) as e:
            raise InputError(f"invalid JSON: {e}", file=pq, line=rowno, field=col) from None
    if not isinstance(parsed["workloads"], list):
        raise InputError("expected a JSON list", file=pq, line=rowno, field="workloads")
    # The same keys, in the same order, as NVIDIA's scripts/download_solexecbench.py writes.
    definition = {"name": name, "hf_id": row.get("hf_id"), "description": row.get("description"),
                  "axes": parsed["axes"], "custom_inputs_entrypoint": row.get("custom_inputs_entrypoint"),
                  "inputs": parsed["inputs"], "outputs": parsed["outputs"], "reference": row["reference"]}
    d = root / name
    if not inside(d, root):
        raise InputError(f"{name!r} is not usable as a folder name", file=pq, line=rowno, field="name")
    if d.exists():
        raise InputError(f"duplicate problem name {name!r}", file=pq, line=rowno, field="name")
    d.mkdir(parents=True)
    (d / "definition.json").write_text(json.dumps(definition, indent=4) + "\n")
    (d / "reference.py").write_text(row["reference"])
    (d / "workload.jsonl").write_text("".join(json.dumps(w) + "\n" for w in parsed["workloads"]))
