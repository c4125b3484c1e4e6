"""The outputs of solforge baseline (solforge/baselines/scheduler.py): the merged CSV (every workload of the dataset, with its
eager and torch.compile times or the reason it has none), the failures list and a summary per subset
and per problem. Kept apart from the scheduler so each stays readable."""

from __future__ import annotations

import csv
import io
import json
import os
import time
from collections import Counter
from pathlib import Path

CSV_COLS = ["problem", "workload_uuid", "eager_ms", "compile_ms", "T_b_ms", "T_b_variant", "label",
            "gpu", "driver", "clocks", "timing_method", "eager_status", "compile_status",
            "eager_spread", "compile_spread", "eager_message", "compile_message", "subset",
            "eager_reps", "compile_reps", "torch_version", "eager_busy_ms", "compile_busy_ms"]
VARIANTS = ("eager", "compile")
NOT_MEASURED = "not_measured"  # no row for this variant yet: the message says why
NO_GRAPH = ("torch.compile captures no graph of this reference, so it runs as eager PyTorch (dynamo "
            "explain on CPU: 0 graphs; a graph break inside a Python loop makes dynamo skip the whole "
            "frame): T_b = eager, not timed twice")


def deadline_reason(rows, task_id: str, variant: str) -> str:
    """Why a task stopped at the deadline, with what it had done: how many of its workloads this run
    measured and the seconds each took (wall, most of it compiling when the timed calls are ms), so
    a compile-time-bound problem reads as such and not as a run that ran out of luck."""
    mine = [r for r in rows if r.get("task", "").split(".")[0] == task_id.split(".")[0]
            and r.get("variant") == variant]   # the task and its requeued parts (".r", ".oom")
    secs = [float(r["seconds"]) for r in mine if r.get("seconds") is not None]
    if not secs:
        return "stopped at the deadline before its first workload finished"
    ms = [float(r["median_ms"]) for r in mine if r.get("median_ms")]
    timed = f"; a timed call takes {max(ms):.1f} ms at most" if ms else ""
    return (f"stopped at the deadline: {len(secs)} workload(s) of this task measured in this run, "
            f"{sum(secs) / len(secs):.0f} s each (first {secs[0]:.0f} s){timed}")


def atomic_write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def merge(run, existing: dict) -> dict:
    """(problem, uuid) -> CSV row: the earlier CSV, then this run's rows (a failure never replaces a
    measurement)."""
    table = {k: dict(r) for k, r in existing.items()}
    with run.lock:
        clocks = dict(run.clocks)
    for r in list(run.rows):
        key = (r["problem"], r["workload_uuid"])
        e = table.setdefault(key, {"problem": r["problem"], "workload_uuid": r["workload_uuid"]})
        v = r["variant"]
        if r["status"] != "passed" and e.get(f"{v}_ms"):
            continue
        hw = run.hardware.get(str(r.get("gpu", "0")), {})
        e[f"{v}_ms"] = f"{r['median_ms']:.6f}" if r["status"] == "passed" and r.get("median_ms") \
            else ""
        e[f"{v}_spread"] = f"{r['spread']:.4f}" if r.get("spread") is not None else ""
        e[f"{v}_status"] = r["status"]
        e[f"{v}_message"] = (r.get("message") or "")[:300]
        e[f"{v}_reps"] = str(r.get("n_reps") or "")
        e[f"{v}_busy_ms"] = f"{r['busy_ms']:.6f}" if r["status"] == "passed" and \
            r.get("busy_ms") is not None else ""
        e["label"] = r.get("label") or e.get("label", "")
        e["gpu"] = hw.get("gpu_name", e.get("gpu", ""))
        e["driver"] = hw.get("driver", e.get("driver", ""))
        e["torch_version"] = hw.get("torch_version", e.get("torch_version", ""))
        c = clocks.get(str(r.get("gpu", "0"))) or hw.get("clocks") or {}
        e["clocks"] = json.dumps({k: c.get(k) for k in ("sm_mhz", "mem_mhz", "sm_max_mhz")})
        e["timing_method"] = r.get("timing_method") or e.get("timing_method", "")
    return table


