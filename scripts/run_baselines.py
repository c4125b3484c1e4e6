#!/usr/bin/env python3
"""T_b for every workload of every problem: the reference in eager PyTorch and under torch.compile,
timed on the GPU with the evaluator's timer (CUPTI span, L2 flush, rotated inputs).

    python scripts/run_baselines.py --dataset DIR --out OUTDIR [--deadline-s 480] [--compile-workers 8]
                                    [--existing data/results/baselines_h200.csv]

One eager worker walks all problems; N compile workers share them (torch.compile is CPU-heavy);
every measurement holds a GPU file lock, so timings never overlap (compiles and input generation do).
A worker that crashes or overruns a problem's time limit is killed and restarted after that problem,
which is recorded with the reason. At the deadline everything stops and what finished is written:
OUTDIR/baselines_rows.jsonl (every row), OUTDIR/baselines_h200.csv (one line per workload) and
OUTDIR/baselines_failures.md (problems whose reference cannot run, with the reason). Rows already in
--existing (status passed) are never measured again.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def problem_dirs(dataset: Path) -> list[Path]:
    return sorted(p.parent for p in dataset.glob("*/*/definition.json"))


# ── worker ───────────────────────────────────────────────────────────────────────────────────────
def worker(args) -> int:
    import torch

    from solforge.evaluate import hardware
    from solforge.evaluate.baseline import time_problem
    from solforge.evaluate.timing import Timer
    from solforge.problem import load_problem_dir

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    done = {tuple(x) for x in json.loads(Path(args.skip_file).read_text())} if args.skip_file else set()
    out = open(args.rows, "a", buffering=1)

    def emit(obj):
        out.write(json.dumps(obj) + "\n")

    emit({"event": "hardware", **hardware.capture().__dict__})
    timer = Timer(torch.device("cuda"))
    stage = Path(args.stage)
    for pdir in [Path(p) for p in args.problems.split(os.pathsep) if p]:
        emit({"event": "begin", "problem_dir": str(pdir)})
        try:
            problem = load_problem_dir(pdir)
        except Exception as e:  # noqa: BLE001
            emit({"event": "end", "problem_dir": str(pdir), "error": f"load: {e}"})
            continue
        skip = frozenset(u for (p, u, v) in done if p == problem.name and v == args.variant)
        for row in time_problem(problem, args.variant, stage, reps=args.reps,
                                problem_budget_s=args.problem_budget_s, lock_path=args.lock,
                                skip=skip, timer=timer):
            emit({"event": "row", **row.to_json()})
        emit({"event": "end", "problem_dir": str(pdir), "problem": problem.name})
        emit({"event": "hardware", **hardware.capture().__dict__})  # clocks under load, not idle
        torch.cuda.empty_cache()
        torch._dynamo.reset() if args.variant == "compile" else None
    return 0


# ── parent ───────────────────────────────────────────────────────────────────────────────────────
class Chain:
    """A worker process over a list of problems, restarted after the problem it died on."""

    def __init__(self, name, variant, problems, args, out: Path, skip_file: str):
        self.name, self.variant, self.todo = name, variant, list(problems)
        self.args, self.out, self.skip_file = args, out, skip_file
        self.rows_path = out / f"rows_{name}.jsonl"
        self.proc = None
        self.read_pos = 0
        self.current = None
        self.current_since = 0.0
        self.failures: list[dict] = []
        self.rows: list[dict] = []
        self.hardware: dict = {}
        self.limit = args.problem_timeout_s

    def start(self):
        if not self.todo:
            return
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--variant", self.variant,
               "--problems", os.pathsep.join(map(str, self.todo)), "--rows", str(self.rows_path),
               "--lock", str(self.out / "gpu.lock"), "--stage", str(self.out / f"stage_{self.name}"),
               "--reps", str(self.args.reps), "--problem-budget-s", str(self.args.problem_budget_s),
               "--skip-file", self.skip_file]
        env = dict(os.environ, PYTHONUNBUFFERED="1",
                   TORCHINDUCTOR_COMPILE_THREADS=str(self.args.compile_threads))
        self.log = open(self.out / f"worker_{self.name}.log", "ab")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        self.current, self.current_since = None, time.monotonic()

    def poll(self):
        if self.rows_path.exists():
            with open(self.rows_path) as f:
                f.seek(self.read_pos)
                while True:
                    line = f.readline()
                    if not line or not line.endswith("\n"):
                        break
                    self.read_pos = f.tell()
                    obj = json.loads(line)
                    ev = obj.pop("event")
                    if ev == "hardware":
                        self.hardware = obj
                    elif ev == "begin":
                        self.current, self.current_since = obj["problem_dir"], time.monotonic()
                    elif ev == "row":
                        self.rows.append(obj)
                    elif ev == "end":
                        if obj.get("error"):
                            self.failures.append({"problem_dir": obj["problem_dir"],
                                                  "variant": self.variant, "reason": obj["error"]})
                        if obj["problem_dir"] in map(str, self.todo):
                            self.todo = self.todo[[str(p) for p in self.todo].index(obj["problem_dir"]) + 1:]
                        self.current = None
        if self.proc is None:
            return
        rc = self.proc.poll()
        overrun = self.current and time.monotonic() - self.current_since > self.limit
        if rc is not None or overrun:
            if overrun:
                self.kill()
            reason = (f"over the {self.limit:.0f} s problem limit (killed)" if overrun
                      else f"worker died (exit {rc})")
            if self.current:
                self.failures.append({"problem_dir": self.current, "variant": self.variant,
                                      "reason": reason + ": " + self.tail()})
                strs = [str(p) for p in self.todo]
                if self.current in strs:
                    self.todo = self.todo[strs.index(self.current) + 1:]
            elif rc is not None and rc != 0 and self.todo:
                self.failures.append({"problem_dir": str(self.todo[0]), "variant": self.variant,
                                      "reason": reason + ": " + self.tail()})
                self.todo = self.todo[1:]
            elif rc == 0:
                self.todo = []
            self.proc = None
            self.start()

    def tail(self) -> str:
        try:
            return (self.out / f"worker_{self.name}.log").read_text(errors="replace")[-600:].replace("\n", " | ")
        except OSError:
            return ""

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 9)
            except ProcessLookupError:
                pass
            self.proc.wait()

    @property
    def running(self) -> bool:
        return self.proc is not None


def read_existing(path: Path) -> dict:
    """(problem, uuid) -> existing CSV row, for rows measured before."""
    if not path or not path.exists():
        return {}
    with open(path) as f:
        return {(r["problem"], r["workload_uuid"]): r for r in csv.DictReader(f)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--variant", default="eager")
    ap.add_argument("--problems", default="")
    ap.add_argument("--rows"), ap.add_argument("--lock"), ap.add_argument("--stage")
    ap.add_argument("--skip-file", default="")
    ap.add_argument("--dataset", type=Path, default=REPO.parent / "shared" / "sol_execbench")
    ap.add_argument("--out", type=Path, default=Path("baselines_out"))
    ap.add_argument("--existing", type=Path, default=REPO / "data/results/baselines_h200.csv")
    ap.add_argument("--deadline-s", type=float, default=480.0)
    ap.add_argument("--compile-workers", type=int, default=8)
    ap.add_argument("--eager-workers", type=int, default=4)
    ap.add_argument("--compile-threads", type=int, default=2)
    ap.add_argument("--variants", default="eager,compile")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--problem-budget-s", type=float, default=30.0)
    ap.add_argument("--problem-timeout-s", type=float, default=150.0)
    ap.add_argument("--only", default="", help="comma-separated problem-name prefixes")
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)

    t0 = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    existing = read_existing(args.existing)
    done = []
    for (p, u), r in existing.items():
        for v in ("eager", "compile"):
            if r.get(f"{v}_ms"):
                done.append([p, u, v])
    skip_file = args.out / "skip.json"
    skip_file.write_text(json.dumps(done))
    dirs = problem_dirs(args.dataset)
    if args.only:
        pre = tuple(args.only.split(","))
        dirs = [d for d in dirs if d.name.startswith(pre)]
    chains = []
    variants = args.variants.split(",")
    if "eager" in variants:
        k = max(1, args.eager_workers)
        for i in range(k):
            chains.append(Chain(f"eager{i}", "eager", dirs[i::k], args, args.out, str(skip_file)))
    if "compile" in variants:
        k = max(1, args.compile_workers)
        for i in range(k):
            chains.append(Chain(f"compile{i}", "compile", dirs[i::k], args, args.out, str(skip_file)))
    for c in chains:
        c.start()
    while any(c.running for c in chains):
        time.sleep(0.5)
        for c in chains:
            c.poll()
        if time.monotonic() - t0 > args.deadline_s:
            for c in chains:
                c.kill()
                c.poll_final = True
            break
    for c in chains:
        c.proc = None
        c.poll()
    write_outputs(args, chains, existing, time.monotonic() - t0)
    return 0


def write_outputs(args, chains, existing: dict, wall: float) -> None:
    rows = [r for c in chains for r in c.rows]
    with open(args.out / "baselines_rows.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    hw = next((c.hardware for c in chains if c.hardware), {})
    clocks = hw.get("clocks", {})
    table: dict = {}
    for key, r in existing.items():
        table[key] = dict(r)
    for r in rows:
        key = (r["problem"], r["workload_uuid"])
        e = table.setdefault(key, {"problem": r["problem"], "workload_uuid": r["workload_uuid"]})
        v = r["variant"]
        if r["status"] == "passed" or not e.get(f"{v}_ms"):
            e[f"{v}_ms"] = f"{r['median_ms']:.6f}" if r.get("median_ms") else ""
            e[f"{v}_spread"] = f"{r['spread']:.4f}" if r.get("spread") is not None else ""
            e[f"{v}_status"] = r["status"]
            e[f"{v}_message"] = (r.get("message") or "")[:200]
            e["label"] = r.get("label") or e.get("label", "")
            e["gpu"] = hw.get("gpu_name", e.get("gpu", ""))
            e["driver"] = hw.get("driver", e.get("driver", ""))
            e["clocks"] = json.dumps({k: clocks.get(k) for k in ("sm_mhz", "mem_mhz", "sm_max_mhz")})
            e["timing_method"] = r.get("timing_method") or e.get("timing_method", "")
    cols = ["problem", "workload_uuid", "eager_ms", "compile_ms", "T_b_ms", "T_b_variant", "label",
            "gpu", "driver", "clocks", "timing_method", "eager_status", "compile_status",
            "eager_spread", "compile_spread", "eager_message", "compile_message"]
    for e in table.values():
        cands = [(float(e[f"{v}_ms"]), v) for v in ("eager", "compile") if e.get(f"{v}_ms")]
        if cands:
            best = min(cands)
            e["T_b_ms"], e["T_b_variant"] = f"{best[0]:.6f}", best[1]
    with open(args.out / "baselines_h200.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for key in sorted(table):
            w.writerow(table[key])
    # problems whose reference cannot run, with the reason
    fails: dict = {}
    for c in chains:
        for fl in c.failures:
            fails.setdefault(Path(fl["problem_dir"]).name, []).append(f"{fl['variant']}: {fl['reason']}")
    for r in rows:
        if r["status"] not in ("passed", "skipped"):
            fails.setdefault(r["problem"], []).append(
                f"{r['variant']} {r['workload_uuid'][:8]}: {r['status']}: {r.get('message', '')[:300]}")
    boxed: dict = {}
    for r in rows:
        if r["status"] == "skipped":
            boxed.setdefault(r["problem"], set()).add(r["variant"])
    n_wl = len(table)
    n_eager = sum(1 for e in table.values() if e.get("eager_ms"))
    n_comp = sum(1 for e in table.values() if e.get("compile_ms"))
    with open(args.out / "baselines_failures.md", "w") as f:
        f.write(f"# Baseline run on {hw.get('gpu_name', '?')} (driver {hw.get('driver', '?')})\n\n")
        f.write(f"wall {wall:.0f} s; workloads with eager: {n_eager}, with compile: {n_comp}, "
                f"rows in table: {n_wl}\n\n## Problems with failures (reason)\n\n")
        for p in sorted(fails):
            reasons = fails[p]
            f.write(f"- {p}: {len(reasons)} failure(s); first: {reasons[0][:400]}\n")
        f.write("\n## Problems cut by the per-problem time box (some workloads not measured)\n\n")
        for p in sorted(boxed):
            f.write(f"- {p}: {', '.join(sorted(boxed[p]))}\n")
    print(f"baselines: {n_eager} eager, {n_comp} compile, {len(fails)} problems with failures, "
          f"{wall:.0f} s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
