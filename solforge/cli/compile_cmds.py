"""CLI: compile: compile a candidate to cubins (owner: compile)."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("compile", help="compile a candidate (JSON, solforge/candidate.py format) to cubins",
                       description="Compile a candidate's sources with NVRTC (CUDA C++) or the CuTe DSL "
                       "to cubins for one arch; cached on disk. Exit code 1 if the compile fails.")
    p.add_argument("candidate", help="candidate JSON file (or a saved best/ result that holds one)")
    p.add_argument("--arch", default=None, help="target, e.g. sm_90a (H200) or sm_100a (B200); "
                   "default: settings.arch")
    p.add_argument("--out", default=None, help="stage candidate.json, manifest.json and cubins here "
                   "(what the GPU box's launcher loads)")
    p.add_argument("--no-cache", action="store_true", help="compile even if the cache has it")
    p.add_argument("--timeout", type=float, default=None, help="seconds before the compiler is killed")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..compile.api import compile_candidate, stage
    from .candidate_file import load_candidate
    from .output import console, emit_json

    cand = load_candidate(args.candidate)
    res = compile_candidate(cand, args.arch, use_cache=not args.no_cache, timeout_s=args.timeout)
    if args.out and res.ok:
        stage(cand, res, args.out)
    if args.json:
        emit_json(res.json_summary())
    else:
        c = console()
        c.print(f"[bold]{res.status.value}[/bold] {res.arch} {res.compiler} "
                f"{res.seconds * 1000:.1f} ms{' (cache hit)' if res.cache_hit else ''}")
        for unit, blob in res.cubins.items():
            c.print(f"  {unit}: {len(blob)} bytes")
        if res.log.strip():
            c.print(res.log, markup=False, highlight=False)
        if args.out and res.ok:
            c.print(f"staged in {args.out}")
    return 0 if res.ok else 1
