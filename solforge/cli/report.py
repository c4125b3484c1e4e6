"""CLI: report, export (owner: reports)."""

from __future__ import annotations

from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("report", help="summary tables (terminal) and a self-contained HTML report",
                       description="Leaderboard, per-subset summary (share beating the baseline, over "
                       "2x, geomean speedup, median SOL score), failures and LLM spend; --html writes "
                       "one self-contained file with inline SVG plots.")
    p.add_argument("--html", metavar="FILE", help="write the HTML report here")
    p.add_argument("--run", metavar="RUN", help="only this run's attempts")
    p.add_argument("--source-label", metavar="TEXT",
                   help="where the data comes from, printed at the top of the HTML report")
    p.add_argument("--title", default="solforge report")
    p.add_argument("--top", type=int, default=30, help="leaderboard rows shown in the terminal")
    p.set_defaults(func=cmd_report)

    e = sub.add_parser("export", help="write an attempt as a SOL-ExecBench solution or a torch op",
                       description="Export ATTEMPT (an attempt id or unique prefix; 'best:PROBLEM' for "
                       "the best correct attempt of a problem, named as NAME or SUBSET/NAME).")
    e.add_argument("attempt", metavar="ATTEMPT")
    e.add_argument("--solution", metavar="DIR", help="write solution.json (+ its sources) here")
    e.add_argument("--torch-op", metavar="DIR", help="write a torch.library custom-op package here")
    e.add_argument("--name", help="solution / package name (default from problem and attempt)")
    e.add_argument("--author", default="solforge")
    e.add_argument("--arch", default=None, help="target arch of the cubins (default settings.arch)")
    e.set_defaults(func=cmd_export)


def _store(args):
    from ..store import Store

    return Store(args.db) if args.db else Store()


def cmd_report(args) -> int:
    from ..report import analysis, html, terminal
    from .output import emit_json

    d = analysis.load(_store(args), run=args.run)
    if args.html:
        out = Path(args.html)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(html.render(d, source_label=args.source_label, title=args.title),
                       encoding="utf-8")
    if args.json:
        emit_json({"subsets": d.subsets.to_dicts() if d.subsets is not None else [],
                   "problems": d.problems.to_dicts() if d.problems is not None else [],
                   "failures": d.failures.to_dicts() if d.failures is not None else [],
                   "html": args.html})
    else:
        terminal.show(d, top=args.top)
        if args.html:
            from .output import console

            console().print(f"HTML report: {args.html}")
    return 0


def cmd_export(args) -> int:
    from ..errors import SolforgeError
    from ..export import load_attempt
    from .output import console, emit_json

    if not args.solution and not args.torch_op:
        raise SolforgeError("export: give --solution DIR and/or --torch-op DIR")
    store = _store(args)
    ref = args.attempt
    if ref.startswith("best:"):  # best:NAME or best:SUBSET/NAME, as every command names problems
        from .problems import find_problem

        ref = "best:" + find_problem(store, ref[len("best:"):])["name"]
    att = load_attempt(store, ref)
    written = {}
    if args.solution:
        from ..export.solution import write_solution

        written["solution"] = str(write_solution(att, Path(args.solution), name=args.name,
                                                 author=args.author, arch=args.arch))
    if args.torch_op:
        from ..export.torch_op import write_torch_op

        written["torch_op"] = str(write_torch_op(att, Path(args.torch_op), name=args.name,
                                                 arch=args.arch))
    if args.json:
        emit_json({"attempt": att.attempt_id, "problem": att.problem.name, **written})
    else:
        for k, v in written.items():
            console().print(f"{k}: {v}")
    return 0
