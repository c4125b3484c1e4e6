"""CLI: ingest, problems, show."""

from __future__ import annotations

import re
from collections import Counter

from . import common_options
from .output import console, emit_json, table

_MAX_WARNINGS_SHOWN = 10


# store.report_queries (duckdb) is imported inside the commands, as rich is (escape): building the
# parser needs neither


def escape(text: str) -> str:
    """rich markup escaped; imported here so that building the parser needs no rich (a bare GPU box
    runs `solforge doctor` and `--json evaluate` without it)."""
    from rich.markup import escape as _escape

    return _escape(text)


def register(sub) -> None:
    p = sub.add_parser("ingest", help="load problems (SOL-ExecBench / FlashInfer-Trace / hf://) into the store")
    p.add_argument("paths", nargs="+", metavar="PATH", help="folder, file or hf://nvidia/SOL-ExecBench[/subset]")
    p.add_argument("--all-warnings", action="store_true", help="print every warning, not a summary")
    common_options(p)
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("problems", help="list stored problems")
    p.add_argument("--subset", help="L1, L2, Quant, FlashInfer-Bench, FlashInfer-Trace, ...")
    p.add_argument("--op", help="op_type")
    p.add_argument("--dtype", help="a tensor dtype the problem uses, e.g. bfloat16")
    p.add_argument("--model", help="model tag or hf_id (substring, case-insensitive)")
    p.add_argument("--name", help="name substring")
    p.add_argument("--limit", type=int, default=None)
    common_options(p)
    p.set_defaults(func=cmd_problems)

    p = sub.add_parser("show", help="one problem: definition, axes, workloads, baselines, best attempt")
    p.add_argument("problem", help="name, SUBSET/name, or a unique name prefix")
    p.add_argument("--workloads", type=int, default=10, help="workload rows to print (default 10)")
    common_options(p)
    p.set_defaults(func=cmd_show)


def _store(args):
    from ..store import Store

    return Store(args.db)


