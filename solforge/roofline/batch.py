"""Counting many problems: sandboxes run the references, and a cache of counts per problem content hash.

Counts (FLOPs per unit, bytes per workload) do not depend on the GPU, so the cache key is the problem's
content_hash plus COUNTER_VERSION; pricing a cached count on any profile is arithmetic. References are
a dataset's code: they run only in sandboxes (sandboxed.py), `jobs` of them side by side, each
importing torch once and forking a child per problem, with a per-problem timeout. This process only
loads problem files (data) and writes the cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional

from ..errors import InputError
from ..problem.loader import Problem, load_problem_dir
from .sandboxed import count_problem
from .estimate import COUNTER_VERSION, CountStatus, WorkloadCount


@dataclass
class ProblemCount:
    name: str
    subset: Optional[str]
    content_hash: str
    counts: list[WorkloadCount]
    published: list[dict]  # b200_reference per_workload entries (may be empty)
    cached: bool = False
    seconds: float = 0.0  # wall time spent counting (0 when cached)
    error: str = ""  # the problem could not be loaded (then counts is empty): one line


def problem_dirs(root: Path) -> list[Path]:
    """Every directory under root (one or two levels) holding a definition.json."""
    root = Path(root)
    if (root / "definition.json").exists():
        return [root]
    out = sorted(p.parent for p in root.glob("*/definition.json"))
    out += sorted(p.parent for p in root.glob("*/*/definition.json"))
    return out


def _cache_file(cache_dir: Path, content_hash: str) -> Path:
    key = hashlib.sha256(f"{content_hash}:{COUNTER_VERSION}".encode()).hexdigest()[:32]
    return Path(cache_dir) / "roofline" / f"{key}.json"


def _published(problem: Problem) -> list[dict]:
    ref = problem.extra.get("b200_reference") or {}
    return list(ref.get("per_workload") or [])


def cached_only(problem: Problem, cache_dir: Optional[Path]) -> Optional[ProblemCount]:
    """The cached counts of a problem, or None (no counting)."""
    if cache_dir is None or not _cache_file(cache_dir, problem.content_hash).exists():
        return None
    return count_cached(problem, cache_dir)


def _read_cache(problem: Problem, cache_dir: Optional[Path]) -> Optional[ProblemCount]:
    if cache_dir is None:
        return None
    f = _cache_file(cache_dir, problem.content_hash)
    if not f.exists():
        return None
    try:
        data = json.loads(f.read_text())
        counts = [WorkloadCount.from_json(d) for d in data["counts"]]
        return ProblemCount(problem.name, problem.subset, problem.content_hash, counts,
                            _published(problem), True)
    except (OSError, ValueError, KeyError, TypeError):
        return None  # a damaged cache entry is recomputed


def _write_cache(problem: Problem, cache_dir: Optional[Path], counts: list[WorkloadCount]) -> None:
    if cache_dir is None:
        return
    f = _cache_file(cache_dir, problem.content_hash)
    f.parent.mkdir(parents=True, exist_ok=True)
    tmp = f.with_suffix(f".{os.getpid()}.{id(counts)}.tmp")
    tmp.write_text(json.dumps({"problem": problem.name, "content_hash": problem.content_hash,
                               "counter_version": COUNTER_VERSION,
                               "counts": [c.to_json() for c in counts]}))
    tmp.replace(f)


def count_cached(problem: Problem, cache_dir: Optional[Path]) -> ProblemCount:
    hit = _read_cache(problem, cache_dir)
    if hit is not None:
        return hit
    t0 = time.perf_counter()
    counts = count_problem(problem)
    seconds = time.perf_counter() - t0
    if not any("reference run refused or failed" in c.reason for c in counts):
        _write_cache(problem, cache_dir, counts)
    return ProblemCount(problem.name, problem.subset, problem.content_hash, counts, _published(problem),
                        False, seconds)


def _cost_hint(problem: Problem) -> int:
    return len(problem.definition.reference or "") * max(1, len(problem.workloads))


def _load(item) -> Problem | ProblemCount:
    """A Problem, or a ProblemCount holding the one-line reason it could not be loaded."""
    if isinstance(item, Problem):
        return item
    p = Path(item)
    try:
        return load_problem_dir(p, p.parent.name)
    except InputError as e:
        return ProblemCount(p.name, p.parent.name, "", [], [], error=str(e).splitlines()[0])
    except (OSError, RecursionError, MemoryError) as e:
        return ProblemCount(p.name, p.parent.name, "", [], [], error=f"{p}: cannot load problem: "
                            f"{type(e).__name__}: {e}")


def count_many(items: Iterable, cache_dir: Optional[Path], jobs: int = 2,
               progress: Optional[Callable[[ProblemCount], None]] = None,
               timeout_s: Optional[float] = None) -> list[ProblemCount]:
    """items: Problems, or problem directories (Path; the subset is the parent directory's name).

    timeout_s: per problem (default $SOLFORGE_REFERENCE_TIMEOUT_S or 900 s). A problem that cannot
    be loaded, or whose reference hangs, crashes or is refused, is one ProblemCount with the reason
    (error, or every count UNSUPPORTED) and the others go on."""
    from .sandboxed import count_batch_in_sandbox

    results: list[ProblemCount] = []
    todo: list[Problem] = []

    def done(r: ProblemCount) -> None:
        results.append(r)
        if progress:
            progress(r)

    for it in items:
        got = _load(it)
        if isinstance(got, ProblemCount):
            done(got)
            continue
        hit = _read_cache(got, cache_dir)
        if hit is not None:
            done(hit)
        else:
            todo.append(got)
    # longest first, dealt round-robin, so that no sandbox gets all the big problems: the size of a
    # problem's definition (its reference and custom-input code) is a cheap proxy of its tracing cost
    todo.sort(key=lambda p: -_cost_hint(p))
    n = max(1, min(jobs, len(todo)))
    chunks = [todo[i::n] for i in range(n)]

    def run(chunk: list[Problem]) -> list[ProblemCount]:
        t0 = time.perf_counter()
        out = []
        answers = count_batch_in_sandbox(chunk, timeout_s=timeout_s)
        seconds = (time.perf_counter() - t0) / max(1, len(chunk))
        for problem, (counts, cacheable) in zip(chunk, answers):
            if cacheable:
                _write_cache(problem, cache_dir, counts)
            out.append(ProblemCount(problem.name, problem.subset, problem.content_hash, counts,
                                    _published(problem), False, seconds))
        return out

    if todo:
        with ThreadPoolExecutor(max_workers=n) as ex:
            for fut in as_completed([ex.submit(run, c) for c in chunks if c]):
                for r in fut.result():
                    done(r)
    results.sort(key=lambda r: r.name)
    return results


def failed(pc: ProblemCount) -> list[WorkloadCount]:
    return [c for c in pc.counts if c.status is not CountStatus.OK]
