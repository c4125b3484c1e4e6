#!/usr/bin/env python3
"""T_b for every workload of every problem: the reference in eager PyTorch and under torch.compile,
timed with the evaluator's timer (CUPTI span, L2 flush, rotated inputs); T_b = the faster of the two.

    solforge baseline --dataset DIR --out OUTDIR --work /tmp/blw --deadline-s 180
        [--existing data/results/baselines/baselines_h200.csv] [--gpus auto|0,1|N] [--device cuda|cpu]
    (the same as python -m solforge.baselines.scheduler ...)

Plan, made to finish inside a hard deadline on a box with a few GPUs and many CPU cores:
1. Eager first, on every GPU at once (one worker per GPU, CUDA_VISIBLE_DEVICES pins it): every
   workload not yet in --existing, in tasks of at most --chunk workloads, cheapest first, claimed by
   whichever GPU is free (a claim is a file made with O_EXCL), so both GPUs end together.
   Slow references (Python loops over sequences, huge GEMMs) are cut by repetitions, never skipped:
   each eager task gets a timed-call budget per workload of (time left until --eager-share of the
   deadline) x (eager workers) / (workloads not yet claimed), at most --workload-budget-s; below half
   of that, min reps drop to 1, and a call slower than the budget is timed once (its first call was
   the warm-up).
2. torch.compile next: --compile-workers per GPU (default: the CPU cores shared out) start importing
   torch while eager runs, and begin when the GPU's eager work is done; compiles run in parallel on the
   CPU, every timed measurement (and input generation) holds the GPU's lock. Cheap-to-compile problems
   first; references that loop over `.item()` values last.
3. Out of memory: a task holds a lease on its GPU while it runs (shared; solforge/baselines/plan.py),
   and one that must run alone takes it exclusively, so the GPU's other workers finish their current
   task, give their memory back (torch.cuda.empty_cache after every workload and task) and wait.
   Alone: a ".oom" retry (a task that ran out of memory beside the others, queued once more), a task
   with a workload that ran out of memory in --existing, or one whose inputs and outputs exceed
   --alone-gb; those go first. With an earlier CSV the plan (rows left per problem and their earlier
   statuses) is printed first; --plan-only prints only that, --skip-reasons leaves known failures.
A worker that dies or finishes no workload for --task-timeout-s is killed and restarted; the workload
in flight is recorded, the rest of its task queued again. At the
deadline everything is killed. OUTDIR/baselines_h200.csv (merged with --existing), baselines_rows.jsonl
and baselines_failures.md (nothing else: scratch goes to --work) are rewritten every --flush-s seconds, at the deadline and on SIGTERM/SIGINT,
so they exist whatever happens. The last lines printed: workloads with eager / compile / neither per
subset.

--device cpu is a dry run of the same machinery on the CPU (wall-clock timer, no CUDA): for testing.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional

from ..settings import REPO_ROOT as REPO
from ..settings import get as _settings
from .outputs import CSV_COLS, write_outputs  # noqa: F401 - CSV_COLS: for importers
from .outputs import atomic_write as _atomic_write
from .outputs import deadline_reason
from .plan import compile_rate, gpu_lease, is_alone, plan_lines, workload_bytes

RESULTS = REPO / "data" / "results" / "baselines"



# ── the plan ─────────────────────────────────────────────────────────────────────────────────────
def read_explain(path) -> dict:
    """problem -> solforge.baselines.explain's record (graphs, graph breaks and why, on the CPU)."""
    if not path or not Path(path).exists():
        return {}
    recs = [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]
    return {r["problem"]: r for r in recs}


def explain_note(rec: Optional[dict]) -> str:
    """One line on what torch.compile makes of the reference, from its CPU explain record."""
    if not rec:
        return ""
    if rec.get("error"):
        return f"dynamo explain on CPU failed: {rec['error'][:160]}"
    why = "; ".join(rec.get("break_reasons", [])[:2])
    return (f"dynamo explain on CPU (smallest workload): {rec['graph_count']} graph(s), "
            f"{rec['graph_break_count']} graph break(s), {rec.get('breaks_listed', 0)} listed"
            + (f" ({why[:200]})" if why else ""))