# ---- ingest -----------------------------------------------------------------------------------
def cmd_ingest(args) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..problem.sources import ingest_path
    from ..store.problems import upsert_problems

    con = console()
    store = _store(args)
    results = []
    any_error = False
    for path in args.paths:
        with con.status(f"reading {path} ..."):
            report = ingest_path(path)
        outcomes: dict[str, Counter] = {}
        with Progress(TextColumn("storing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=con, transient=True, disable=not report.problems) as bar:
            task = bar.add_task("store", total=len(report.problems))
            def advance(prob, outcome) -> None:
                outcomes.setdefault(prob.subset or "", Counter())[outcome.value] += 1
                bar.advance(task)

            summary = upsert_problems(store, report.problems, progress=advance)
        any_error |= bool(report.errors)
        counts = report.counts_by_subset()
        for subset, c in counts.items():
            c.update({k: outcomes.get(subset, Counter())[k] for k in ("inserted", "updated", "unchanged")})
        results.append({
            "source": str(path),
            "problems": len(report.problems),
            "workloads": sum(len(p.workloads) for p in report.problems),
            "subsets": counts,
            "stored": summary.as_dict(),
            "errors": [{"file": e.file, "line": e.line, "field": e.field, "message": e.message}
                       for e in report.errors],
            "warnings": list(report.warnings),
            "warning_kinds": warning_kinds(report.warnings),
            "seconds": round(report.seconds, 3),
        })
        if not args.json:
            _print_ingest(con, results[-1], args.all_warnings)
    if args.json:
        emit_json(results[0] if len(results) == 1 else results)
    return 1 if any_error else 0


def _print_ingest(con, r: dict, all_warnings: bool) -> None:
    table(f"ingest {r['source']}", ["subset", "problems", "workloads", "inserted", "updated", "unchanged"],
          [[s or "-", c["problems"], c["workloads"], c["inserted"], c["updated"], c["unchanged"]]
           for s, c in r["subsets"].items()])
    con.print(f"{r['problems']} problems, {r['workloads']} workloads "
              f"({r['stored']['inserted']} new, {r['stored']['updated']} updated, "
              f"{r['stored']['unchanged']} unchanged), {len(r['errors'])} errors, "
              f"{len(r['warnings'])} warnings, read in {r['seconds']:.2f} s")
    for e in r["errors"]:
        where = (e["file"] or "<input>") + (f":{e['line']}" if e["line"] else "") + \
            (f" [{e['field']}]" if e["field"] else "")
        con.print(f"[red]error[/red] {escape(where)}: {escape(e['message'])}", highlight=False)
    warnings = r["warnings"]
    if all_warnings:
        for w in warnings:
            con.print(f"[yellow]warning[/yellow] {escape(w)}", highlight=False)
    elif warnings:
        table(f"{len(warnings)} warnings by kind (--all-warnings lists each)", ["count", "kind"],
              [[k["count"], k["kind"]] for k in r["warning_kinds"][:_MAX_WARNINGS_SHOWN]],
              fold=("kind",))
        if len(r["warning_kinds"]) > _MAX_WARNINGS_SHOWN:
            con.print(f"... and {len(r['warning_kinds']) - _MAX_WARNINGS_SHOWN} more kinds")


_WHERE = re.compile(r"^\S+?: ")          # "path/to/file: " (a path has no spaces here)
_HOW_MANY = re.compile(r" \(\d+ workload\(s\), e\.g\. [^)]*\)$")


def warning_kinds(warnings: list[str]) -> list[dict]:
    """Warnings grouped by their text without the file and the example: [{kind, count}]."""
    kinds = Counter(_HOW_MANY.sub("", _WHERE.sub("", w, count=1)) for w in warnings)
    return [{"kind": k, "count": n} for k, n in kinds.most_common()]


# ---- problems ---------------------------------------------------------------------------------
def cmd_problems(args) -> int:
    from ..store import report_queries as rq

    store = _store(args)
    rows = rq.list_problems(store, subset=args.subset, op=args.op, dtype=args.dtype, model=args.model,
                            name=getattr(args, "name", None), limit=args.limit)
    if args.json:
        emit_json(rows)
        return 0
    table(f"{len(rows)} problems", ["name", "subset", "op", "workloads", "dtypes", "models"],
          [[r["name"], r["subset"], r["op_type"], r["n_workloads"], ",".join(r["dtypes"] or []),
            ",".join(r["model_tags"] or [])] for r in rows])
    return 0


# ---- show -------------------------------------------------------------------------------------
def find_problem(store, ref: str) -> dict:
    from ..errors import InputError
    from ..store import report_queries as rq

    row = rq.problem_by_name(store, ref)
    if row is None and "/" in ref:
        subset, name = ref.split("/", 1)
        row = rq.problem_by_name(store, name, subset)
    if row is None:
        matches = rq.problem_names_with_prefix(store, ref)
        if len(matches) == 1:
            row = rq.problem_by_name(store, matches[0])
        elif matches:
            raise InputError(f"{ref!r} matches several problems: " + ", ".join(matches[:5]),
                             field="problem")
    if row is None:
        raise InputError(f"no problem {ref!r} in {store.path} (try `solforge problems`)",
                         field="problem")
    return row


def problem_details(store, row: dict) -> dict:
    from ..agents import history
    from ..store import report_queries as rq

    name = row["name"]
    d = row["definition"] or {}
    workloads = rq.workload_notes(store, name)
    tolerances = Counter(_tol_key(w["tolerance"]) for w in workloads)
    baselines = rq.baseline_summary(store, name)
    roofline = rq.roofline_summary(store, name)
    best = rq.best_scored_attempt(store, name)
    attempts = rq.attempt_status_counts(store, name)
    return {
        "name": name, "subset": row["subset"], "op_type": row["op_type"],
        "description": d.get("description"), "hf_id": d.get("hf_id"), "tags": row["tags"],
        "model_tags": row["model_tags"], "dtypes": row["dtypes"], "source": row["source"],
        "content_hash": row["content_hash"], "ingested_at": row["ingested_at"],
        "updated_at": row["updated_at"],
        "axes": {k: _axis_text(a) for k, a in (d.get("axes") or {}).items()},
        "inputs": {k: _tensor_text(t) for k, t in (d.get("inputs") or {}).items()},
        "outputs": {k: _tensor_text(t) for k, t in (d.get("outputs") or {}).items()},
        "constraints": d.get("constraints") or [],
        "custom_inputs_entrypoint": d.get("custom_inputs_entrypoint"),
        "n_workloads": len(workloads),
        "workloads": workloads,
        "tolerances": [{"tolerance": dict(k), "workloads": n} for k, n in tolerances.most_common()],
        "warnings": row["warnings"] or [],
        "baselines": baselines, "roofline": roofline,
        "best_attempt": best[0] if best else None,
        "best_kernel_ms": history.attempt_kernel_ms(store, best[0]["id"]) if best else {},
        "attempts": {a["status"]: a["n"] for a in attempts},
    }


def _tol_key(t) -> tuple:
    return tuple(sorted((k, v) for k, v in (t or {}).items() if not isinstance(v, (dict, list))))


def _axis_text(a: dict) -> str:
    if a.get("type") == "const":
        return f"const {a.get('value')}"
    if a.get("type") == "expr":
        return f"expr {a.get('expression')}"
    return "var"


def _tensor_text(t: dict) -> str:
    shape = t.get("shape")
    return f"{t.get('dtype')} " + ("scalar" if shape is None else "[" + ", ".join(map(str, shape)) + "]")


def cmd_show(args) -> int:
    store = _store(args)
    info = problem_details(store, find_problem(store, args.problem))
    if args.json:
        emit_json(info)
        return 0
    con = console()
    con.print(f"[bold]{escape(info['name'])}[/bold]  "
              + escape(f"subset={info['subset']}  op={info['op_type']}  hf_id={info['hf_id']}"),
              highlight=False)
    if info["description"]:
        con.print(info["description"], highlight=False, markup=False)
    con.print(f"tags: {', '.join(info['tags'] or [])}", highlight=False, markup=False)
    con.print(f"source: {info['source']}  (hash {info['content_hash'][:12]}, "
              f"ingested {info['ingested_at']})", highlight=False, markup=False)
    table("axes", ["axis", "kind"], info["axes"].items())
    table("tensors", ["name", "role", "dtype / shape"],
          [[k, "input", v] for k, v in info["inputs"].items()]
          + [[k, "output", v] for k, v in info["outputs"].items()])
    if info["constraints"]:
        con.print("constraints: " + "; ".join(info["constraints"]), highlight=False,
                  markup=False)
    var = [k for k, v in info["axes"].items() if v == "var"]
    shown = info["workloads"][: max(args.workloads, 0)]
    table(f"workloads ({len(shown)} of {info['n_workloads']})", ["#", "uuid", *var, "B200 sol_ms",
                                                                 "B200 baseline_ms"],
          [[w["workload_index"], w["uuid"], *[w["axes"].get(k) for k in var],
            (w["published"] or {}).get("sol_ms"), (w["published"] or {}).get("baseline_latency_ms")]
           for w in shown])
    table("tolerance", ["tolerance", "workloads"],
          [[", ".join(f"{k}={v}" for k, v in t["tolerance"].items()), t["workloads"]]
           for t in info["tolerances"]])
    if info["baselines"]:
        table("baselines (latest per workload)", ["variant", "label", "hardware", "workloads",
                                                  "median of median_ms", "GPU busy"],
              [[b["variant"], b["label"], b["hardware_id"], b["workloads"], _num(b["median_ms"]),
                "-" if b.get("busy_share") is None else f"{b['busy_share']:.0%}"]
               for b in info["baselines"]])
    if info["roofline"]:
        table("roofline", ["gpu", "workloads", "min T_sol ms", "median T_sol ms", "max T_sol ms",
                           "limiter"],
              [[r["gpu_profile"], r["workloads"], _num(r["min_t_sol_ms"]), _num(r["median_t_sol_ms"]),
                _num(r["max_t_sol_ms"]), r["limiter"]] for r in info["roofline"]])
    if info["attempts"]:
        con.print("attempts: " + ", ".join(f"{k}={v}" for k, v in info["attempts"].items()),
                  highlight=False, markup=False)
    b = info["best_attempt"]
    if b:
        con.print(f"best attempt {b['id']} ({b['agent']}, {b['language']}): mean SOL score "
                  f"{_num(b['mean_sol_score'])}, mean speedup {_num(b['mean_speedup'])} over "
                  f"{b['workloads']} workloads", highlight=False, markup=False)
        ms = info["best_kernel_ms"]
        if ms:
            total = sum(ms.values()) or 1.0
            con.print("  its time per call by kernel (mean over workloads): " + ", ".join(
                f"{k} {v:.4g} ms ({100 * v / total:.0f}%)" for k, v in list(ms.items())[:6])
                + (f", {len(ms) - 6} more" if len(ms) > 6 else ""), highlight=False, markup=False)
    if info["warnings"]:
        con.print(f"{len(info['warnings'])} warnings, e.g. {info['warnings'][0]}",
                  highlight=False, markup=False)
    return 0


def _num(v) -> str:
    return "" if v is None else f"{v:.4g}"
