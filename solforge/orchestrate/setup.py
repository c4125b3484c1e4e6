"""Assemble an optimize run from plain parameters (what `solforge optimize`, a flow or a script is
given): problems (selected in the store), store, lab, workers, budget, GPU slots."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Callable, Optional

from .gpus import GpuPool, visible_gpus
from .loop import LoopConfig, OptimizeLoop, Stages, _prestart, start_evaluator


@dataclass
class OptimizeParams:
    problems: Optional[str] = None         # names, SUBSET/name or globs (solforge.problem.select), or a path
    subset: Optional[str] = None
    limit: Optional[int] = None
    with_family: bool = False               # only problems a kernel family serves (offline worker)
    budget_attempts: Optional[int] = None
    gpu_seconds: Optional[float] = None
    wall_seconds: Optional[float] = None
    max_dollars: Optional[float] = None
    attempts_per_round: int = 4
    runs_per_round: int = 1
    sol_target: float = 0.95
    model: Optional[str] = None             # LiteLLM model; None: offline worker only
    api_base: Optional[str] = None
    api_key_env: Optional[str] = None
    language: str = "cuda"                  # cuda | cute | both
    gpus: Optional[str] = None              # "0,1"; None: every visible GPU; "": none (compile only)
    lanes: int = 1                          # evaluations at a time per GPU (gpus.GpuPool)
    arch: Optional[str] = None
    gpu_profile: Optional[str] = None
    reps: Optional[int] = None
    correctness_rounds: Optional[int] = None
    timing_budget_s: Optional[float] = None
    eval_timeout_s: Optional[float] = None   # per candidate; None: settings.eval_timeout_s
    eval_timeout_for: Optional[str] = None   # "PATTERN=SECONDS,..." per-problem limits (first match)
    screen_workloads: Optional[int] = None   # workloads a candidate screens on; None: settings
    refcache: Optional[str] = None           # problems (globs/substrings) whose reference outputs are
    refcache_max_ref_s: float = 120.0        # cached per run (evaluate/refcache.py); a workload whose
    refcache_dir: Optional[str] = None       # reference call runs over max_ref_s is left out
    baseline_reps: int = 20                  # reps when a missing eager baseline is measured
    max_tokens: Optional[int] = None
    max_calls: Optional[int] = None
    no_tools: bool = False
    offline: bool = False                    # offline worker only, even with a model configured
    job: Optional[str] = None                # part of the resume key: a new value starts a new job
    db: Optional[str] = None

    def resume_parts(self) -> dict:
        """What identifies the job for resume: everything but where it runs and how it is stored."""
        d = asdict(self)
        for k in ("gpus", "lanes", "db", "api_key_env", "api_base", "refcache_dir", "screen_workloads"):
            d.pop(k)
        return d


def parse_timeouts(spec: Optional[str]) -> list[tuple[str, float]]:
    """"014_gqa*=240,015_gqa*=240" -> [("014_gqa*", 240.0), ("015_gqa*", 240.0)]."""
    from ..errors import InputError

    out = []
    for part in (spec or "").split(","):
        if not part.strip():
            continue
        pat, sep, secs = part.rpartition("=")
        try:
            seconds = float(secs) if sep and pat.strip() else None
        except ValueError:
            seconds = None
        if seconds is None:
            raise InputError(f"--eval-timeout-for: {part!r} is not PATTERN=SECONDS",
                             field="eval_timeout_for")
        out.append((pat.strip(), seconds))
    return out


def gpu_pool(gpus: Optional[str], lanes: int = 1) -> GpuPool:
    if gpus is None:
        return GpuPool(visible_gpus(), lanes=lanes)
    return GpuPool([g.strip() for g in gpus.split(",") if g.strip()], lanes=lanes)


def select_problems(store, selector: Optional[str], *, subset: Optional[str] = None,
                    limit: Optional[int] = None, with_family: bool = False,
                    shared_dir=None, report: Optional[Callable[[str], None]] = None,
                    matcher=None) -> list:
    """The problems a run works on, read back from the store.

    `selector`: a path (ingested into the store first), or names / SUBSET/name / globs
    (solforge.problem.select) over the stored problems; terms the store does not know are looked up
    in the shared SOL-ExecBench tree and ingested from there. `with_family`: only problems a kernel
    family serves, matched in parallel by `matcher` (an OfflineWorker: the run's own, so that its
    loop finds them matched already). Raises InputError when nothing matches."""
    from ..errors import InputError
    from ..problem.select import expand_file, select, unmatched
    from ..store.problems import load_problems, problem_index, upsert_problems

    report = report or _to_stderr
    selector = expand_file(selector)
    if selector and _is_path(selector):
        from ..problem.sources import ingest_path

        rep = ingest_path(selector)
        for e in rep.errors:
            report(f"solforge: skipped: {e}")
        upsert_problems(store, rep.problems)
        known = [(q.name, q.subset) for q in rep.problems]
        names = [n for n, _ in select(known, None, subset=subset)]
    else:
        missing = unmatched(problem_index(store), selector) if selector else []
        if missing or not selector and not problem_index(store):
            _ingest_shared(store, missing or ["*"], shared_dir, report)
        names = [n for n, _ in select(problem_index(store), selector, subset=subset)]
    probs = load_problems(store, names)
    if with_family:
        from ..agents.offline import OfflineWorker

        matcher = matcher or OfflineWorker(None)
        matcher.warm(probs, progress=report)
        probs = [q for q in probs if matcher.has_family(q)]
    if limit:
        probs = probs[:limit]
    if not probs:
        raise InputError("no problem matches", field="--problems/--subset")
    return probs


def _is_path(selector: str) -> bool:
    """A selector names a path to ingest only when it is one (a long comma list is not, and asking
    the filesystem about it can fail with 'file name too long')."""
    from pathlib import Path

    if "," in selector:
        return False
    try:
        return Path(selector).exists()
    except OSError:
        return False


def _to_stderr(msg: str) -> None:
    import sys

    print(msg, file=sys.stderr)


def _ingest_shared(store, selector_terms: list[str], shared_dir, report) -> None:
    """Problems of the shared SOL-ExecBench tree that these terms name, into the store."""
    from ..errors import InputError
    from ..problem import load_problem_dir
    from ..problem.select import matches
    from ..store.problems import upsert_problems

    root = shared_dir / "sol_execbench" if shared_dir else None
    if root is None or not root.is_dir():
        return  # nothing more to find: the caller says nothing matches
    found = []
    for sub in sorted(d for d in root.iterdir() if d.is_dir()):
        for d in sorted(x for x in sub.iterdir() if (x / "definition.json").exists()):
            if any(matches(t, d.name, sub.name) for t in selector_terms):
                try:
                    found.append(load_problem_dir(d, subset=sub.name))
                except InputError as e:
                    report(f"solforge: skipped: {e}")
    if found:
        upsert_problems(store, found)


def build(p: OptimizeParams, stages: Optional[Stages] = None,
          progress: Optional[Callable[[str], None]] = None, store=None) -> OptimizeLoop:
    from .. import settings
    from ..agents import history
    from ..agents.lab import Lab
    from ..agents.llm import LlmWorker
    from ..agents.llm_client import LlmConfig
    from ..agents.offline import OfflineWorker
    from ..agents.planner import Budget, PlannerConfig
    from ..errors import InputError
    from ..store import Store

    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    # the sandbox's one line on reduced isolation, said here, before any matching or evaluating
    # process starts (they inherit the mark and stay silent: one line a run, not one a process)
    from ..sandbox import bwrap

    bwrap.available()
    pool = gpu_pool(p.gpus, p.lanes)
    if len(pool) and (stages is None or stages.prestart is _prestart):
        start_evaluator()  # its imports overlap what follows (problems, traced; store; lab)
    cfg = settings.Settings.load(db_path=p.db, arch=p.arch, gpu_profile=p.gpu_profile)
    store = store or Store(cfg.db_path)
    overrides = {k: v for k, v in (("rep_count", p.reps), ("correctness_rounds", p.correctness_rounds),
                                   ("timing_budget_s", p.timing_budget_s)) if v is not None}
    lab = Lab(cfg.arch, cfg.gpu_profile, store=store, eval_settings=overrides, has_gpu=len(pool) > 0)
    offline = OfflineWorker(lab)
    problems = select_problems(store, p.problems, subset=p.subset, limit=p.limit,
                               with_family=p.with_family, shared_dir=cfg.shared_dir,
                               report=progress, matcher=offline)
    lab.baseline_reps = p.baseline_reps
    lab.eval_timeout_s = p.eval_timeout_s
    lab.eval_timeout_overrides = parse_timeouts(p.eval_timeout_for)
    lab.screen_workloads = cfg.screen_workloads if p.screen_workloads is None else p.screen_workloads
    if p.refcache:
        from pathlib import Path

        from .refcache import RefCaches, parse_patterns

        lab.refcaches = RefCaches(parse_patterns(p.refcache), max_ref_s=p.refcache_max_ref_s,
                                  root=Path(p.refcache_dir) if p.refcache_dir else None)
    workers: dict = {"offline": offline}
    langs = ("cuda", "cute") if p.language == "both" else (p.language,)
    loop_cfg = LoopConfig(
        budget=Budget(attempts=p.budget_attempts, gpu_seconds=p.gpu_seconds, dollars=p.max_dollars,
                      wall_seconds=p.wall_seconds),
        planner=PlannerConfig(attempts_per_round=p.attempts_per_round, sol_target=p.sol_target),
        runs_per_round=p.runs_per_round, model=p.model or "", languages=langs)
    model = None if p.offline else (p.model or cfg.llm_model or None)
    loop = OptimizeLoop(store, problems, lab, workers, loop_cfg,
                        pool=pool, stages=stages, key_parts=p.resume_parts(), progress=progress)
    if model:
        api_key = os.environ.get(p.api_key_env) if p.api_key_env else None
        if p.api_key_env and not api_key:
            raise InputError(f"environment variable {p.api_key_env} is not set", field="api_key_env")
        llm_cfg = LlmConfig(model=model, api_base=p.api_base, api_key=api_key,
                            use_tools=not p.no_tools, max_dollars=p.max_dollars,
                            max_total_tokens=p.max_tokens, max_calls=p.max_calls)
        loop.workers["llm"] = LlmWorker(llm_cfg, lab, on_call=loop.on_llm_call,
                                        launch_times=history.launch_times(store))
        loop.cfg.planner.llm_available = True
        loop.cfg.model = model
    return loop