def discover(dataset: Path, only: str = "", explain: Optional[dict] = None) -> list[dict]:
    """Problems with their workload uuids and a cost guess, read without the problem model (fast)."""
    out = []
    explain = explain or {}
    pre = tuple(x for x in only.split(",") if x)
    for d in sorted(p.parent for p in dataset.glob("*/*/definition.json")):
        if pre and not d.name.startswith(pre):
            continue
        uuids = [json.loads(line)["uuid"] for line in (d / "workload.jsonl").read_text().splitlines()
                 if line.strip()]
        ref = json.loads((d / "definition.json").read_text()).get("reference", "")
        lat = {}
        try:
            b = json.loads((d / "b200_reference.json").read_text())
            lat = {i: w.get("baseline_latency_ms") or 0.0 for i, w in
                   enumerate(b.get("per_workload", []))}
        except (OSError, ValueError):
            pass
        # Python loops that read tensor values (.item()) run thousands of tiny kernels per call in
        # eager mode and make torch.compile break graphs and recompile: the slow ones.
        loops = ".item()" in ref and "for " in ref
        cost = [0.03 + 20 * (lat.get(i, 0.05) * (30 if loops else 2)) / 1e3 for i in range(len(uuids))]
        ex = explain.get(d.name) or {}
        mem = workload_bytes(d)
        out.append({"dir": str(d), "name": d.name, "subset": d.parent.name, "uuids": uuids,
                    "cost": cost, "loops": loops, "ref_len": len(ref),
                    "mem": mem if len(mem) == len(uuids) else [0.0] * len(uuids),
                    "breaks": int(ex.get("breaks_listed") or 0) if not ex.get("error") else 0,
                    "explain": explain_note(ex),
                    # dynamo captured no graph at all: torch.compile runs this reference as eager
                    "no_graph": bool(ex) and not ex.get("error") and ex.get("graph_count") == 0})
    return out


def read_existing(path) -> dict:
    """(problem, uuid) -> row of an earlier CSV."""
    if not path or not Path(path).exists():
        return {}
    with open(path, newline="") as f:
        return {(r["problem"], r["workload_uuid"]): r for r in csv.DictReader(f)}


def skipped_reason(row: dict, variant: str, skip_reasons: tuple) -> bool:
    """An earlier row whose '<status>: <message>' contains one of skip_reasons is not tried again
    (e.g. 'runtime_error:' for Inductor errors, 'took over' for compiles past the time limit)."""
    text = f"{row.get(f'{variant}_status', '')}: {row.get(f'{variant}_message', '')}"
    return any(s and s in text for s in skip_reasons)


def plan(problems: list[dict], existing: dict, variants: list[str], chunk: int,
         compile_no_graph: bool = False, alone_bytes: float = float("inf"),
         skip_reasons: tuple = ()) -> dict:
    """variant -> ordered task list; a task is (problem, uuids still to measure). References that
    dynamo captures no graph of get no compile task (the reason goes into the table) unless
    compile_no_graph. A task runs alone on its GPU ("alone") when one of its workloads ran out of
    memory before or its memory estimate exceeds alone_bytes; alone tasks go first, biggest first."""
    tasks: dict = {v: [] for v in variants}
    for v in variants:
        for p in problems:
            if v == "compile" and p.get("no_graph") and not compile_no_graph:
                continue
            mem = p.get("mem") or [0.0] * len(p["uuids"])
            todo = [(u, c, m) for u, c, m in zip(p["uuids"], p["cost"], mem)
                    if not existing.get((p["name"], u), {}).get(f"{v}_ms")
                    and not skipped_reason(existing.get((p["name"], u), {}), v, skip_reasons)]
            if not todo:
                continue
            oom_before = any(existing.get((p["name"], u), {}).get(f"{v}_status") == "oom"
                             for u, _, _ in todo)
            # eager: split big problems so that both GPUs share them; compile: one task per problem
            # (one compile serves its workloads)
            size = chunk if v == "eager" else len(todo)
            for k in range(0, len(todo), size):
                part = todo[k:k + size]
                big = max(m for _, _, m in part)
                tasks[v].append({"id": f"{v}-{p['name']}-{k // size}", "problem": p["name"],
                                 "subset": p["subset"], "dir": p["dir"],
                                 "uuids": [u for u, _, _ in part],
                                 "cost": sum(c for _, c, _ in part), "loops": p["loops"],
                                 "ref_len": p["ref_len"], "breaks": p.get("breaks", 0),
                                 "mem": big, "alone": oom_before or big > alone_bytes})
    if "eager" in tasks:
        # Shortest first: under a deadline, coverage (a T_b for as many workloads as possible) beats
        # makespan. Longest-first spent a whole 255 s H200 run on a few looping references.
        tasks["eager"].sort(key=lambda t: t["cost"])
    if "compile" in tasks:
        # most workloads per unit of compile work first; references that dynamo breaks into several
        # graphs (explain on the CPU) and loops over .item() values last: their compiles are the
        # longest (a recompile per distinct value) and help least
        tasks["compile"].sort(key=lambda t: (t["loops"] or t.get("breaks", 0) > 0, t.get("breaks", 0),
                                             t["ref_len"] / len(t["uuids"])))
    for v in tasks:
        # The tasks that must run alone first (stable sort, biggest first): they are the rows the
        # earlier runs lost to memory, and at the end of a run the deadline would cut them.
        tasks[v].sort(key=lambda t: (not t.get("alone"), -t.get("mem", 0.0) if t.get("alone") else 0))
    return tasks


