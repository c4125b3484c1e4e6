"""Extraction entry points: one model -> problems; the whole zoo -> data/problems/ (deduplicated).

Layout written: <out>/<model>/<problem>/ for a definition only one model has, and
<out>/shared/<problem>/ for one that several models share (tagged with every one of them).
Each problem directory holds definition.json and workload.jsonl (SOL-ExecBench format).
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from .check import CheckResult, CheckStatus, check_spec
from .plan import plan
from .spec import BlockSpec, definition_hash
from .zoo import ModelConfig, load_zoo

SOURCE_TAG = "source:solforge-extract"
SHARED_DIR = "shared"


@dataclass
class ExtractedProblem:
    model: str
    kind: str
    spec: BlockSpec
    definition: dict
    workloads: list[dict]
    content_hash: str

    @property
    def name(self) -> str:
        return self.definition["name"]


def extract_model(config: ModelConfig) -> list[ExtractedProblem]:
    """The model's hot subgraphs as SOL-ExecBench problems (definitions + workloads), in memory."""
    out = []
    for spec in plan(config):
        tags = [f"model:{config.name}", f"block:{spec.kind}", f"arch:{config.arch.value}", SOURCE_TAG]
        d = spec.definition(tags, config.source.hf_repo)
        out.append(ExtractedProblem(config.name, spec.kind, spec, d, spec.workload_rows(), definition_hash(d)))
    return out


def check_model(config: ModelConfig) -> list[CheckResult]:
    """Each extracted reference against the nn.Module, on the small twin of the config.

    The twin must yield the very same reference text as the real config (only sizes shrink), so
    passing at small shapes vouches for the reference that is written to disk."""
    real = plan(config)
    twin = plan(config.shrunk(), small=True, ref=config)
    if [s.kind for s in real] != [s.kind for s in twin]:
        raise AssertionError(f"{config.name}: small twin plans different blocks")
    results = []
    for r, t in zip(real, twin):
        if r.reference() != t.reference():
            results.append(CheckResult(r.name, CheckStatus.MISMATCH,
                                       log=["reference text differs between the config and its small twin"]))
            continue
        res = check_spec(t)
        res.name = r.name
        results.append(res)
    return results


@dataclass
class ExtractReport:
    models: list[str] = field(default_factory=list)
    problems_written: int = 0
    shared: int = 0
    extracted: int = 0  # before deduplication
    removed_stale: int = 0
    checks_failed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    dirs: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def group_problems(problems: list[ExtractedProblem]) -> list[tuple[str, dict, list[dict], list[str]]]:
    """Deduplicate by content hash: (dir name, definition, workloads, models) per distinct problem."""
    groups: dict[str, list[ExtractedProblem]] = {}
    for p in problems:
        groups.setdefault(p.content_hash, []).append(p)
    by_name: dict[str, list[str]] = {}
    for h, ps in groups.items():
        by_name.setdefault(ps[0].name, []).append(h)
    out = []
    for h, ps in sorted(groups.items(), key=lambda kv: (kv[1][0].name, kv[0])):
        first = ps[0]
        name = first.name if len(by_name[first.name]) == 1 else f"{first.name}_{h[:8]}"
        models = sorted({p.model for p in ps})
        d = dict(first.definition)
        d["name"] = name
        tags = [f"model:{m}" for m in models]
        tags += sorted({t for p in ps for t in p.definition["tags"] if not t.startswith("model:")})
        d["tags"] = tags
        wl = first.workloads
        if name != first.name:  # keep uuids unique per problem
            wl = [dict(w, uuid=w["uuid"][:-8] + h[:8]) for w in wl]
        out.append((name, d, wl, models))
    return out


def write_problem(dir_: Path, definition: dict, workloads: list[dict]) -> None:
    dir_.mkdir(parents=True, exist_ok=True)
    (dir_ / "definition.json").write_text(json.dumps(definition, indent=2) + "\n")
    (dir_ / "workload.jsonl").write_text("".join(json.dumps(w) + "\n" for w in workloads))


def extract_all(zoo_dir: Optional[Path], out_dir: Path, check: bool = False,
                only: Optional[list[str]] = None) -> ExtractReport:
    """Extract every zoo model into out_dir, deduplicated; stale extracted problems are removed.

    With only=[names], just those models are (re)written; other models' directories stay."""
    t0 = time.perf_counter()
    rep = ExtractReport()
    out_dir = Path(out_dir)
    configs = load_zoo(zoo_dir)
    if only:
        unknown = set(only) - {c.name for c in configs}
        if unknown:
            raise KeyError(f"not in the zoo: {sorted(unknown)}")
        configs = [c for c in configs if c.name in only]
    problems: list[ExtractedProblem] = []
    for cfg in configs:
        try:
            problems += extract_model(cfg)
            rep.models.append(cfg.name)
            if check:
                rep.checks_failed += [f"{cfg.name}/{r.name}: {'; '.join(r.log)}"
                                      for r in check_model(cfg) if not r.ok]
        except Exception as e:  # noqa: BLE001 - one broken config must not stop the zoo
            rep.errors.append(f"{cfg.name}: {type(e).__name__}: {e}")
    rep.extracted = len(problems)
    keep = set()
    for name, d, wl, models in group_problems(problems):
        sub = out_dir / (SHARED_DIR if len(models) > 1 else models[0]) / name
        write_problem(sub, d, wl)
        keep.add(sub.resolve())
        rep.problems_written += 1
        rep.shared += len(models) > 1
        rep.dirs.append(str(sub))
    if not only:
        rep.removed_stale = _remove_stale(out_dir, keep)
    rep.seconds = time.perf_counter() - t0
    return rep


def _remove_stale(out_dir: Path, keep: set[Path]) -> int:
    """Delete extracted problem dirs (tagged source:solforge-extract) that this run did not write."""
    n = 0
    for f in out_dir.glob("*/*/definition.json"):
        if f.parent.resolve() in keep:
            continue
        try:
            tags = json.loads(f.read_text()).get("tags", [])
        except (OSError, json.JSONDecodeError):
            continue
        if SOURCE_TAG in tags:
            shutil.rmtree(f.parent)
            n += 1
    for d in out_dir.iterdir() if out_dir.exists() else []:
        if d.is_dir() and not any(d.iterdir()):
            d.rmdir()
    return n
