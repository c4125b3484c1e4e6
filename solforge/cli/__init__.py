"""The `solforge` command. Human output (rich) goes to stderr; `--json` puts machine output on stdout.

Each sub-command lives in its own module under solforge/cli/ and exposes `register(subparsers)`;
this file only lists them, so adding a command never touches another's code.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMAND_MODULES = [
    "solforge.cli.problems",  # ingest, problems, show (owner: core/ingest)
    "solforge.cli.store_cmds",  # attempts, sql (owner: store)
    "solforge.cli.sol",  # sol: roofline table per GPU profile (owner: roofline)
    "solforge.cli.compile_cmds",  # compile: compile a candidate to cubins (owner: compile)
    "solforge.cli.evaluate_cmds",  # evaluate, baseline, replay (owner: evaluator)
    "solforge.cli.optimize",  # optimize: planner + workers (owner: agents)
    "solforge.cli.extract",  # extract MODEL (owner: extraction)
    "solforge.cli.report",  # report, export (owner: reports)
    "solforge.cli.coverage",  # coverage: what solforge serves and why not (owner: compiler)
    "solforge.cli.coverage_diff",  # coverage-diff: two coverage runs side by side (owner: compiler)
    "solforge.cli.results_cmds",  # table, best: the results of a store
    "solforge.cli.doctor_cmd",  # doctor: what this machine can do
]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="solforge", description=__doc__.splitlines()[0])
    p.add_argument("--db", help="DuckDB file (default ./solforge.duckdb or $SOLFORGE_DB_PATH)")
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    sub = p.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    for sp in sub.choices.values():  # --db / --json work before or after every sub-command
        common_options(sp)
    return p


def common_options(p: argparse.ArgumentParser) -> None:
    """`--db` and `--json` after a sub-command too. SUPPRESS: unless given there, the global value
    (before the sub-command) stays. A sub-command that defines them itself keeps its own."""
    if "--db" not in p._option_string_actions:
        p.add_argument("--db", default=argparse.SUPPRESS, help="DuckDB file (as the global --db)")
    if "--json" not in p._option_string_actions:
        p.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                       help="machine-readable output on stdout")


# sub-commands that hand every argument after their name to a program of their own
PASS_THROUGH = ("baseline",)


def _command_index(argv: list[str]) -> int | None:
    """Where the sub-command's name is in argv (after the global --db X / --json), else None."""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--db":
            i += 2
        elif a.startswith("--db=") or a == "--json":
            i += 1
        else:
            return i if not a.startswith("-") else None
    return None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    i = _command_index(argv)
    rest = None
    if i is not None and argv[i] in PASS_THROUGH:
        argv, rest = argv[:i + 1], argv[i + 1:]
    args = build_parser().parse_args(argv)
    if rest is not None:
        args.rest = rest
    try:
        rc = args.func(args)
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # noqa: BLE001 - the CLI's last word: one clear line, not a traceback
        from ..errors import SolforgeError

        if isinstance(e, SolforgeError):
            print(f"solforge: error: {e}", file=sys.stderr)
            return 2
        raise
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
