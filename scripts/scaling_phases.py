#!/usr/bin/env python3
"""Why an evaluation takes longer with two GPUs busy than with one: the same candidates compared
between the 1-GPU and the 2-GPU optimize run of scripts/scaling_run_h200x2.sh, from their DuckDB files.

    .venv/bin/python scripts/scaling_phases.py [--one DB] [--two DB] [--out MD]

Matched pairs: the same (problem, source_hash) evaluated in both runs (each run's first evaluation
per GPU is left out: it also waits for the evaluator's fork server to finish importing torch).
Per pair: gpu_seconds (runner wall of the evaluation) and, where the DB has them (migration 031,
attempts.eval_phases), the seconds of each phase. In the 2-GPU run each evaluation's interval is
[updated_at - gpu_seconds, updated_at], and its overlap with evaluations on the other GPU is measured,
so an evaluation that ran alone is told apart from one that shared the host with another.
"""

from __future__ import annotations

import argparse
import statistics as st
import sys
from pathlib import Path

from scaling_summary import EVALUATED

REPO = Path(__file__).resolve().parent.parent
RES = REPO / "data" / "results"
STARTUP_S = 5.0  # an evaluation's own start-up (CUDA context + first CUPTI session): its first ~5 s


def evaluations(con, alias: str) -> list[dict]:
    cols = {r[0] for r in con.execute(
        f"SELECT column_name FROM duckdb_columns() WHERE database_name = '{alias}' "
        f"AND table_name = 'attempts'").fetchall()}
    ph = "eval_phases" if "eval_phases" in cols else "NULL"
    rows = con.execute(
        f"SELECT id, problem, source_hash, gpu_seconds, epoch(updated_at), {ph} FROM {alias}.attempts "
        f"WHERE {EVALUATED} ORDER BY updated_at").fetchall()
    out = []
    for aid, prob, h, g, end, phases in rows:
        if isinstance(phases, str):
            import json

            phases = json.loads(phases)
        out.append({"id": aid, "key": (prob, h), "g": g, "start": end - g, "end": end,
                    "phases": phases or {}})
    out.sort(key=lambda e: e["start"])
    return out


def annotate_overlap(evs: list[dict]) -> None:
    for i, e in enumerate(evs):
        others = [o for j, o in enumerate(evs) if j != i]
        e["overlap"] = sum(max(0.0, min(e["end"], o["end"]) - max(e["start"], o["start"]))
                           for o in others) / max(e["g"], 1e-9)
        e["startup_overlap"] = sum(max(0.0, min(e["start"] + STARTUP_S, o["start"] + STARTUP_S)
                                       - max(e["start"], o["start"])) for o in others) / STARTUP_S


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--one", type=Path, default=RES / "db" / "optimize_h200_1gpu.duckdb")
    ap.add_argument("--two", type=Path, default=RES / "db" / "optimize_h200x2.duckdb")
    ap.add_argument("--gpus-two", type=int, default=2, help="GPUs of the second run (first evaluations to skip)")
    ap.add_argument("--out", type=Path, default=None, help="also write the markdown here")
    a = ap.parse_args(argv)
    import duckdb

    con = duckdb.connect()
    con.execute(f"ATTACH '{a.one}' AS one (READ_ONLY)")
    con.execute(f"ATTACH '{a.two}' AS two (READ_ONLY)")
    one, two = evaluations(con, "one"), evaluations(con, "two")
    annotate_overlap(two)
    # the first evaluation on each GPU also waited for the fork server's imports
    one_by = {e["key"]: e for e in one[1:]}
    pairs = [(one_by[e["key"]], e) for e in two[a.gpus_two:] if e["key"] in one_by]
    lines = ["# Same candidates, 1 GPU vs 2 GPUs busy", "",
             f"1-GPU run: `{_rel(a.one)}` ({len(one)} evaluations); 2-GPU run: `{_rel(a.two)}` "
             f"({len(two)} evaluations); matched pairs (first evaluation per GPU left out): {len(pairs)}", ""]
    if not pairs:
        lines.append("no candidate was evaluated in both runs")
        return _emit(lines, a.out)
    lines += ["| | pairs | 1 GPU s | 2 GPUs s | ratio of sums | median ratio | mean extra s |",
              "|---|---|---|---|---|---|---|"]

    def row(label, sel):
        if not sel:
            return f"| {label} | 0 | | | | | |"
        x1, x2 = sum(p[0]["g"] for p in sel), sum(p[1]["g"] for p in sel)
        return (f"| {label} | {len(sel)} | {x1:.1f} | {x2:.1f} | {x2 / x1:.3f} | "
                f"{st.median(p[1]['g'] / p[0]['g'] for p in sel):.3f} | "
                f"{st.mean(p[1]['g'] - p[0]['g'] for p in sel):+.2f} |")

    lines.append(row("all", pairs))
    lines.append(row("2-GPU evaluation overlapped >= 90% by the other GPU's", [p for p in pairs if p[1]["overlap"] >= 0.9]))
    lines.append(row("2-GPU evaluation overlapped < 90% (ran partly alone)", [p for p in pairs if p[1]["overlap"] < 0.9]))
    lines.append(row("its first 5 s overlapped the other's first 5 s >= 50%",
                     [p for p in pairs if p[1]["startup_overlap"] >= 0.5]))
    lines.append(row("its first 5 s overlapped the other's first 5 s < 50%",
                     [p for p in pairs if p[1]["startup_overlap"] < 0.5]))
    lines.append("")
    lines.append(f"Whole runs: mean gpu_seconds 1 GPU {st.mean(e['g'] for e in one):.2f} s, "
                 f"2 GPUs {st.mean(e['g'] for e in two):.2f} s; first evaluations: 1 GPU "
                 f"{one[0]['g']:.2f} s, 2 GPUs " + ", ".join("%.2f" % e["g"] for e in two[:a.gpus_two]) + " s.")
    with_ph = [p for p in pairs if p[0]["phases"] and p[1]["phases"]]
    lines.append("")
    if not with_ph:
        lines.append("No phase seconds in these DBs (attempts.eval_phases, migration 031, is absent or "
                     "NULL): which phase grows cannot be read from them.")
        return _emit(lines, a.out)
    names = sorted({k for p in with_ph for side in p for k in side["phases"]} - set(CPU_NAMES))
    d_total = sum(p[1]["g"] - p[0]["g"] for p in with_ph)
    lines += [f"Phases (attempts.eval_phases) over {len(with_ph)} pairs with phases on both sides, "
              f"summed; share = this phase's growth / the growth of gpu_seconds ({d_total:+.1f} s):", "",
              "| phase | 1 GPU s | 2 GPUs s | growth s | growth % | share of growth |",
              "|---|---|---|---|---|---|"]
    rows = []
    for n in names:
        x1 = sum(float(p[0]["phases"].get(n, 0) or 0) for p in with_ph)
        x2 = sum(float(p[1]["phases"].get(n, 0) or 0) for p in with_ph)
        rows.append((x2 - x1, n, x1, x2))
    for d, n, x1, x2 in sorted(rows, reverse=True):
        pct = f"{(x2 / x1 - 1) * 100:+.1f}" if x1 > 0 else "-"
        share = f"{d / d_total:.2f}" if d_total and n not in ("total", "driver") else ""
        lines.append(f"| {n} | {x1:.2f} | {x2:.2f} | {d:+.2f} | {pct} | {share} |")
    lines += cpu_section(with_ph)
    return _emit(lines, a.out)


