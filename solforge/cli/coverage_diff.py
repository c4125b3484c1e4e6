"""CLI: coverage-diff OLD NEW: two `solforge coverage --jsonl` runs side by side (owner: compiler).

What a change to the compiler did over a whole problem set: the problems the compiler serves in one
run and not the other, the plans with fewer or more variants (each variant renders its kernels and
templates anew), and, where both runs recorded them, the first plan's matmul lowering. Only
problems present in both runs are compared; each run's rows are keyed by (subset, name), the last
row of a problem winning (a rerun appended to the same file).
"""

from __future__ import annotations

import json
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("coverage-diff", help="two coverage runs side by side",
                       description=__doc__.splitlines()[0].split(": ", 1)[1])
    p.add_argument("old", help="a `solforge coverage --jsonl` file")
    p.add_argument("new", nargs="+", help="the run to compare (several files: one run's parts)")
    p.set_defaults(func=run)


def _rows(paths) -> dict:
    rows: dict = {}
    for path in paths:
        for line in Path(path).read_text().splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if isinstance(r, dict) and "problem" in r:
                rows[(r.get("subset") or "", r["problem"])] = r
    return rows


def _variants(r: dict) -> int:
    return int((r.get("segments") or {}).get("variants", 1)) if r.get("compiler") else 0


def compare(old: dict, new: dict) -> dict:
    both = sorted(set(old) & set(new))
    served = ({k for k in both if old[k].get("compiler")}, {k for k in both if new[k].get("compiler")})
    kept = sorted(served[0] & served[1])
    fewer = [k for k in kept if _variants(new[k]) < _variants(old[k])]
    more = [k for k in kept if _variants(new[k]) > _variants(old[k])]
    name = lambda k: f"{k[0]}/{k[1]}" if k[0] else k[1]  # noqa: E731
    out = {
        "problems": len(both),
        "served": [len(served[0]), len(served[1])],
        "gained": [name(k) for k in sorted(served[1] - served[0])],
        "lost": [name(k) for k in sorted(served[0] - served[1])],
        "with_variants": [sum(_variants(old[k]) > 1 for k in served[0]),
                          sum(_variants(new[k]) > 1 for k in served[1])],
        "fewer_variants": len(fewer),
        "no_variant_left": sum(_variants(new[k]) <= 1 for k in fewer),
        "more_variants": [name(k) for k in more],
    }
    firsts = [(old[k].get("gemm_first"), new[k].get("gemm_first")) for k in kept]
    recorded = [(a, b) for a, b in firsts if a and b]
    if recorded:
        out["gemm_template_first"] = [sum(a == "template" for a, _ in recorded),
                                      sum(b == "template" for _, b in recorded), len(recorded)]
    return out


def run(args) -> int:
    from .output import console, emit_json

    d = compare(_rows([args.old]), _rows(args.new))
    if getattr(args, "json", False):
        emit_json(d)
        return 0
    con = console()
    con.print(f"{d['problems']} problems in both runs")
    con.print(f"served by the compiler: {d['served'][0]} -> {d['served'][1]}"
              f"{'; gained ' + ', '.join(d['gained']) if d['gained'] else ''}"
              f"{'; lost ' + ', '.join(d['lost']) if d['lost'] else ''}")
    con.print(f"plans with variants: {d['with_variants'][0]} -> {d['with_variants'][1]}; "
              f"{d['fewer_variants']} with fewer ({d['no_variant_left']} with none left), "
              f"{len(d['more_variants'])} with more"
              + (f" ({', '.join(d['more_variants'])})" if d["more_variants"] else ""))
    if "gemm_template_first" in d:
        a, b, n = d["gemm_template_first"]
        con.print(f"first plan on the GEMM template: {a} -> {b} of the {n} both runs recorded")
    return 0
