"""CLI: table (the results table over every problem of a store), best (save best kernels)."""

from __future__ import annotations

from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("table", help="the results table: every problem of the store, its best speedup "
                                     "vs T_b and SOL score, and the summary by subset",
                       description="One row per problem of the store (unserved ones count as 1.0x and "
                       "SOL score 0.5), then per subset and overall: geomean speedup, share faster "
                       "than T_b, share over 2x, mean and median SOL score.")
    p.add_argument("--subset", help="only this subset")
    p.add_argument("--dataset", type=Path, metavar="DIR",
                   help="only the problems of this folder (definition.json files under it)")
    p.add_argument("--markdown", action="store_true", help="GitHub markdown on stdout (for the README)")
    p.add_argument("--summary-only", action="store_true", help="leave out the per-problem rows")
    p.set_defaults(func=cmd_table)

    b = sub.add_parser("best", help="save each problem's best correct kernel to "
                                    "kernels_cuda/<family>/best/<problem>.json (when it beats the saved one)",
                       description="Dry run unless --write: one line per problem says new / replaced / "
                       "refreshed / kept / skipped. The store (--db, .duckdb or .duckdb.gz) is read from "
                       "a temporary copy.")
    b.add_argument("--write", action="store_true", help="write new/replaced files (default: dry run)")
    b.add_argument("--by", choices=("leaderboard", "speedup"), default="leaderboard",
                   help="best attempt: the results table's rule (default) or highest geomean speedup")
    b.add_argument("--problem", action="append", help="only these problems (repeatable)")
    b.add_argument("--root", type=Path, default=None, help="where kernels_cuda/ and kernels_cute/ are "
                                                          "(default: this checkout)")
    b.set_defaults(func=cmd_best)


def cmd_table(args) -> int:
    from ..errors import InputError
    from ..results.table import (PROBLEM_COLUMNS, SUMMARY_COLUMNS_SHORT, build, dataset_names, markdown,
                                 problem_cells, summary_cells)
    from ..store import Store
    from .output import console, emit_json, table

    only = None
    if args.dataset:
        if not args.dataset.is_dir():
            raise InputError("not a folder", file=args.dataset)
        only = dataset_names(args.dataset)
    t = build(Store(args.db), subset=args.subset, dataset=only)
    if not t.rows:
        raise InputError(f"no problems in {t.db} (run `solforge ingest` first)"
                         + (" for that subset/dataset" if args.subset or args.dataset else ""))
    if args.json:
        emit_json(t.to_json())
    elif args.markdown:
        print(markdown(t, with_problems=not args.summary_only), end="")
    else:
        if not args.summary_only:
            table(f"{len(t.rows)} problems ({t.db})", PROBLEM_COLUMNS, [problem_cells(r) for r in t.rows])
        table("summary (unserved = 1.00x, SOL 0.5; geomean speedup vs T_b, share faster, share over "
              "2x)", SUMMARY_COLUMNS_SHORT, [summary_cells(s) for s in t.summaries], fold=())
        if not any(s.served for s in t.summaries):
            console().print("nothing scored yet: every problem counts as the baseline",
                            markup=False, highlight=False)
    return 0


def cmd_best(args) -> int:
    from ..results.best import main

    argv = ["--by", args.by] + (["--db", args.db] if args.db else []) + (["--write"] if args.write else [])
    argv += [x for p in args.problem or [] for x in ("--problem", p)]
    argv += ["--root", str(args.root)] if args.root else []
    return main(argv)
