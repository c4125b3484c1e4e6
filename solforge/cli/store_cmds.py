"""CLI: attempts, sql."""

from __future__ import annotations

from .output import console, emit_json


def table(title: str, columns, rows, fold=None) -> None:
    """output.table (kept here for the modules that import it from this one)."""
    from .output import FOLD
    from .output import table as _table

    _table(title, columns, rows, fold=FOLD if fold is None else fold)


def common_options(p) -> None:
    """`--db` and `--json` also after the sub-command (see solforge.cli.common_options)."""
    from . import common_options as _common

    _common(p)


def register(sub) -> None:
    p = sub.add_parser("attempts", help="list attempts (newest first)")
    p.add_argument("--problem", help="problem NAME or SUBSET/NAME (exact), or a pattern with %%")
    p.add_argument("--status", help="queued | compiled | evaluated | failed | interrupted")
    p.add_argument("--run", help="run id")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--interrupt-run", metavar="RUN",
                   help="first mark RUN's queued/compiled attempts interrupted (a run that died)")
    common_options(p)
    p.set_defaults(func=cmd_attempts)

    p = sub.add_parser("sql", help="run SQL on the store and print the rows")
    p.add_argument("query", help='e.g. "SELECT subset, count(*) FROM problems GROUP BY 1"')
    p.add_argument("--limit", type=int, default=200, help="rows to print (default 200; JSON gets all)")
    common_options(p)
    p.set_defaults(func=cmd_sql)


def _store(args):
    from ..store import Store

    return Store(args.db)


def cmd_attempts(args) -> int:
    from ..errors import InputError
    from ..store import AttemptStatus
    from ..store.report_queries import list_attempts

    store = _store(args)
    if args.interrupt_run:
        n = store.mark_interrupted(args.interrupt_run)
        console().print(f"run {args.interrupt_run}: {n} attempts marked interrupted",
                        highlight=False, markup=False)
    status = None
    problem = args.problem
    if problem and "/" in problem and "%" not in problem:  # SUBSET/NAME, as every command names problems
        from .problems import find_problem

        problem = find_problem(store, problem)["name"]
    if args.status:
        try:
            status = AttemptStatus(args.status.lower()).value
        except ValueError:
            raise InputError(f"unknown status {args.status!r} (one of "
                             f"{', '.join(s.value for s in AttemptStatus)})", field="--status") from None
    rows = list_attempts(store, problem=problem, status=status, run=args.run, limit=args.limit)
    if args.json:
        emit_json(rows)
        return 0
    table(f"{len(rows)} attempts", ["id", "run", "problem", "agent", "lang", "status", "created",
                                    "error"],
          [[r["id"][:12], (r["run_id"] or "")[:12], r["problem"], r["agent"], r["language"],
            r["status"], str(r["created_at"])[:19], _short(r["error"])] for r in rows])
    return 0


def cmd_sql(args) -> int:
    from ..store.report_queries import user_query

    rows = user_query(_store(args), args.query)
    if args.json:
        emit_json(rows)
        return 0
    if not rows:
        console().print("(no rows)")
        return 0
    cols = list(rows[0])
    shown = rows[: args.limit]
    table(f"{len(rows)} rows" + (f" (first {len(shown)})" if len(shown) < len(rows) else ""), cols,
          [[_short(r[c], 80) for c in cols] for r in shown])
    return 0


def _short(v, n: int = 60):
    if v is None:
        return None
    s = v if isinstance(v, str) else str(v)
    s = s.replace("\n", " ")
    return s if len(s) <= n else s[: n - 1] + "…"
