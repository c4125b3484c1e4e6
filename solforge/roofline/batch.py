"""Counting many problems: a process pool, and a cache of counts per problem content hash.

Counts (FLOPs per unit, bytes per workload) do not depend on the GPU, so the cache key is the problem's
content_hash plus COUNTER_VERSION; pricing a cached count on any profile is arithmetic. The pool forks
from a parent that has already paid torch's one-time dispatch-mode import cost (~5 s on this machine).
"""

from __future__ import annotations

import gc
import hashlib
import json
import multiprocessing as mp
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional

from ..problem.loader import Problem, load_problem_dir
from .count import count_problem
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


def count_cached(problem: Problem, cache_dir: Optional[Path]) -> ProblemCount:
    h = problem.content_hash
    if cache_dir is not None:
        f = _cache_file(cache_dir, h)
        if f.exists():
            try:
                data = json.loads(f.read_text())
                counts = [WorkloadCount.from_json(d) for d in data["counts"]]
                return ProblemCount(problem.name, problem.subset, h, counts, _published(problem), True)
            except (ValueError, KeyError, TypeError):
                pass  # a damaged cache entry is recomputed
    t0 = time.perf_counter()
    counts = count_problem(problem)
    seconds = time.perf_counter() - t0
    if cache_dir is not None:
        f = _cache_file(cache_dir, h)
        f.parent.mkdir(parents=True, exist_ok=True)
        tmp = f.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"problem": problem.name, "content_hash": h,
                                   "counter_version": COUNTER_VERSION,
                                   "counts": [c.to_json() for c in counts]}))
        tmp.replace(f)
    return ProblemCount(problem.name, problem.subset, h, counts, _published(problem), False, seconds)


def _count_dir(args) -> ProblemCount:
    path, subset, cache_dir = args
    import torch

    torch.set_num_threads(1)
    return count_cached(load_problem_dir(Path(path), subset), cache_dir)


def _count_problem(args) -> ProblemCount:
    problem, cache_dir = args
    import torch

    torch.set_num_threads(1)
    return count_cached(problem, cache_dir)


def _warm() -> None:
    """Pay the one-time import cost of torch's dispatch-mode machinery before forking workers."""
    import torch

    from .trace import HybridMode, patch_cuda_init, skip_dynamo_import

    patch_cuda_init()
    # torch's Python reference kernels import torch._dynamo on first use (seconds) only to wrap
    # themselves for torch.compile: skip that (trace.skip_dynamo_import)
    skip_dynamo_import()
    with HybridMode():
        torch.empty(2, 2, device="meta") + 1
    # everything imported so far lives as long as the process: out of the collector's way, so that
    # the workers' collections scan only what tracing creates (gc was ~15% of a trace's time)
    gc.freeze()


def _worker_gc() -> None:
    # a trace allocates ~10^5 short-lived objects (tensors, tuples, weak references); collecting the
    # youngest generation every 700 allocations cost more than the cycles it finds
    gc.set_threshold(50_000, 20, 20)


def _cost_hint(item) -> int:
    if isinstance(item, Problem):
        return len(item.definition.reference or "") * max(1, len(item.workloads))
    try:
        d = Path(item)
        return (d / "definition.json").stat().st_size * max(1, (d / "workload.jsonl").stat().st_size // 200)
    except OSError:
        return 0


def count_many(items: Iterable, cache_dir: Optional[Path], jobs: int = 2,
               progress: Optional[Callable[[ProblemCount], None]] = None) -> list[ProblemCount]:
    """items: Problems, or problem directories (Path; the subset is the parent directory's name)."""
    tasks = []
    for it in items:
        if isinstance(it, Problem):
            tasks.append((_count_problem, (it, cache_dir)))
        else:
            p = Path(it)
            tasks.append((_count_dir, (str(p), p.parent.name, cache_dir)))
    results: list[ProblemCount] = []
    if jobs <= 1 or len(tasks) <= 1:
        for fn, a in tasks:
            r = fn(a)
            results.append(r)
            if progress:
                progress(r)
        return results
    _warm()
    # longest first, so that no big problem starts last and runs alone: the size of a problem's
    # definition (its reference and custom-input code) is a cheap proxy of its tracing cost
    tasks.sort(key=lambda t: -_cost_hint(t[1][0]))
    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else None
    try:
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_worker_gc) as ex:
            futs = [ex.submit(fn, a) for fn, a in tasks]
            for f in as_completed(futs):
                r = f.result()
                results.append(r)
                if progress:
                    progress(r)
    finally:
        gc.unfreeze()  # the parent (a flow, a long-lived process) collects as usual again
    results.sort(key=lambda r: r.name)
    return results


def failed(pc: ProblemCount) -> list[WorkloadCount]:
    return [c for c in pc.counts if c.status is not CountStatus.OK]