def fill_reasons(table: dict, problems: list[dict], run, final: bool) -> None:
    """Every workload of the dataset gets a row; a variant without a time gets a status and the
    reason: its own failure, the run's note on its task, or what was left when the run ended."""
    this_run = {(r["problem"], r["workload_uuid"], r["variant"]) for r in list(run.rows)}
    noted = {}
    for f in getattr(run, "failures", []):
        for u in f.get("uuids", []):
            noted[(f["problem"], u, f["variant"])] = f["reason"]
    ended = "the run ended (deadline) before it was reached" if final else \
        "queued (run in progress)"
    for p in problems:
        for u in p["uuids"]:
            e = table.setdefault((p["name"], u), {"problem": p["name"], "workload_uuid": u})
            e["subset"] = p["subset"]
            for v in VARIANTS:
                if e.get(f"{v}_ms"):
                    continue
                key = (p["name"], u, v)
                status = e.get(f"{v}_status") or ""
                if v == "compile" and p.get("no_graph") and not getattr(
                        getattr(run, "args", None), "compile_no_graph", False) and \
                        key not in this_run:
                    e[f"{v}_status"], e[f"{v}_message"] = "skipped", NO_GRAPH
                elif key in noted:
                    e[f"{v}_status"], e[f"{v}_message"] = NOT_MEASURED, noted[key][:300]
                elif status not in ("", "skipped", NOT_MEASURED):
                    # its own failure (runtime_error, oom, timeout), from this run or an earlier one
                    # that --skip-reasons kept from a retry: status and message stay
                    pass
                else:
                    why = ended
                    if v == "compile" and p.get("explain"):
                        why += "; " + p["explain"]
                    e[f"{v}_status"], e[f"{v}_message"] = NOT_MEASURED, why[:300]
    for e in table.values():
        cands = [(float(e[f"{v}_ms"]), v) for v in VARIANTS if e.get(f"{v}_ms")]
        if cands:
            best = min(cands)
            e["T_b_ms"], e["T_b_variant"] = f"{best[0]:.6f}", best[1]


def write_csv(path: Path, table: dict) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for key in sorted(table):
        w.writerow(table[key])
    atomic_write(path, buf.getvalue())


def counts(table: dict, problems: list[dict]) -> dict:
    stats: dict = {}
    for p in problems:
        s = stats.setdefault(p["subset"], Counter())
        for u in p["uuids"]:
            e = table.get((p["name"], u), {})
            s["workloads"] += 1
            s["eager"] += bool(e.get("eager_ms"))
            s["compile"] += bool(e.get("compile_ms"))
            s["T_b"] += bool(e.get("eager_ms") or e.get("compile_ms"))
            s["neither"] += not (e.get("eager_ms") or e.get("compile_ms"))
            s["both"] += bool(e.get("eager_ms") and e.get("compile_ms"))
    stats["all"] = sum(stats.values(), Counter())
    return stats


def subset_table(stats: dict) -> list[str]:
    lines = ["| subset | workloads | eager | compile | both | T_b (either) | neither |",
             "|---|---|---|---|---|---|---|"]
    for name in sorted(k for k in stats if k != "all") + ["all"]:
        s = stats[name]
        lines.append(f"| {name} | {s['workloads']} | {s['eager']} | {s['compile']} | {s['both']} | "
                     f"{s['T_b']} | {s['neither']} |")
    return lines


def hardware_lines(run) -> list[str]:
    with run.lock:
        clocks = dict(run.clocks)
    out = []
    for g, hw in sorted(run.hardware.items()):
        c = clocks.get(str(g)) or hw.get("clocks") or {}
        out.append(f"- GPU {g}: {hw.get('gpu_name', '?')}, driver {hw.get('driver', '?')}, torch "
                   f"{hw.get('torch_version', '?')}, CUDA {hw.get('cuda_runtime', '?')}, clocks "
                   f"under load SM {c.get('sm_mhz')} / max {c.get('sm_max_mhz')} MHz, memory "
                   f"{c.get('mem_mhz')} MHz")
    return out or ["- (no GPU worker reported its hardware in this run)"]


