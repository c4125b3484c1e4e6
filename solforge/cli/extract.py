"""CLI: `solforge extract MODEL|--all` (owner: extraction).

Writes SOL-ExecBench problems for zoo models into data/problems/ (deduplicated across models);
`--check` also verifies every extracted reference against its nn.Module on small CPU shapes.
"""

from __future__ import annotations

from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("extract", help="extract kernel problems from model-zoo configs")
    p.add_argument("model", nargs="*", help="zoo model name(s) or config .json path(s)")
    p.add_argument("--all", action="store_true", help="every model in the zoo (removes stale problems)")
    p.add_argument("--zoo", type=Path, default=None, help="zoo directory (default data/models)")
    p.add_argument("--out", type=Path, default=None, help="output directory (default data/problems)")
    p.add_argument("--check", action="store_true", help="check references against the modules")
    p.add_argument("--list", action="store_true", help="list the zoo and exit")
    p.set_defaults(func=_run)


def _run(args) -> int:
    from ..errors import InputError
    from ..extract import default_zoo_dir, extract_all, load_model_config, load_zoo
    from .output import console, emit_json, table

    zoo = args.zoo or default_zoo_dir()
    out = args.out or zoo.parent / "problems"
    if args.list:
        rows = [(c.name, c.arch.value, c.display_name, c.source.hf_repo) for c in load_zoo(zoo)]
        if args.json:
            emit_json([dict(zip(("name", "arch", "display_name", "hf_repo"), r)) for r in rows])
        else:
            table("model zoo", ["name", "arch", "model", "source"], rows)
        return 0
    if not args.all and not args.model:
        raise InputError("name a model (see --list) or pass --all", field="model")
    only = None if args.all else [load_model_config(m, zoo).name for m in args.model]
    rep = extract_all(zoo, out, check=args.check, only=only)
    if args.json:
        emit_json(rep.to_dict())
    else:
        c = console()
        c.print(f"extracted {rep.extracted} problems from {len(rep.models)} model(s) -> "
                f"{rep.problems_written} written ({rep.shared} shared), {rep.removed_stale} stale removed, "
                f"{rep.seconds:.1f}s, into {out}")
        for line in rep.errors + rep.checks_failed:
            c.print(f"[red]{line}[/red]")
    return 1 if rep.errors or rep.checks_failed else 0
