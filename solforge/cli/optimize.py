"""CLI: optimize: planner + workers (owner: agents).

    solforge optimize [--problems GLOB|PATH] [--subset S] [--budget-attempts N] [--gpu-seconds S]
                      [--model M] [--api-base URL] [--db PATH] ...

Without --model (or settings.llm_model / SOLFORGE_LLM_MODEL) the offline worker runs alone: kernel
families from solforge.kernels, tuned by search. Without a GPU it plans, checks and compiles, and says
that correctness and timing need a GPU.
"""

from __future__ import annotations

import logging
import os
import sys
from contextlib import contextmanager
from typing import Callable, Iterator, Optional


def register(sub) -> None:
    r = sub.add_parser("rescore", help="fill speedups and SOL scores of attempts whose baselines "
                                       "arrived after their evaluation")
    r.add_argument("--refresh", action="store_true",
                   help="also redo scores whose T_b has changed since (newer or faster baselines)")
    r.set_defaults(func=_rescore)
    p = sub.add_parser("optimize", help="run the planner and workers on problems (needs a GPU to time)",
                       description=__doc__.split("\n\n")[0])
    sel = p.add_argument_group("problems")
    sel.add_argument("--problems", help="names, SUBSET/name or globs, comma-separated (e.g. "
                                        "'FlashInfer-Bench/*rmsnorm*'), over the store's problems "
                                        "(ingested from the shared tree when the store lacks them), "
                                        "a path to ingest, or @FILE (one of those per line)")
    sel.add_argument("--subset", help="only this subset (L1, L2, Quant, FlashInfer-Bench)")
    sel.add_argument("--limit", type=int, help="at most this many problems (after filtering)")
    sel.add_argument("--with-family", action="store_true",
                     help="only problems a kernel family serves (what the offline worker can do)")
    b = p.add_argument_group("budget")
    b.add_argument("--budget-attempts", type=int, default=None, help="attempts in this run")
    b.add_argument("--gpu-seconds", type=float, default=None, help="GPU-seconds of evaluation")
    b.add_argument("--wall-seconds", type=float, default=None,
                   help="stop starting new rounds after this many seconds (a round may finish late)")
    b.add_argument("--max-dollars", type=float, default=None, help="LLM dollars")
    b.add_argument("--max-tokens", type=int, default=None, help="LLM tokens (prompt + completion)")
    b.add_argument("--max-calls", type=int, default=None, help="LLM calls")
    b.add_argument("--attempts-per-round", type=int, default=4)
    b.add_argument("--runs-per-round", type=int, default=1, help="problems served per planner round")
    b.add_argument("--sol-target", type=float, default=0.95, help="stop a problem at this SOL score")
    m = p.add_argument_group("LLM")
    m.add_argument("--model", help="LiteLLM model string (default settings.llm_model); none: offline")
    m.add_argument("--api-base", help="OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1")
    m.add_argument("--api-key-env", help="name of the environment variable holding the API key "
                                         "(default: the provider's usual variable)")
    m.add_argument("--no-tools", action="store_true", help="do not offer function calling")
    m.add_argument("--offline", action="store_true", help="offline worker only, even with a model")
    m.add_argument("--language", choices=["cuda", "cute", "both"], default="cuda")
    e = p.add_argument_group("evaluation (GPU)")
    e.add_argument("--reps", type=int, help="timed repetitions per workload (default settings.rep_count)")
    e.add_argument("--correctness-rounds", type=int, help="fresh-input rounds (default settings)")
    e.add_argument("--timing-budget-s", type=float, help="timing time box per workload, seconds")
    e.add_argument("--eval-timeout-s", type=float,
                   help="wall-clock limit per candidate evaluation (default settings.eval_timeout_s)")
    e.add_argument("--eval-timeout-for", metavar="PATTERN=SECONDS[,...]",
                   help="per-problem evaluation limits (glob or substring of the problem name; the "
                        "first match wins over --eval-timeout-s)")
    e.add_argument("--screen", type=int, metavar="K", dest="screen_workloads",
                   help="where the problem has a timed best on this GPU model, evaluate a candidate on "
                        "K representative workloads first and on the rest only if it could be a new "
                        "best there (default settings.screen_workloads; 0: every workload)")
    e.add_argument("--refcache", metavar="PATTERNS",
                   help="problems (comma-separated globs/substrings) whose reference outputs are "
                        "computed once per run by a trusted process and reused by every candidate "
                        "evaluation (slow Python-loop references, e.g. '014_gqa,015_gqa')")
    e.add_argument("--refcache-max-ref-s", type=float, default=120.0,
                   help="a workload whose reference call runs longer is left out of the run")
    e.add_argument("--refcache-dir", help="where the run's cache goes (default: a fresh temp dir)")
    e.add_argument("--baseline-reps", type=int, default=20,
                   help="reps when a missing eager baseline is measured on first touch")
    p.add_argument("--gpus", help="CUDA_VISIBLE_DEVICES-style GPUs to spread evaluations over, one at "
                                  "a time each (default: every visible GPU; '' compile only)")
    p.add_argument("--lanes", type=int, default=1,
                   help="evaluations at a time per GPU: their correctness checks run side by side, "
                        "each timing alone (default 1)")
    p.add_argument("--resume", action="store_true",
                   help="continue the job these same parameters started (budget counts what it spent; "
                        "unfinished attempts are finished, none evaluated twice)")
    p.add_argument("--arch", help="compile target (default settings.arch)")
    p.add_argument("--gpu-profile", help="roofline profile (default settings.gpu_profile)")
    p.add_argument("--dry-run", action="store_true",
                   help="list the selected problems (source folder, kernel families) and stop")
    p.add_argument("--match-only", action="store_true",
                   help="match the selected problems to their kernel families into the disk cache "
                        "($SOLFORGE_CACHE_DIR: compiled plans, tracer answers) without a GPU and "
                        "stop: what a run on a GPU box does first, done ahead on a CPU machine "
                        "with the same --arch and --gpu-profile (docs/gpu_runbook.md)")
    p.add_argument("--match-jobs", type=int, default=None,
                   help="matching processes (default: the CPUs, at most the matching pool's cap)")
    p.add_argument("-v", "--verbose", action="store_true")
    p.set_defaults(func=run)