# ── worker ───────────────────────────────────────────────────────────────────────────────────────
class WallTimer:
    """--device cpu only: wall-clock timing of CPU calls, so the machinery can be tested anywhere."""

    def measure(self, call, reps, warmup_ms=10.0, budget_s=10.0, min_warmup_calls=2, min_reps=5):
        from solforge.evaluate.timing import Timing

        per = 1e-3
        if warmup_ms > 0 or min_warmup_calls > 0:
            t0, n = time.perf_counter(), 0
            while n < max(min_warmup_calls, 1) or (time.perf_counter() - t0) * 1e3 < warmup_ms:
                call(n)
                n += 1
            per = (time.perf_counter() - t0) / n
            reps = max(min(reps, min_reps), min(reps, int(budget_s / max(per, 1e-6))))
        samples = []
        for i in range(reps):
            t0 = time.perf_counter()
            call(i)
            samples.append((time.perf_counter() - t0) * 1e3)
        return Timing(samples, "cpu-wall")


def claim(claims: Path, task_id: str) -> bool:
    try:
        os.close(os.open(claims / task_id, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


def eager_budget(args, tasks: list, claims: Path, this_task: int, overhead_s: float = 0.04) -> float:
    """Timed-call seconds per workload that lets the eager pass end by --eager-end: the time left,
    shared by the eager workers, over the workloads nobody has claimed yet (this task's included),
    less a fixed cost per workload (inputs, first call, profiler)."""
    taken = set(os.listdir(claims))
    todo = this_task + sum(len(t["uuids"]) for t in tasks if t["id"] not in taken)
    left = args.eager_end - time.time()
    share = left * args.eager_workers / max(todo, 1) - overhead_s
    return max(0.002, min(args.workload_budget_s, share))


def worker(args) -> int:
    out = open(args.rows, "a", buffering=1)

    def emit(obj):
        out.write(json.dumps(obj) + "\n")

    import torch

    from solforge.evaluate import hardware

    if args.variant == "compile":
        import torch._dynamo  # noqa: F401 - the heavy imports, done while eager runs
        if args.compile_backend == "inductor":
            import torch._inductor.compile_fx  # noqa: F401
    emit({"event": "ready"})
    go = Path(args.go) if args.go else None
    while go is not None and not go.exists():
        if Path(args.claims, "STOP").exists():
            return 0
        time.sleep(0.2)
    cpu = args.device == "cpu"
    if not cpu:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        hw = hardware.capture(torch.device("cuda", 0)).__dict__
        if args.gpu_index.isdigit():  # nvidia-smi numbers GPUs physically
            hw["clocks"] = hardware.clocks(int(args.gpu_index))
        from solforge.evaluate.timing import Timer

        timer = Timer(torch.device("cuda", 0))
    else:
        hw = {"gpu_name": "cpu (dry run)", "driver": "", "torch_version": torch.__version__}
        timer = WallTimer()
    emit({"event": "hardware", **hw})
    claims = Path(args.claims)
    stage = Path(args.stage)
    for t, tasks in _tasks(Path(args.tasks), claims):
        alone = is_alone(t)
        # waiting for the GPU lease (the others draining before an alone task) is not the task's
        # time: the parent starts its clock at "begin"
        emit({"event": "wait", "task": t["id"], "alone": alone})
        with gpu_lease(args.lease, alone):
            _run_task(args, t, tasks, emit, timer, stage, claims, alone)
    emit({"event": "idle"})
    return 0


def _run_task(args, t, tasks, emit, timer, stage, claims, alone) -> None:
    """One claimed task under its GPU lease: its rows (with the task's start and each row's end
    time, epoch seconds: they show which tasks shared a GPU), then the memory given back before the
    lease is released, so that an alone task waiting for it finds the GPU empty."""
    import gc

    import torch

    from solforge.evaluate.baseline import time_problem
    from solforge.problem import load_problem_dir

    cpu = args.device == "cpu"
    start = time.time()
    emit({"event": "begin", "task": t["id"], "alone": alone, "t": start})
    try:
        problem = load_problem_dir(Path(t["dir"]))
    except Exception as e:  # noqa: BLE001
        emit({"event": "end", "task": t["id"], "error": f"load: {type(e).__name__}: {e}"})
        return
    budget, min_reps = args.workload_budget_s, args.min_reps
    if args.eager_end is not None:
        budget = eager_budget(args, tasks, claims, len(t["uuids"]))
        if budget < args.workload_budget_s / 2:
            min_reps = 1
    try:
        for row in time_problem(problem, args.variant, stage, reps=args.reps, only=t["uuids"],
                                device="cpu" if cpu else "cuda:0", timer=timer,
                                workload_budget_s=budget, problem_budget_s=1e9,
                                warmup_ms=min(10.0, budget * 1e3 / 4), min_reps=min_reps,
                                hurry_after_s=args.hurry_after_s, lock_path=args.lock,
                                inputs_in_lock=args.variant == "compile",
                                compile_backend=args.compile_backend,
                                dynamic_dims=not args.no_dynamic_dims):
            j = row.to_json()
            if alone and j.get("status") == "oom":
                j["message"] = "alone on the GPU; " + (j.get("message") or "")
            emit({"event": "row", "gpu": args.gpu_index, "task": t["id"], "alone": alone,
                  "task_start": start, "row_end": time.time(), **j})
            if not cpu:  # the last workload's inputs and blocks back to the device, not cached
                gc.collect()
                torch.cuda.empty_cache()
        emit({"event": "end", "task": t["id"], "t": time.time()})
    finally:
        if args.variant == "compile":
            torch._dynamo.reset()
        gc.collect()
        if not cpu:
            torch.cuda.empty_cache()


def _tasks(path: Path, claims: Path):
    """(task, the task list) for each task this worker claims; the file is read again when the list
    is done, since the parent appends tasks (a retry after out-of-memory, a killed task's rest)."""
    while True:
        tasks = json.loads(path.read_text())
        took = False
        for t in tasks:
            if (claims / "STOP").exists():
                return
            if claim(claims, t["id"]):
                took = True
                yield t, tasks
        if not took:
            return


# ── parent ───────────────────────────────────────────────────────────────────────────────────────
class Proc:
    """One worker process (variant, GPU); restarted after a death while its variant has tasks."""

    def __init__(self, name: str, variant: str, gpu: int, run: "Run"):
        self.name, self.variant, self.gpu, self.run = name, variant, gpu, run
        self.rows_path = run.work / "workers" / f"{name}.jsonl"
        self.log_path = run.work / "workers" / f"{name}.log"
        self.proc = None
        self.pos = 0
        self.current = None          # task id in flight
        self.since = 0.0
        self.done_rows: set = set()  # uuids of the current task already reported
        self.oom: list = []          # uuids of the current task that ran out of GPU memory
        self.finished = False        # exited after running out of tasks
        self.ready = False
        self.waiting = False         # claimed a task, waiting for its GPU lease
        self.began = False           # began a task since its last start
        self.bad_starts = 0          # deaths before any task: the environment, not a reference

    def start(self) -> None:
        a = self.run.args
        cmd = [sys.executable, "-m", "solforge.baselines.scheduler", "--worker", "--variant", self.variant,
               "--tasks", str(self.run.task_file[self.variant]), "--claims", str(self.run.claims),
               "--rows", str(self.rows_path), "--stage", str(self.run.work / "stage" / self.name),
               "--lock", str(self.run.work / f"gpu{self.gpu}.lock"), "--gpu-index", str(self.gpu),
               "--lease", str(self.run.work / f"gpu{self.gpu}.lease"),
               "--device", a.device, "--reps", str(a.reps), "--min-reps", str(a.min_reps),
               "--workload-budget-s", str(a.workload_budget_s), "--compile-backend", a.compile_backend]
        if a.no_dynamic_dims:
            cmd.append("--no-dynamic-dims")
        if self.variant == "eager":
            cmd += ["--eager-end", str(self.run.eager_end), "--eager-workers", str(self.run.n_eager)]
        else:
            cmd += ["--go", str(self.run.work / f"go_compile_gpu{self.gpu}"),
                    "--hurry-after-s", str(a.compile_hurry_after_s)]
        env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join(
            [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
        if a.device != "cpu":
            env["CUDA_VISIBLE_DEVICES"] = str(self.gpu)
        if self.variant == "compile":
            env.update(TORCHINDUCTOR_COMPILE_THREADS=str(a.compile_threads), OMP_NUM_THREADS="1")
        else:
            env.setdefault("OMP_NUM_THREADS", "4")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        self.current, self.waiting = None, False

    def read(self) -> None:
        if not self.rows_path.exists():
            return
        with open(self.rows_path) as f:
            f.seek(self.pos)
            while True:
                line = f.readline()
                if not line.endswith("\n"):
                    break
                self.pos = f.tell()
                obj = json.loads(line)
                ev = obj.pop("event")
                if ev == "ready":
                    self.ready = True
                elif ev == "hardware":
                    self.run.hardware.setdefault(self.gpu, obj)
                elif ev == "wait":  # claimed, waiting for the GPU lease: no clock yet
                    self.current, self.waiting, self.done_rows = obj["task"], True, set()
                    self.oom = []
                elif ev == "begin":
                    self.current, self.since, self.done_rows = obj["task"], time.monotonic(), set()
                    self.oom = []
                    self.began, self.waiting = True, False
                elif ev == "row":
                    self.done_rows.add(obj["workload_uuid"])
                    if obj.get("status") == "oom":
                        self.oom.append(obj["workload_uuid"])
                    self.since = time.monotonic()  # the limit is on one workload, not a whole task
                    self.run.rows.append(obj)
                elif ev == "end":
                    if obj.get("error"):
                        self.run.fail(obj["task"], self.variant, obj["error"], self.done_rows)
                    t = self.run.task_by_id.get(obj["task"], {"id": obj["task"]})
                    if self.oom and not is_alone(t):
                        # out of GPU memory while other workers held theirs: once more, later,
                        # alone on its GPU (the ".oom" suffix makes the worker take the lease
                        # exclusively); a task that already ran alone is not tried again
                        self.run.requeue(obj["task"], self.variant, self.oom, ".oom")
                    self.oom = []
                    self.current = None

    def poll(self) -> None:
        self.read()
        if self.proc is None or self.finished:
            return
        rc = self.proc.poll()
        a = self.run.args
        # a task's first torch.compile call compiles the whole reference: it gets its own, longer limit
        first_compile = self.variant == "compile" and not self.done_rows
        limit = a.compile_timeout_s if first_compile else a.task_timeout_s
        overrun = self.current is not None and not self.waiting and \
            time.monotonic() - self.since > limit
        if rc is None and not overrun:
            return
        if overrun:
            self.kill()
            self.read()
        if self.current is not None:
            why = (f"torch.compile of the first workload took over {limit:.0f} s (killed)"
                   if first_compile else f"no workload done in {limit:.0f} s (killed)") if overrun \
                else f"worker died (exit {rc})"
            # A compile that overran would only overrun again in the next worker: its workloads
            # are not queued again (nor a second time after a crash).
            again = not (first_compile and (overrun or self.current.endswith(".r")))
            self.run.fail(self.current, self.variant, why + ": " + self.tail(), self.done_rows,
                          requeue=again)
            self.current = None
        elif rc not in (0, None):  # died between tasks or before the first (imports, CUDA init)
            self.run.failures.append({"task": "-", "problem": self.name, "variant": self.variant,
                                      "reason": f"worker died (exit {rc}): {self.tail()}"[:700],
                                      "unmeasured": 0})
            self.bad_starts += 0 if self.began else 1
        if rc == 0 and not overrun:
            self.finished = True
            self.proc = None
            return
        self.proc = None
        if self.run.has_unclaimed(self.variant) and self.run.left() > 15 and self.bad_starts < 2:
            self.began = False
            self.start()
        else:
            self.finished = True

    def tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-500:].replace("\n", " | ")
        except OSError:
            return ""

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()

    @property
    def active(self) -> bool:
        return self.proc is not None and not self.finished


class Run:
    def __init__(self, args):
        self.args = args
        self.t0 = time.monotonic()
        self.out = args.out
        self.out.mkdir(parents=True, exist_ok=True)
        # scratch (worker logs and rows, claims, locks) apart from the few result files: a device
        # call brings back only a handful of files from its output folder
        self.work = args.work or (args.out / "work")
        (self.work / "workers").mkdir(parents=True, exist_ok=True)
        (self.work / "stage").mkdir(exist_ok=True)
        for f in self.work.glob("go_compile_gpu*"):
            f.unlink()
        self.claims = self.work / "claims"
        self.claims.mkdir(exist_ok=True)
        for f in self.claims.iterdir():  # a fresh plan every run
            f.unlink()
        self.eager_end = time.time() + args.eager_share * args.deadline_s
        self.n_eager = 1
        self.rows: list[dict] = []
        self.failures: list[dict] = []
        self.hardware: dict = {}
        self.clocks: dict = {}
        self.lock = threading.Lock()

    def left(self) -> float:
        return self.args.deadline_s - (time.monotonic() - self.t0)

    def fail(self, task_id, variant, reason, done_uuids, requeue: bool = False) -> None:
        t = self.task_by_id.get(task_id, {})
        missing = [u for u in t.get("uuids", []) if u not in done_uuids]
        rest = missing[1:] if requeue else []  # rows come in task order: missing[0] was in flight
        self.failures.append({"task": task_id, "problem": t.get("problem", task_id),
                              "variant": variant, "reason": reason[:700],
                              "unmeasured": len(missing) - len(rest),
                              "uuids": missing[:len(missing) - len(rest)]})
        if rest:  # the workloads after the one that hung or crashed become a task of their own
            self.requeue(task_id, variant, rest, ".r")

    def requeue(self, task_id, variant, uuids, suffix) -> None:
        t = self.task_by_id.get(task_id, {})
        new = dict(t, id=f"{task_id}{suffix}", uuids=list(uuids))
        self.tasks[variant].append(new)
        self.task_by_id[new["id"]] = new
        _atomic_write(self.task_file[variant], json.dumps(self.tasks[variant]))

    def has_unclaimed(self, variant) -> bool:
        return any(not (self.claims / t["id"]).exists() for t in self.tasks.get(variant, []))


def gpu_list(spec: str, device: str) -> list[str]:
    """GPU ids as CUDA_VISIBLE_DEVICES takes them (indices or GPU-UUIDs)."""
    if spec != "auto":
        return [str(i) for i in range(int(spec))] if spec.isdigit() else \
            [x.strip() for x in spec.split(",") if x.strip()]
    if device == "cpu":
        return ["0"]
    vis = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if vis:
        return [x.strip() for x in vis.split(",") if x.strip()]
    try:
        n = len([x for x in subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True,
                                           timeout=20).stdout.splitlines() if x.startswith("GPU")])
        return [str(i) for i in range(max(n, 1))]
    except Exception:  # noqa: BLE001
        return ["0"]


def sample_clocks(run: Run, stop: threading.Event) -> None:
    """Clocks under load, every 15 s, all GPUs in one nvidia-smi call (workers never wait for it)."""
    while not stop.is_set():
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=index,clocks.sm,clocks.mem,clocks.max.sm",
                                  "--format=csv,noheader,nounits"], capture_output=True, text=True,
                                 timeout=10).stdout
            for line in out.strip().splitlines():
                i, sm, mem, smax = [x.strip() for x in line.split(",")]
                with run.lock:
                    run.clocks[str(int(i))] = {"sm_mhz": int(sm), "mem_mhz": int(mem),
                                          "sm_max_mhz": int(smax)}
        except Exception:  # noqa: BLE001
            pass
        stop.wait(15)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="solforge baseline", description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", type=Path, default=_settings().shared_dir / "sol_execbench")
    ap.add_argument("--out", type=Path, default=Path("baselines_out"),
                    help="the results: baselines_h200.csv, baselines_failures.md, baselines_rows.jsonl")
    ap.add_argument("--work", type=Path, default=None,
                    help="scratch: worker logs, claims, locks (default OUT/work)")
    ap.add_argument("--existing", default=str(RESULTS / "baselines_h200.csv"),
                    help="earlier CSV: its measured rows are kept and not measured again ('' = none)")
    ap.add_argument("--deadline-s", type=float, default=180.0, help="hard limit for the whole run")
    ap.add_argument("--gpus", default="auto", help="auto, a count, or indices such as 0,1")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--variants", default="eager,compile")
    ap.add_argument("--compile-workers", type=int, default=0, help="per GPU (0: CPU cores shared out)")
    ap.add_argument("--compile-threads", type=int, default=1)
    ap.add_argument("--compile-backend", default="inductor",
                    help="torch.compile backend (T_b uses inductor; 'eager' tests the machinery fast)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--min-reps", type=int, default=3)
    ap.add_argument("--workload-budget-s", type=float, default=0.3,
                    help="timed calls per workload stop at this much GPU time (>= --min-reps)")
    ap.add_argument("--eager-share", type=float, default=0.6,
                    help="eager should be done by this fraction of the deadline: it sets the reps")
    ap.add_argument("--compile-hurry-after-s", type=float, default=20.0)
    ap.add_argument("--chunk", type=int, default=12, help="workloads per eager task")
    ap.add_argument("--task-timeout-s", type=float, default=60.0,
                    help="a worker that finishes no workload for this long is killed and restarted")
    ap.add_argument("--compile-timeout-s", type=float, default=150.0,
                    help="limit on a compile task's first workload (the compile itself); one that "
                         "overruns is recorded with its reason and not tried again")
    ap.add_argument("--explain", default=str(RESULTS / "baselines_dynamo_explain.jsonl"),
                    help="solforge.baselines.explain's output: compile order and reasons ('' = none)")
    ap.add_argument("--compile-no-graph", action="store_true",
                    help="time torch.compile also for references dynamo captures no graph of")
    ap.add_argument("--no-dynamic-dims", action="store_true",
                    help="compile without marking the dims that vary between workloads dynamic")
    ap.add_argument("--alone-gb", type=float, default=24.0,
                    help="a task whose workload needs more than this (two input sets and the outputs) "
                         "runs alone on its GPU, as does one that ran out of memory before (in "
                         "--existing, or earlier in this run: its '.oom' retry)")
    ap.add_argument("--skip-reasons", default="",
                    help="comma-separated: earlier rows whose '<status>: <message>' contains one of "
                         "these are not tried again (e.g. 'runtime_error:,took over')")
    ap.add_argument("--plan-only", action="store_true",
                    help="print the plan (what is missing per problem, and why) and exit")
    ap.add_argument("--rate-log", default=str(RESULTS / "baselines_h200_run_x2_topup_log.txt"),
                    help="an earlier run's log: its compile rate gives the plan's time estimate")
    ap.add_argument("--flush-s", type=float, default=20.0)
    ap.add_argument("--only", default="", help="comma-separated problem-name prefixes")
    ap.add_argument("--merge-rows", type=Path, nargs="*", default=None,
                    help="no run: merge workers' JSON-line files (WORK/workers/*.jsonl of a run whose "
                         "outputs were lost) into --existing and write the outputs to --out")
    ap.add_argument("--to-duckdb", type=Path, default=None,
                    help="no run: load the --existing CSV into this DuckDB store (tables hardware, "
                         "baselines) and print the counts")
    # worker-side
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--variant", default="eager")
    ap.add_argument("--tasks"), ap.add_argument("--claims"), ap.add_argument("--rows")
    ap.add_argument("--stage"), ap.add_argument("--lock"), ap.add_argument("--go", default="")
    ap.add_argument("--lease", default="")
    ap.add_argument("--gpu-index", default="0")
    ap.add_argument("--eager-end", type=float, default=None)
    ap.add_argument("--eager-workers", type=int, default=1)
    ap.add_argument("--hurry-after-s", type=float, default=None)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)
    if args.merge_rows is not None:
        return merge_rows(args)
    if args.to_duckdb is not None:
        from .outputs import load_duckdb

        print(json.dumps(load_duckdb(Path(args.existing), args.to_duckdb), indent=1))
        return 0
    return parent(args)


