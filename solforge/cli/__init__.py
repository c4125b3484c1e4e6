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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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
