"""CLI: evaluate, baseline, replay (owner: evaluator)."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("evaluate", help="compile a candidate and evaluate it on this machine's GPU "
                                        "(spawned, isolated process)")
    p.add_argument("problem", help="problem folder (definition.json, workload.jsonl), or a stored "
                                   "problem's name or SUBSET/name")
    p.add_argument("candidate", type=Path, help="candidate JSON (solforge/candidate.py format, or a "
                                                "saved best/ result)")
    p.add_argument("--workloads", help="comma-separated workload uuids (default: all)")
    p.add_argument("--timeout", type=float, help="wall-clock limit in seconds (default settings)")
    p.add_argument("--workload-timeout", type=float, default=None)
    p.add_argument("--no-timing", action="store_true", help="correctness only")
    p.add_argument("--t-sol", type=Path, help="JSON {workload uuid: T_sol ms} for the SOL floor guard")
    p.add_argument("--record", action="store_true", help="store the attempt and its results (--db)")
    p.set_defaults(func=_evaluate)

    b = sub.add_parser("baseline", help="T_b for every workload: eager and torch.compile references, "
                                        "timed on every GPU within a deadline",
                       description="The baselines scheduler (solforge/baselines/scheduler.py); every "
                       "argument after `baseline` is its own: `solforge baseline --help-scheduler` lists "
                       "them (--dataset, --out, --deadline-s, --gpus, --device cpu for a dry run).",
                       add_help=False)
    b.set_defaults(func=_baseline, rest=[])  # rest: every argument after `baseline` (solforge.cli.main)

    r = sub.add_parser("replay", help="re-run a stored attempt on this GPU and compare")
    r.add_argument("attempt", help="attempt id or a unique prefix of one")
    r.add_argument("--record", action="store_true", help="store the re-run as a child attempt")
    r.add_argument("--timeout", type=float, default=None)
    r.set_defaults(func=_replay)


def _evaluate(args) -> int:
    from ..evaluate.api import evaluate_candidate
    from .candidate_file import load_candidate
    from .doctor_cmd import require_gpu

    require_gpu("evaluate")

    cand = load_candidate(args.candidate).model_dump(mode="json")
    problem = _problem(args)
    t_sol = json.loads(args.t_sol.read_text()) if args.t_sol else None
    wl = args.workloads.split(",") if args.workloads else None
    report, cr = evaluate_candidate(problem, cand, workloads=wl, t_sol_ms=t_sol,
                                    timeout_s=args.timeout, workload_timeout_s=args.workload_timeout,
                                    timing=not args.no_timing)
    if args.record:  # the store (duckdb) only here: a bare GPU box evaluates without it
        from ..orchestrate.attempts import open_attempt
        from ..orchestrate.replay import record
        from ..store import Store

        s = Store(args.db)
        aid = open_attempt(s, problem.name, cand, run_id=None, agent="cli")
        record(s, aid, report, cr)
        print(f"attempt {aid}", file=sys.stderr)
    _show(args, report.to_json(), [(r.workload_uuid[:12], r.status.value, r.median_ms,
                                    _slowest_kernel(r), r.max_abs_err, r.message[:80])
                                   for r in report.results],
          ["workload", "status", "median_ms", "slowest kernel", "max_abs_err", "message"],
          f"evaluate {problem.name}")
    return 0 if report.all_passed else 1


def _slowest_kernel(r) -> str:
    """The kernel of most time within a call and its share of the kernels' time ("" untimed)."""
    ms = r.extra.get("kernel_ms") or {}
    if not ms:
        return ""
    name, t = max(ms.items(), key=lambda kv: kv[1])
    return f"{name[:40]} {100 * t / (sum(ms.values()) or 1):.0f}%"


def _problem(args):
    """A problem folder as given, else the stored problem of that name (name or SUBSET/name)."""
    path = Path(args.problem)
    if path.is_dir():
        from ..problem import load_problem_dir

        return load_problem_dir(path)
    from ..roofline.table import problems_from_store
    from ..store import Store
    from .problems import find_problem

    store = Store(args.db)
    row = find_problem(store, args.problem)
    return problems_from_store(store, [row["name"]])[0]


def _baseline(args) -> int:
    from ..baselines.scheduler import main

    rest = ["--help" if a in ("--help-scheduler", "-h", "--help") else a for a in args.rest]
    dry = "--device" in rest and rest[rest.index("--device") + 1:][:1] == ["cpu"]
    # --plan-only prints, --merge-rows and --to-duckdb move rows measured elsewhere: no GPU needed
    offline = {"--help", "--plan-only", "--merge-rows", "--to-duckdb"}
    if not dry and not offline & set(rest):
        from .doctor_cmd import require_gpu

        require_gpu("baseline")
    return main(rest)


def _replay(args) -> int:
    from ..orchestrate.replay import replay
    from ..store import Store
    from .doctor_cmd import require_gpu

    require_gpu("replay")
    store = Store(args.db)
    attempt = resolve_attempt(store, args.attempt)
    out = replay(store, attempt, record_new=args.record, timeout_s=args.timeout)
    _show(args, out, [(r["workload"][:12], r["stored_status"], r["new_status"], r["stored_ms"],
                       r["new_ms"], r["ratio"]) for r in out["rows"]],
          ["workload", "stored", "now", "stored_ms", "now_ms", "ratio"], f"replay {args.attempt}")
    return 0 if all(r["same_status"] for r in out["rows"]) else 1


def resolve_attempt(store, ref: str) -> str:
    """An attempt id from an id or a unique prefix; one InputError line otherwise."""
    from ..errors import InputError
    from ..store.results import attempt_ids_with_prefix

    ids = attempt_ids_with_prefix(store, ref)
    if not ids:
        raise InputError(f"no attempt {ref!r} in {store.path} (`solforge attempts` lists them)",
                         field="attempt")
    if len(ids) > 1:
        raise InputError(f"attempt prefix {ref!r} is ambiguous: {', '.join(i[:12] for i in ids)}",
                         field="attempt")
    return ids[0]


def _show(args, obj, rows, cols, title) -> None:
    from .output import emit_json, table

    if getattr(args, "json", False):
        emit_json(obj)
    else:
        table(title, cols, rows)