def merge_rows(args) -> int:
    """Rebuild the outputs from row files: the workers' own (they survive a lost OUT folder: a
    hardware event, then that worker's rows) or an OUT folder's baselines_rows.jsonl (plain rows;
    their hardware is read from the baselines_h200.csv beside it)."""
    from types import SimpleNamespace

    rows, hardware = [], {}
    for f in args.merge_rows:
        events = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        hw = next(({k: v for k, v in e.items() if k != "event"} for e in events
                   if e.get("event") == "hardware"), None)
        if hw is None:
            hw = _hardware_from_csv(f.parent / "baselines_h200.csv")
        for e in events:
            if e.pop("event", "row" if "variant" in e else None) == "row":
                rows.append(e)
                hardware.setdefault(str(e.get("gpu", "0")), hw)
    args.out.mkdir(parents=True, exist_ok=True)
    run = SimpleNamespace(out=args.out, rows=rows, hardware=hardware, clocks={},
                          lock=threading.Lock(), t0=time.monotonic(), args=args, failures=[])
    existing = read_existing(args.existing) if args.existing else {}
    write_outputs(run, existing, discover(args.dataset, args.only, read_explain(args.explain)))
    return 0


def _hardware_from_csv(path: Path) -> dict:
    """GPU, driver, torch and clocks as an OUT folder's table recorded them ({} without one)."""
    r = next((r for r in read_existing(path).values() if r.get("gpu")), None)
    if r is None:
        return {}
    try:
        clocks = json.loads(r.get("clocks") or "{}")
    except ValueError:
        clocks = {}
    return {"gpu_name": r["gpu"], "driver": r.get("driver", ""),
            "torch_version": r.get("torch_version", ""), "clocks": clocks}


