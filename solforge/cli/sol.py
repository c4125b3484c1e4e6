"""CLI: sol: speed-of-light roofline per workload on a GPU profile (owner: roofline)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from .output import console, emit_json, table


def register(sub) -> None:
    p = sub.add_parser("sol", help="speed-of-light time (roofline) of every workload on a GPU profile")
    p.add_argument("--gpu", default=None, help="profile: h200 | h100 | b200 or a YAML path "
                                                 "(default $SOLFORGE_GPU_PROFILE or h200)")
    p.add_argument("--problem", action="append", help="name, SUBSET/name or a substring (repeatable)")
    p.add_argument("--root", help="problem folder (default: the store's problems, as every command; "
                                  "<shared>/sol_execbench when the store has none)")
    p.add_argument("--csv", help="write one row per workload to this CSV file")
    p.add_argument("--measured", action="store_true",
                   help="price on the measured ceilings where the profile has them")
    p.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--no-cache", action="store_true", help="recount even if counts are cached")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds per problem for its reference to run in the sandbox (default "
                        "$SOLFORGE_REFERENCE_TIMEOUT_S or 900)")
    p.add_argument("--store", action="store_true", help="write rows to the store's roofline table "
                                                        "(implied by --db)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help=f"the per-problem table even for more than {_TABLE_MAX} problems")
    p.set_defaults(func=cmd_sol)


# how sandboxed.py and the sandbox word a reference that hung, crashed or was refused
_SANDBOX_REASON = "reference run refused or failed"
_REFUSAL = "solforge sandbox:"
_TABLE_MAX = 20  # above this many problems the table is a log flood: a summary line unless --verbose


def _select(items, wanted):
    """Problems named by `name`, `SUBSET/name` (the convention of every command) or a substring."""
    if not wanted:
        return items
    out = []
    for it in items:
        if isinstance(it, Path):
            name, subset = it.name, it.parent.name
        else:
            name, subset = it.name, getattr(it, "subset", None) or ""
        key = f"{subset}/{name}"
        if any(w == name or w in name or w.lower() == key.lower() for w in wanted):
            out.append(it)
    return out


def cmd_sol(args) -> int:
    from ..errors import InputError
    from ..roofline.batch import count_many, problem_dirs
    from ..roofline.hardware import load_profile
    from ..roofline.table import (price, problem_t_sol, problems_from_store, rows_for_csv, store_rows,
                                  write_csv)
    from ..settings import get
    from ..store.report_queries import count_problems

    st = get()
    profile = load_profile(args.gpu or st.gpu_profile)
    con = console()
    store = None
    from ..store.store import default_path

    if args.db or args.store or default_path().exists():
        from ..store import Store

        store = Store(args.db)
    items: list = []
    if args.root:
        items = problem_dirs(Path(args.root))
    elif store is not None and count_problems(store):
        items = problems_from_store(store)
    else:
        items = problem_dirs(Path(st.shared_dir) / "sol_execbench")
    items = _select(items, args.problem)
    if not items:
        raise InputError("no problems matched", field="--problem" if args.problem else "--root")
    cache = None if args.no_cache else Path(st.cache_dir)
    t0, c0, load0 = time.perf_counter(), os.times(), os.getloadavg()[0]
    with con.status(f"counting {len(items)} problem(s) ..."):
        counted = count_many(items, cache, jobs=args.jobs, timeout_s=args.timeout)
    elapsed, c1 = time.perf_counter() - t0, os.times()
    # CPU seconds of this process and its (reaped) worker processes: the box is shared, so wall time
    # alone says little; the load average says how shared
    cpu = (c1.user - c0.user) + (c1.system - c0.system) + (c1.children_user - c0.children_user) + \
        (c1.children_system - c0.children_system)
    load = max(load0, os.getloadavg()[0])
    csv_rows, db_rows, summary = [], [], []
    n_fail = 0
    methods: dict[str, int] = {}  # trace | fit | analytic workloads (how each count was obtained)
    refused: list[str] = []  # one line per problem that could not be loaded or whose reference failed
    for pc in counted:
        if pc.error:
            refused.append(f"{pc.name}: {pc.error}")
        elif pc.counts and all(_SANDBOX_REASON in c.reason or _REFUSAL in c.reason for c in pc.counts):
            refused.append(f"{pc.name}: {pc.counts[0].reason}")
        rls = price(pc, profile, args.measured)
        csv_rows += rows_for_csv(pc, rls)
        db_rows += store_rows(pc, rls)
        bad = [r for r in rls if r.t_sol_ms is None]
        for c in pc.counts:
            methods[c.method] = methods.get(c.method, 0) + 1
        n_fail += len(bad)
        limiters = sorted({r.limiter for r in rls if r.limiter})
        summary.append({"problem": pc.name, "workloads": len(rls), "unsupported": len(bad),
                        "t_sol_ms_geomean": problem_t_sol(rls), "limiters": limiters,
                        "reason": pc.error or (bad[0].reason if bad else "")})
    if args.csv:
        write_csv(Path(args.csv), csv_rows)
    if store is not None and (args.db or args.store):
        store.upsert_rows("roofline", db_rows, key=("problem", "workload_uuid", "gpu_profile"))
    if args.json:
        emit_json({"gpu": profile.name, "refused": refused, "seconds": elapsed, "cpu_seconds": cpu, "load_average": load,
                   "methods": methods, "problems": summary,
                   "workloads": csv_rows if len(items) <= 5 else None})
    elif len(summary) > _TABLE_MAX and not args.verbose:
        con.print(f"speed of light on {profile.display_name}: {len(summary)} problems, "
                  f"{len(csv_rows)} workloads, {n_fail} unsupported, {elapsed:.1f} s"
                  + (f"; stored in {store.path}" if store is not None and (args.db or args.store)
                     else "") + " (--verbose: the table; --json: every row)",
                  markup=False, highlight=False)
    else:
        table(f"speed of light on {profile.display_name} ({len(csv_rows)} workloads, "
              f"{n_fail} unsupported, {elapsed:.1f} s wall, {cpu:.1f} s CPU, load {load:.1f}; "
              + ", ".join(f"{k} {v}" for k, v in sorted(methods.items())) + ")",
              ["problem", "workloads", "T_sol geomean (ms)", "limiter", "note"],
              [(s["problem"], s["workloads"],
                f"{s['t_sol_ms_geomean']:.5g}" if s["t_sol_ms_geomean"] else "-",
                ",".join(s["limiters"]), s["reason"][:60]) for s in summary])
        if args.csv:
            con.print(f"wrote {args.csv}")
    for line in refused:
        con.print(line, markup=False, highlight=False, soft_wrap=True)
    return 0