@contextmanager
def stop_on_sigterm(store, run_id: Callable[[], Optional[str]]) -> Iterator[None]:
    """While the loop runs, SIGTERM (`timeout`, a scheduler, a machine going away) marks the run and
    its unfinished attempts interrupted at once and exits with 143, without waiting for the
    evaluations in flight as Ctrl-C does: what the database holds is whole (a killed run used to stay
    'running' with 'compiled' attempts) and `--resume` finishes the interrupted ones."""
    import signal
    import threading

    from ..store.status import RunStatus

    if threading.current_thread() is not threading.main_thread():
        yield                      # signal handlers belong to the main thread
        return

    def stop(signum, frame):
        rid = run_id()
        try:
            if rid:
                store.finish_run(rid, RunStatus.INTERRUPTED, "stopped by SIGTERM")
                print(f"optimize: stopped by SIGTERM; run {rid[:8]} and its unfinished attempts "
                      "marked interrupted", file=sys.stderr, flush=True)
        finally:
            os._exit(128 + signum)

    before = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def run(args) -> int:
    """The same loop the Prefect flow runs (solforge.orchestrate.setup.build): GPU slots, content
    cache, resume; without Prefect."""
    import uuid
    from dataclasses import fields

    from .. import settings
    from ..orchestrate.setup import OptimizeParams, build
    from .output import emit_json

    console, table = _output()
    check_flags(args)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    logging.basicConfig(level=logging.INFO if getattr(args, "verbose", False) else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if args.dry_run:
        from ..orchestrate.setup import select_problems
        from ..store import Store

        cfg = settings.Settings.load(db_path=getattr(args, "db", None), arch=args.arch,
                                     gpu_profile=args.gpu_profile)
        probs = select_problems(Store(cfg.db_path), args.problems, subset=args.subset, limit=args.limit,
                                with_family=args.with_family, shared_dir=cfg.shared_dir)
        return _dry_run(probs, getattr(args, "json", False))
    if args.match_only:
        return _match_only(args)
    given = {**vars(args), "db": getattr(args, "db", None),
             # a plain run is a new job; --resume continues the job these same parameters started
             "job": "resume" if args.resume else f"cli-{uuid.uuid4().hex[:12]}"}
    params = OptimizeParams(**{f.name: given[f.name] for f in fields(OptimizeParams) if f.name in given})
    con = console()
    loop = build(params, progress=lambda msg: con.print(msg, markup=False, highlight=False))
    lab = loop.lab
    con.print(f"optimize: {len(loop.problems)} problem(s), workers {sorted(loop.workers)}, "
              f"arch {lab.arch}, GPUs {','.join(loop.pool.gpus) or 'none'}, db {loop.store.path}",
              markup=False)
    with stop_on_sigterm(loop.store, lambda: loop.run_id):
        report = loop.run()
    if getattr(args, "json", False):
        emit_json(report.to_json())
    else:
        rows = [(p.problem, p.attempts, p.compiled,
                 ", ".join(f"{k}={v}" for k, v in sorted(p.outcomes.items())),
                 "" if p.best_sol_score is None else f"{p.best_sol_score:.3f}")
                for p in sorted(report.problems.values(), key=lambda p: p.problem)]
        table(f"optimize run {report.run_id[:8]}", ["problem", "attempts", "compiled", "outcomes",
                                                    "best SOL"], rows)
        con.print(f"stop: {report.stop_reason}; spent {report.spent.attempts} attempts, "
                  f"{report.spent.gpu_seconds:.1f} GPU-s, ${report.spent.dollars:.4f}", markup=False)
        for n in report.notes:
            con.print(n, markup=False)
    return 0


def check_flags(args) -> None:
    """Refuse what would only fail later, before anything is written: an unknown roofline profile,
    and GPUs asked for on a machine that has none (every evaluation would be stored as an error)."""
    if args.gpu_profile:
        from ..roofline.hardware import load_profile

        load_profile(args.gpu_profile)  # InputError naming the known profiles
    if args.dry_run:
        return
    if args.gpus is None:
        from ..orchestrate.gpus import visible_gpus

        wanted = visible_gpus()  # none visible: compile-only, as documented
    else:
        wanted = [g for g in args.gpus.split(",") if g.strip()]
    if wanted:
        from .doctor_cmd import require_gpu

        require_gpu(f"optimize on GPU(s) {','.join(wanted)}")


def _match_only(args) -> int:
    """Fill the disk cache with the matching of the selected problems, the way the loop's offline
    worker does it on a GPU box (same Lab arch and roofline profile; compiles need no GPU), so a box
    that unpacks this cache plans from its first second instead of tracing for minutes."""
    from .. import settings
    from ..agents.lab import Lab
    from ..agents.offline import OfflineWorker
    from ..orchestrate.setup import select_problems
    from ..store import Store
    from .output import emit_json

    cfg = settings.Settings.load(db_path=getattr(args, "db", None), arch=args.arch,
                                 gpu_profile=args.gpu_profile)
    store = Store(cfg.db_path)
    probs = select_problems(store, args.problems, subset=args.subset, limit=args.limit,
                            with_family=False, shared_dir=cfg.shared_dir)
    lab = Lab(arch=cfg.arch, gpu_profile=cfg.gpu_profile, has_gpu=False, store=store)
    say = (lambda msg: print(msg, file=sys.stderr, flush=True))
    res = OfflineWorker(lab).warm(probs, jobs=args.match_jobs, progress=say)
    out = {"problems": len(probs), "matched": res.get("matched", 0),
           "unmatched": sorted(res.get("unmatched", [])), "seconds": round(res.get("seconds", 0.0), 1),
           "arch": cfg.arch, "gpu_profile": cfg.gpu_profile, "cache_dir": str(cfg.cache_dir)}
    if getattr(args, "json", False):
        emit_json(out)
    else:
        say(f"matched {out['matched']} of {out['problems']} problem(s) in {out['seconds']} s into "
            f"{out['cache_dir']} (arch {out['arch']}, profile {out['gpu_profile']})"
            + (f"; unmatched: {', '.join(out['unmatched'])}" if out["unmatched"] else ""))
    return 0


def _dry_run(problems, as_json: bool) -> int:
    from ..agents.offline import OfflineWorker
    from .output import emit_json

    rows = [{"problem": p.name, "subset": p.subset, "source": p.source,
             "families": [f.name for f in OfflineWorker.families_for(p)]} for p in problems]
    if as_json:
        emit_json(rows)
    else:
        for r in rows:
            print(f"{r['subset'] or '':18} {r['problem']:60} {','.join(r['families']) or '-':20} "
                  f"{r['source']}")
    return 0


def _output():
    """rich where it is installed; plain text on a bare GPU box without it."""
    try:
        from .output import console, table

        console()
        return console, table
    except ImportError:
        class Plain:
            def print(self, msg, **_):
                print(msg, file=sys.stderr, flush=True)

        def plain_table(title, columns, rows):
            print(title, file=sys.stderr)
            print("\t".join(columns), file=sys.stderr)
            for r in rows:
                print("\t".join("" if v is None else str(v) for v in r), file=sys.stderr)

        return Plain, plain_table


def _rescore(args) -> int:
    from ..agents.rescore import rescore
    from ..store import Store
    from .output import console, emit_json

    counts = rescore(Store(args.db) if args.db else Store(), refresh=args.refresh)
    if args.json:
        emit_json(counts)
    else:
        console().print(f"rescored {counts['workloads']} workload(s) of {counts['attempts']} attempt(s)")
    return 0