def parent(args) -> int:
    existing = read_existing(args.existing) if args.existing else {}
    problems = discover(args.dataset, args.only, read_explain(args.explain))
    if not problems:  # a wrong --dataset path would otherwise "finish" with nothing to do
        print(f"baselines: no problem (*/*/definition.json) under {args.dataset}"
              + (f" matching --only {args.only}" if args.only else ""), file=sys.stderr)
        return 2
    variants = [v for v in args.variants.split(",") if v]
    tasks = plan(problems, existing, variants, args.chunk, args.compile_no_graph,
                 alone_bytes=args.alone_gb * 1e9,
                 skip_reasons=tuple(x for x in args.skip_reasons.split(",") if x))
    if existing or args.plan_only:  # a re-run: what is left, per problem, and why
        print("\n".join(plan_lines(problems, existing, tasks, compile_rate(args.rate_log),
                                   args.rate_log)), flush=True)
    if args.plan_only:  # nothing written
        return 0
    run = Run(args)
    run.tasks = tasks
    run.task_by_id = {t["id"]: t for ts in run.tasks.values() for t in ts}
    run.task_file = {}
    for v, ts in run.tasks.items():
        run.task_file[v] = run.work / f"tasks_{v}.json"
        run.task_file[v].write_text(json.dumps(ts))
    gpus = gpu_list(args.gpus, args.device)
    ncpu = os.cpu_count() or 2
    k = args.compile_workers or max(1, min(14, (ncpu - 2 * len(gpus) - 2) // len(gpus)))
    print(f"baselines: {len(problems)} problems, tasks " +
          ", ".join(f"{v} {len(ts)} ({sum(len(t['uuids']) for t in ts)} workloads)"
                    for v, ts in run.tasks.items()) +
          f"; GPUs {gpus}; {k} compile workers per GPU; deadline {args.deadline_s:.0f} s", flush=True)
    procs: list[Proc] = []
    for g in gpus:
        if run.tasks.get("eager"):
            procs.append(Proc(f"eager_gpu{g}", "eager", g, run))
    run.n_eager = max(1, len(procs))
    for g in gpus:
        if run.tasks.get("compile"):
            procs += [Proc(f"compile_gpu{g}_{i}", "compile", g, run) for i in range(k)]
    stop = threading.Event()
    if args.device != "cpu":
        threading.Thread(target=sample_clocks, args=(run, stop), daemon=True).start()

    def finish(*_sig):
        (run.claims / "STOP").touch()
        for p in procs:
            p.kill()
        for p in procs:
            p.read()
            if p.current is not None:
                run.fail(p.current, p.variant,
                         deadline_reason(list(run.rows), p.current, p.variant), p.done_rows)
                p.current = None
        stop.set()
        write_outputs(run, existing, problems)
        # many small files nobody needs afterwards (reference copies, claim markers)
        shutil.rmtree(run.work / "stage", ignore_errors=True)
        shutil.rmtree(run.claims, ignore_errors=True)
        if _sig:
            sys.exit(1)

    signal.signal(signal.SIGTERM, finish)
    signal.signal(signal.SIGINT, finish)
    for p in procs:
        if p.variant == "eager":
            p.start()
    started_compile = False
    last_flush = time.monotonic()
    margin = 3.0  # seconds kept for killing and writing
    while run.left() > margin:
        time.sleep(0.25)
        for p in procs:
            if p.proc is not None or p.finished:
                p.poll()
        eager = [p for p in procs if p.variant == "eager"]
        # compile workers import torch while eager runs (after the eager workers are up)
        if not started_compile and (all(p.ready or p.finished for p in eager) or not eager):
            for p in procs:
                if p.variant == "compile":
                    p.start()
            started_compile = True
        for g in gpus:
            go = run.work / f"go_compile_gpu{g}"
            mine = [p for p in eager if p.gpu == g]
            # this GPU's eager worker is done and no eager task is left for it (a task appended after
            # every eager worker exited is left: its rows say so)
            if not go.exists() and all(p.finished or p.proc is None for p in mine) and \
                    (not run.has_unclaimed("eager") or all(p.finished for p in eager)):
                go.touch()
                print(f"[{time.monotonic() - run.t0:5.0f} s] GPU {g}: eager done, compile starts",
                      flush=True)
        if time.monotonic() - last_flush > args.flush_s:
            write_outputs(run, existing, problems, quiet=True)
            last_flush = time.monotonic()
        if started_compile and not any(p.active for p in procs):
            break
    finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