def host_bound_line(table: dict) -> str:
    """How many workloads' T_b is host time: eager, with the GPU busy under
    settings.host_bound_busy_share of the span (rows timed since the busy time was recorded)."""
    from ..evaluate.host_time import is_host_bound
    from ..settings import get

    share = get().host_bound_busy_share
    known = [(float(e["T_b_ms"]), float(e[f"{e['T_b_variant']}_busy_ms"])) for e in table.values()
             if e.get("T_b_variant") and e.get(f"{e['T_b_variant']}_busy_ms")]
    host = [k for k in known if is_host_bound(*k)]
    return (f"T_b that is host time (the GPU busy under {share:.0%} of the timed call: launch-bound, "
            f"it moves with the host's speed): {len(host)} of the {len(known)} workloads whose T_b "
            f"records the GPU's busy time ({sum(1 for e in table.values() if e.get('T_b_ms'))} with a "
            "T_b).")


def summary_md(table: dict, problems: list[dict], run, stats: dict) -> str:
    """Per subset and per problem: how many workloads have eager / compile / T_b, the label, and
    the reasons for the ones without."""
    gpus = Counter((e.get("gpu"), e.get("driver")) for e in table.values() if e.get("gpu"))
    lines = ["# PyTorch baselines T_b on the H200: eager and torch.compile per workload", "",
             "Written by `solforge baseline` (see baselines_h200_notes.md); the table is "
             "`baselines_h200.csv` (one row per workload: times, status and message per variant, "
             "label, GPU, driver, clocks, timing method). Load it into DuckDB with "
             "`solforge baseline --existing data/results/baselines/baselines_h200.csv "
             "--to-duckdb FILE` (table `hardware`: GPU, driver, clocks; table `baselines`: one row "
             "per workload and variant, status and message included).",
             "", "Rows by GPU and driver: " + ", ".join(f"{g} / driver {d}: {n}"
                                                        for (g, d), n in gpus.most_common()), "",
             host_bound_line(table), "",
             "This run's hardware:", *hardware_lines(run), "", *subset_table(stats), "",
             "## Per problem", "",
             "Missing: the most common reason among the workloads of the problem without that "
             "variant's time (status: message).", "",
             "| subset | problem | workloads | eager | compile | T_b | label | missing eager | "
             "missing compile |", "|---|---|---|---|---|---|---|---|---|"]
    for p in sorted(problems, key=lambda p: (p["subset"], p["name"])):
        es = [table.get((p["name"], u), {}) for u in p["uuids"]]
        n = {v: sum(1 for e in es if e.get(f"{v}_ms")) for v in VARIANTS}
        tb = sum(1 for e in es if e.get("eager_ms") or e.get("compile_ms"))
        label = next((e.get("label") for e in es if e.get("label")), "")
        why = {}
        for v in VARIANTS:
            # one line per table row: a message may hold a traceback's newlines
            c = Counter(" ".join(f"{e.get(f'{v}_status') or '?'}: {e.get(f'{v}_message') or ''}"
                                 .split())[:220] for e in es if not e.get(f"{v}_ms"))
            why[v] = (f"{c.most_common(1)[0][0]}" + (f" (+{len(c) - 1} other)" if len(c) > 1 else "")
                      ) if c else ""
        lines.append(f"| {p['subset']} | {p['name']} | {len(p['uuids'])} | {n['eager']} | "
                     f"{n['compile']} | {tb} | {label.split(' (')[0]} | "
                     f"{why['eager'].replace('|', '/')} | {why['compile'].replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def failures_md(table: dict, problems: list[dict], run, stats: dict) -> str:
    rows = list(run.rows)
    hw = next(iter(run.hardware.values()), {})
    wall = time.monotonic() - run.t0
    lines = [f"# Baseline run on {hw.get('gpu_name', '?')} (driver {hw.get('driver', '?')}, "
             f"torch {hw.get('torch_version', '?')})", "",
             f"wall {wall:.0f} s of a {run.args.deadline_s:.0f} s deadline; GPUs "
             f"{sorted(run.hardware)}; new rows {len(rows)}", "", *subset_table(stats), "",
             "## Tasks that failed, died or were stopped (reason)", ""]
    for f in run.failures:
        lines.append(f"- {f['problem']} [{f['variant']}, task {f['task']}]: {f['unmeasured']} "
                     f"workload(s) unmeasured: {f['reason']}")
    lines += ["", "## Workloads whose reference failed (status: message)", ""]
    bad: dict = {}
    for r in rows:
        if r["status"] not in ("passed", "skipped"):
            bad.setdefault((r["problem"], r["variant"]), []).append(r)
    for (p, v), rs in sorted(bad.items()):
        lines.append(f"- {p} [{v}]: {len(rs)} workload(s); first: {rs[0]['status']}: "
                     f"{(rs[0].get('message') or '')[:300]}")
    lines += ["", "## Problems with workloads that have neither eager nor compile", ""]
    for p in problems:
        n = sum(1 for u in p["uuids"] if not (table.get((p["name"], u), {}).get("eager_ms") or
                                              table.get((p["name"], u), {}).get("compile_ms")))
        if n:
            lines.append(f"- {p['subset']}/{p['name']}: {n} of {len(p['uuids'])}")
    return "\n".join(lines) + "\n"


def write_outputs(run, existing: dict, problems: list[dict], quiet: bool = False,
                  final: bool = True) -> None:
    out = run.out
    atomic_write(out / "baselines_rows.jsonl", "".join(json.dumps(r) + "\n" for r in list(run.rows)))
    table = merge(run, existing)
    fill_reasons(table, problems, run, final=final and not quiet)
    write_csv(out / "baselines_h200.csv", table)
    stats = counts(table, problems)
    atomic_write(out / "baselines_failures.md", failures_md(table, problems, run, stats))
    atomic_write(out / "baselines_summary.md", summary_md(table, problems, run, stats))
    t = stats["all"]
    if not quiet:
        print("\n".join(subset_table(stats)), flush=True)
    else:
        print(f"[{time.monotonic() - run.t0:5.0f} s] eager {t['eager']}, compile {t['compile']}, "
              f"neither {t['neither']} of {t['workloads']}", flush=True)


def load_duckdb(csv_path: Path, db_path: Path) -> dict:
    """The CSV into a solforge DuckDB store: one `hardware` row (GPU, driver, clocks of the table's
    rows) and one `baselines` row per workload and variant (solforge.report.import_results does the
    rows; it skips a file it has loaded before). Returns counts."""
    from solforge.report.import_results import hardware_row, import_baselines
    from solforge.store import Store

    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    gpus = Counter((r.get("gpu") or "", r.get("driver") or "") for r in rows if r.get("gpu"))
    (gpu, driver), _ = gpus.most_common(1)[0] if gpus else (("", ""), 0)
    clocks = Counter(r.get("clocks") for r in rows if r.get("gpu") == gpu and r.get("clocks"))
    torch_v = Counter(r.get("torch_version") for r in rows if r.get("torch_version"))
    hw = hardware_row({"gpu": gpu, "driver": driver, "cuda_driver_api": None,
                       "source": str(csv_path), "torch": torch_v.most_common(1)[0][0] if torch_v
                       else None})
    hw["clocks"] = clocks.most_common(1)[0][0] if clocks else None
    store = Store(db_path)
    from ..store.results import hardware_known

    if not hardware_known(store, hw["id"]):
        store.insert_rows("hardware", [hw])
    n = import_baselines(store, Path(csv_path), hw["id"])
    return {"hardware_id": hw["id"], "gpu": gpu, "driver": driver, "baseline_rows": n,
            "other_gpus": {f"{g} / {d}": c for (g, d), c in gpus.items() if (g, d) != (gpu, driver)}}