# eval_phases keys that are CPU-seconds, not phases (solforge.evaluate.phase_totals.CPU_KEYS)
CPU_NAMES = ("cpu_user", "cpu_sys", "host_busy_cpu", "host_steal", "n_waits", "n_preempted", "n_minflt")


def cpu_section(pairs: list) -> list[str]:
    """Where the growth comes from, for pairs whose evaluations recorded CPU-seconds (zygote children,
    runs after commit 009190e): the child's own CPU-seconds and the host's busy / hypervisor-stolen
    CPU-seconds while it ran, each also per second of the evaluation's wall time ("total")."""
    sel = [p for p in pairs if all("cpu_user" in side["phases"] for side in p)]
    out = ["", "CPU-seconds (not phases; overlap them) over %d pairs that recorded them:" % len(sel)]
    if not sel:
        return out + ["none: these runs predate the evaluator's CPU accounting (zygote wait4, /proc/stat)."]
    out += ["", "| CPU-seconds (n_: counts) | 1 GPU | 2 GPUs | growth % | 1 GPU per wall s | 2 GPUs per wall s |",
            "|---|---|---|---|---|---|"]
    w1 = sum(float(p[0]["phases"].get("total", p[0]["g"])) for p in sel)
    w2 = sum(float(p[1]["phases"].get("total", p[1]["g"])) for p in sel)
    for n in CPU_NAMES:
        x1 = sum(float(p[0]["phases"].get(n, 0) or 0) for p in sel)
        x2 = sum(float(p[1]["phases"].get(n, 0) or 0) for p in sel)
        pct = f"{(x2 / x1 - 1) * 100:+.1f}" if x1 > 0 else "-"
        out.append(f"| {n} | {x1:.2f} | {x2:.2f} | {pct} | {x1 / w1:.3f} | {x2 / w2:.3f} |")
    out += ["", "Reading it: wall time (total) grows while the child's cpu_user + cpu_sys do not -> it "
            "waited (driver locks, scheduling, host_steal); cpu_user grows for the same work -> slower "
            "cores (clock, shared caches); cpu_sys grows -> more kernel / driver work; n_preempted "
            "(involuntary context switches) grows -> the child wanted a CPU that something else had."]
    return out


def _rel(p: Path) -> str:
    p = p.resolve()
    return str(p.relative_to(REPO)) if p.is_relative_to(REPO) else str(p)


def _emit(lines: list[str], out) -> int:
    text = "\n".join(lines) + "\n"
    print(text)
    if out:
        Path(out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    raise SystemExit(main())
