"""Eager reference timing, window by window: NVIDIA's own timing function beside solforge's T_b
timing, the same inputs, alternating on one GPU, many windows each.

Why: one SOL-ExecBench reading of a launch-bound eager reference (a chain of small kernels, host
time) is one window of 50 calls, and such windows do not repeat: in a reference-only run of their
CLI the same reference timed twice in one process, seconds apart, differed by over 5% (geomean per
problem) on 12 of 24 problems (data/results/sol_execbench_compare/). A per-problem comparison of two
single readings then measures that scatter, not the instruments. Here each side gives K windows per
workload, and the comparison is of the median window (what a single reading is most likely to
give), beside each side's own scatter (odd windows against even ones) and the single-window ratio.

NVIDIA's side is their `time_runnable` (sol_execbench.core.bench.timing, imported from their source,
unmodified: the function their eval_driver times `reference_latency_ms` with, 10 warm-up calls, 50
CUPTI-timed calls, every per-call time returned). solforge's side is
`solforge.evaluate.baseline.measure_like_nvidia`, the eager T_b's timing. Each side runs in its own
process (their timing re-registers CUPTI's callbacks on every call, which would take solforge's
over in one process); both make their inputs with solforge's InputFactory from the same seed, and
the parent runs one window at a time, alternating which side goes first.

  # the cases are compare_sol_execbench.py's (prepare --reference-only ...), NVIDIA's source carried
  python3 benchmarks/eager_timing_windows.py run --cases .carry/sxb/cases --sxb .carry/sxb/repo \
      --wheels .whl .carry/sxb/whl --windows 6 --out $OUT/win
  .venv/bin/python benchmarks/eager_timing_windows.py report OUT/win/eager_timing_windows.json
  #    (several JSONs: one report, each case from the last run that has it)
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import os
import select
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOL = 0.05
SIDES = ("nvidia", "solforge")
RATIOS = {"cross": "solforge / NVIDIA, median window",
          "first": "solforge / NVIDIA, first window only (a single reading each)",
          "pooled": "solforge / NVIDIA, every window's calls pooled (the eager T_b's way)",
          "pooled_vs_one": "solforge pooled / NVIDIA's first window (T_b against one CLI reading)",
          "nvidia_self": "NVIDIA's own scatter: odd windows / even windows",
          "solforge_self": "solforge's own scatter: odd windows / even windows"}


# ------------------------------------------------------------------------------------- the worker
class _Side:
    """One workload's inputs and reference in this process; window() times one window."""

    def __init__(self, side: str, sxb_src: str):
        import torch

        self.side, self.torch = side, torch
        self.dev = torch.device("cuda")
        if side == "nvidia":
            sys.path.insert(0, sxb_src)
            from sol_execbench.core.bench.timing import time_runnable  # their code, unmodified

            self.time_runnable = time_runnable
        self.state: dict = {}       # measure_like_nvidia's (its Timer lives across workloads)
        self.loads = 0
        self.tmp = None             # where the references' sources are written, one per process
        self.fn = self.args = None

    def load(self, case_dir: Path, subset: str, uuid: str) -> dict:
        import tempfile

        from solforge.evaluate.inputs import InputFactory
        from solforge.evaluate.reference import load_reference
        from solforge.problem import load_problem_dir

        p = load_problem_dir(case_dir / "problem", subset)
        w = next(w for w in p.workloads if w.uuid == uuid)
        defn = p.definition
        self.loads += 1
        self.tmp = self.tmp or Path(tempfile.mkdtemp(prefix="eager_windows_"))
        mod = load_reference(defn, self.tmp, name=f"ref_{self.side}_{self.loads}")
        entry = defn.custom_inputs_entrypoint
        custom = getattr(mod, entry) if entry else None
        factory = InputFactory(w, self.dev, custom_fn=custom, blob_roots=[case_dir / "problem"])
        order = list(defn.inputs)
        # the two input sets solforge's T_b alternates; NVIDIA's side uses the first (their pool
        # copies it afresh per call)
        self.args = [[s[k] for k in order] for s in (factory.make(100), factory.make(101))]
        self.fn = mod.run
        self.state = {"nvidia_timer": self.state.get("nvidia_timer")}
        t0 = time.perf_counter()
        self._grad(lambda: self.fn(*self.args[0]))        # the first touch, untimed
        self.torch.cuda.synchronize()
        return {"first_call_ms": (time.perf_counter() - t0) * 1e3}

    def _grad(self, f):
        # each side's grad mode: their eval_driver times the reference as it is (grad on unless the
        # reference turns it off); solforge's T_b timing runs under no_grad
        if self.side == "nvidia":
            return f()
        with self.torch.no_grad():
            return f()

    def window(self, budget_s: float, one_input_set: bool = False) -> dict:
        mhz = _sm_clock_mhz()   # before the window: which level a window reads may be the clock's
        before = _host_state()
        launch_ms: list = []
        fn = self.fn

        def timed_launch(*a):
            # the host's time to launch one call (the reference returns once its kernels are
            # queued): on a host-bound reference, the span a window reads follows it
            t1 = time.perf_counter()
            out = fn(*a)
            launch_ms.append((time.perf_counter() - t1) * 1e3)
            return out

        t0 = time.perf_counter()
        busy = None
        if self.side == "nvidia":
            times = self.time_runnable(timed_launch, self.args[0], [], "cuda:0", warmup=10,
                                       rep=50, return_mode="all")
            method = "their time_runnable (cupti)"
        else:
            from solforge.evaluate.baseline import measure_like_nvidia

            args = self.args[:1] if one_input_set else self.args
            t = self._grad(lambda: measure_like_nvidia(self.state, self.dev, timed_launch, args,
                                                       50, budget_s))
            times, method = list(t.samples_ms), f"{t.method}/{t.backend}"
            # the GPU's own work a call (per kernel, the median of its summed durations): a level
            # that moves the span but not this is host time between kernels, not the GPU's clock
            busy = sum(t.kernel_ms.values()) if t.kernel_ms else None
        wall = time.perf_counter() - t0
        return {"times": [float(x) for x in times], "wall_s": wall, "method": method,
                "sm_mhz": mhz, "busy_ms": busy, "host": _host_delta(before, _host_state(), wall),
                # the timed calls' launches are the last ones (warm-up calls come first)
                "launch_ms": statistics.median(launch_ms[-len(times):]) if launch_ms and times
                else None}


def _sm_clock_mhz():
    """The GPU's SM clock now (nvidia-smi), None where it cannot be read."""
    try:
        gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm",
                              "--format=csv,noheader,nounits", "-i", gpu],
                             capture_output=True, text=True, timeout=10)
        return int(out.stdout.split()[0])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


def _host_state() -> dict:
    """This thread's CPU, context switches and CPU time, and the machine's steal time (a virtual
    machine's CPUs lent elsewhere): what a host-bound window's level may go with."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_THREAD)
    return {"cpu": _current_cpu(), "nvcsw": ru.ru_nvcsw, "nivcsw": ru.ru_nivcsw,
            "thread_s": time.thread_time(), "steal": _steal_ticks()}


def _host_delta(a: dict, b: dict, wall_s: float) -> dict:
    def d(k):
        return None if a[k] is None or b[k] is None else b[k] - a[k]

    return {"cpus": [a["cpu"], b["cpu"]], "nvcsw": d("nvcsw"), "nivcsw": d("nivcsw"),
            "cpu_frac": round(d("thread_s") / wall_s, 3) if wall_s > 0 else None,
            "steal_ticks": d("steal")}


def _current_cpu():
    """The CPU this thread last ran on (/proc/thread-self/stat, field 39), None off Linux."""
    try:
        stat = Path("/proc/thread-self/stat").read_text()
        return int(stat[stat.rindex(")") + 2:].split()[36])
    except (OSError, ValueError, IndexError):
        return None


def _steal_ticks():
    """The machine's steal time so far, in clock ticks (/proc/stat's first line, 8th value)."""
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()
        return int(first[8]) if first[0] == "cpu" else None
    except (OSError, ValueError, IndexError):
        return None


def cmd_worker(a) -> int:
    """Commands on stdin (one JSON a line), replies on --reply-fd: load, window, quit."""
    if a.cpus:
        # a launch-bound reference's time is host time: both sides on the same cores, or a side
        # that landed on a slower (shared) core reads slower for the whole run
        sys.path.insert(0, str(REPO / "benchmarks"))
        from compare_sol_execbench import parse_cpus

        os.sched_setaffinity(0, parse_cpus(a.cpus))
    reply = os.fdopen(a.reply_fd, "w", buffering=1)
    side = _Side(a.side, a.sxb_src)
    cases = Path(a.cases)
    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            if cmd["op"] == "quit":
                break
            if cmd["op"] == "load":
                out = side.load(cases / cmd["case"], cmd["subset"], cmd["uuid"])
            else:
                out = side.window(cmd.get("budget_s", 3.0), cmd.get("one_input_set", False))
            out["ok"] = True
        except Exception as e:  # noqa: BLE001 - the parent records it and goes on
            out = {"ok": False, "error": f"{type(e).__name__}: {e}"[:500]}
        reply.write(json.dumps(out) + "\n")
    return 0


# ------------------------------------------------------------------------------------- the parent
class _Worker:
    def __init__(self, side: str, a, env: dict, log: Path):
        r, w = os.pipe()
        self.side, self.log = side, open(log, "a")
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "worker", "--side", side, "--cases", a.cases,
             "--sxb-src", str(Path(a.sxb).resolve() / "src"), "--reply-fd", str(w),
             *(["--cpus", a.cpus] if a.cpus else [])],
            stdin=subprocess.PIPE, stdout=self.log, stderr=subprocess.STDOUT, text=True,
            pass_fds=(w,), env=env)
        os.close(w)
        self.reply = os.fdopen(r)

    def ask(self, cmd: dict, timeout_s: float) -> dict:
        try:
            self.proc.stdin.write(json.dumps(cmd) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            return {"ok": False, "error": f"worker gone: {e}", "dead": True}
        ready, _, _ = select.select([self.reply], [], [], timeout_s)
        line = self.reply.readline() if ready else ""
        if not line:
            self.close()
            return {"ok": False, "error": "no answer in time" if not ready else "worker died",
                    "dead": True}
        return json.loads(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def cmd_run(a) -> int:
    sys.path.insert(0, str(REPO / "benchmarks"))
    from compare_sol_execbench import _install, parse_cpus

    try:
        parse_cpus(a.cpus)
    except ValueError as e:
        print(f"eager_timing_windows: {e}", file=sys.stderr)
        return 2

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    _install(a.wheels, Path(a.site))
    cases = Path(a.cases).resolve()
    a.cases = str(cases)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(cases / "solforge_head"), a.site, str(REPO),
                                         env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PYTHONUNBUFFERED"] = "1"
    index = [e for e in json.loads((cases / "index.json").read_text()) if e.get("workloads")
             and (not a.only or any(fnmatch.fnmatch(e["case"], g) for g in a.only))]
    logs = Path("/tmp/eager_windows_logs")
    logs.mkdir(exist_ok=True)
    workers = {s: _Worker(s, a, env, logs / f"{s}.log") for s in SIDES}
    rows = []
    stopped = ""
    for e, wl in ((e, wl) for e in index for wl in e["workloads"]):
        if time.time() - t_start > a.deadline_s:
            stopped = f"deadline reached at {e['case']}"
            break
        row = {"case": e["case"], "uuid": wl["uuid"], "axes": wl.get("axes", {}),
               **{s: {"windows": [], "errors": []} for s in SIDES}}
        for s in SIDES:
            got = workers[s].ask({"op": "load", "case": e["case"], "subset": e["subset"],
                                  "uuid": wl["uuid"]}, a.timeout_s)
            if not got.get("ok"):
                row[s]["errors"].append(f"load: {got.get('error')}")
            else:
                row[s]["first_call_ms"] = got["first_call_ms"]
        for k in range(a.windows):
            if any(row[s]["errors"] for s in SIDES):
                break
            if k >= 2 and statistics.median(row["nvidia"]["windows"][0]) > a.slow_ms:
                break   # GPU-bound calls repeat (and cost the most): two windows a side
            for s in (SIDES if k % 2 == 0 else SIDES[::-1]):
                got = workers[s].ask({"op": "window", "budget_s": a.budget_s,
                                      "one_input_set": a.one_input_set}, a.timeout_s)
                if got.get("ok"):
                    row[s]["windows"].append(got["times"])
                    for k in ("sm_mhz", "busy_ms", "host", "launch_ms"):
                        row[s].setdefault(k, []).append(got.get(k))
                    row[s]["method"] = got["method"]
                else:
                    row[s]["errors"].append(f"window {k}: {got.get('error')}")
        for s in SIDES:
            if workers[s].proc.poll() is not None:   # gone (out of memory, a crash): anew
                workers[s] = _Worker(s, a, env, logs / f"{s}.log")
        rows.append(row)
        med = {s: (statistics.median(statistics.median(w) for w in row[s]["windows"])
                   if row[s]["windows"] else None) for s in SIDES}
        errors = row["nvidia"]["errors"] + row["solforge"]["errors"]
        print(f"{e['case']} {wl.get('axes')}: nvidia {med['nvidia']} solforge {med['solforge']} "
              f"({time.time() - t_start:.0f} s in)" + (f" {str(errors)[:200]}" if errors else ""),
              flush=True)
    for w in workers.values():
        w.ask({"op": "quit"}, 5)
        w.close()
    meta = {"command": " ".join(["python3", "benchmarks/" + Path(__file__).name, *sys.argv[1:]]),
            "solforge_commit": json.loads((cases / "meta.json").read_text()).get("solforge_commit"),
            "windows": a.windows, "cpus": a.cpus or "any", "one_input_set": a.one_input_set,
            "wall_s": round(time.time() - t_start, 1), "stopped": stopped}
    try:
        import torch

        meta.update(torch=torch.__version__, gpu=torch.cuda.get_device_name(0))
    except Exception:  # noqa: BLE001
        pass
    doc = {"meta": meta, "rows": rows}
    (out / "eager_timing_windows.json").write_text(json.dumps(doc))
    (out / "eager_timing_windows.md").write_text(render(summarize(doc)))
    print(render(summarize(doc)))
    return 0


# ---------------------------------------------------------------------------------------- report
def _gm(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def _within(r, tol=TOL):
    return r is not None and abs(r - 1.0) <= tol


def summarize(doc: dict, tol: float = TOL) -> dict:
    """Per problem: the cross ratio of median windows, the single-window (first) ratio, and each
    side's own scatter (median of its odd windows over median of its even ones); geomeans over the
    problem's workloads that both sides timed in at least two windows."""
    by_case: dict = {}
    for r in doc["rows"]:
        med = {s: [statistics.median(w) for w in r[s]["windows"] if w] for s in SIDES}
        if any(len(med[s]) < 2 for s in SIDES):
            continue
        c = by_case.setdefault(r["case"], {k: [] for k in (*RATIOS, "ms")})
        m = {s: statistics.median(med[s]) for s in SIDES}
        pooled = {s: statistics.median([x for w in r[s]["windows"] for x in w]) for s in SIDES}
        c["cross"].append(m["solforge"] / m["nvidia"])
        c["first"].append(med["solforge"][0] / med["nvidia"][0])
        c["pooled"].append(pooled["solforge"] / pooled["nvidia"])
        c["pooled_vs_one"].append(pooled["solforge"] / med["nvidia"][0])
        for s in SIDES:
            c[f"{s}_self"].append(statistics.median(med[s][1::2]) / statistics.median(med[s][0::2]))
        c["ms"].append(m["nvidia"])
    problems = []
    for case, c in by_case.items():
        problems.append({"case": case, "workloads": len(c["cross"]),
                         **{k: _gm(c[k]) for k in RATIOS},
                         "nvidia_ms_range": [min(c["ms"]), max(c["ms"])]})
    count = {k: sum(_within(p[k], tol) for p in problems) for k in RATIOS}
    return {"meta": doc.get("meta", {}), "tol": tol, "problems": problems, "within": count,
            "n": len(problems), "geomean": {k: _gm([p[k] for p in problems]) for k in count},
            "levels": levels(doc), "companions": level_companions(doc)}


BIMODAL = 1.5   # a workload whose window medians span more than this reads two levels


def _two_level_rows(doc: dict):
    """(row, medians, fast flags) per workload whose window medians (both sides' together) span
    more than BIMODAL with as many windows a side: a window is fast below the geometric mean of
    the lowest and highest."""
    for r in doc["rows"]:
        med = {s: [statistics.median(w) for w in r[s]["windows"] if w] for s in SIDES}
        k = len(med["nvidia"])
        if k < 2 or len(med["solforge"]) != k:
            continue
        lo, hi = min(med["nvidia"] + med["solforge"]), max(med["nvidia"] + med["solforge"])
        if hi <= BIMODAL * lo:
            continue
        cut = math.sqrt(lo * hi)
        yield r, med, {s: [x < cut for x in med[s]] for s in SIDES}


def levels(doc: dict) -> dict:
    """Which of two levels each window reads, on the two-level workloads (_two_level_rows). Each
    side's share of fast windows, and how many windows of the same round sat at the same level on
    both sides, beside what independent draws at those shares would give."""
    pairs = same = 0
    fast = {s: 0 for s in SIDES}
    for _r, _med, f in _two_level_rows(doc):
        pairs += len(f["nvidia"])
        same += sum(a == b for a, b in zip(f["nvidia"], f["solforge"]))
        for s in SIDES:
            fast[s] += sum(f[s])
    share = {s: fast[s] / pairs if pairs else None for s in SIDES}
    chance = (share["nvidia"] * share["solforge"] + (1 - share["nvidia"]) * (1 - share["solforge"])
              if pairs else None)
    return {"pairs": pairs, "same": same, "fast_share": share, "same_by_chance": chance}


def level_companions(doc: dict) -> dict:
    """On the two-level workloads, what each window's level goes with, of what the worker recorded
    beside it (runs from before these records have none: windows 0). Fast windows over all, split
    by: the thread preempted during the window (involuntary context switches), the machine's steal
    time, the thread moved to another CPU, the CPU it ended on; the SM clock read before fast and
    before slow windows; and, on solforge's side, the GPU's own work a call (summed kernel
    durations) on the slow level over the fast one beside the span's: a level the span shows and
    the kernels do not is host time between kernels; on both sides, the host's time to launch one
    call on the slow level over the fast one (what a host-bound span follows)."""
    split: dict = {"preempted": {}, "steal": {}, "moved CPU": {}, "CPU": {}}
    mhz: dict = {True: [], False: []}
    busy_ratio, span_ratio, launch_ratio = [], [], []
    n = 0

    def count(attr, value, fast):
        c = split[attr].setdefault(value, [0, 0])
        c[0] += fast
        c[1] += 1

    for r, med, f in _two_level_rows(doc):
        for s in SIDES:
            hosts, clocks = r[s].get("host") or [], r[s].get("sm_mhz") or []
            for k, fast in enumerate(f[s]):
                h = hosts[k] if k < len(hosts) else None
                if not h:
                    continue
                n += 1
                if h.get("nivcsw") is not None:
                    count("preempted", h["nivcsw"] > 0, fast)
                if h.get("steal_ticks") is not None:
                    count("steal", h["steal_ticks"] > 0, fast)
                cpus = h.get("cpus") or [None, None]
                if None not in cpus:
                    count("moved CPU", cpus[0] != cpus[1], fast)
                    count("CPU", cpus[1], fast)
                if k < len(clocks) and clocks[k] is not None:
                    mhz[fast].append(clocks[k])
        for s in SIDES:
            launches = r[s].get("launch_ms") or []
            fl = [x for fast, x in zip(f[s], launches) if fast and x is not None]
            sl = [x for fast, x in zip(f[s], launches) if not fast and x is not None]
            if fl and sl:
                launch_ratio.append(statistics.median(sl) / statistics.median(fl))
        busy = r["solforge"].get("busy_ms") or []
        pairs = [(fast, b, m) for fast, b, m in zip(f["solforge"], busy, med["solforge"])
                 if b is not None]
        fast_w = [(b, m) for fast, b, m in pairs if fast]
        slow_w = [(b, m) for fast, b, m in pairs if not fast]
        if fast_w and slow_w:
            busy_ratio.append(statistics.median(b for b, _ in slow_w)
                              / statistics.median(b for b, _ in fast_w))
            span_ratio.append(statistics.median(m for _, m in slow_w)
                              / statistics.median(m for _, m in fast_w))
    return {"windows": n, "split": split,
            "sm_mhz": {"fast": statistics.median(mhz[True]) if mhz[True] else None,
                       "slow": statistics.median(mhz[False]) if mhz[False] else None},
            "workloads_both_levels": len(busy_ratio),
            "busy_slow_over_fast": _gm(busy_ratio), "span_slow_over_fast": _gm(span_ratio),
            "sides_both_levels": len(launch_ratio), "launch_slow_over_fast": _gm(launch_ratio)}


def _render_companions(lc: dict) -> list[str]:
    if not lc.get("windows"):
        return []

    def share(attr):
        parts = []
        for value, (fast, total) in sorted(lc["split"][attr].items(), key=lambda kv: str(kv[0])):
            parts.append(f"{value}: {fast} of {total}")
        return ", ".join(parts) or "-"

    mz = lc["sm_mhz"]
    lines = [f"What the level goes with, over {lc['windows']} windows of the two-level workloads "
             "(fast windows of all, split by what was recorded with each):", "",
             f"- preempted during the window (involuntary context switches): {share('preempted')}",
             f"- steal time on the machine during the window: {share('steal')}",
             f"- thread moved to another CPU during the window: {share('moved CPU')}",
             f"- CPU it ended on: {share('CPU')}",
             f"- SM clock before the window (median MHz): fast {mz['fast']}, slow {mz['slow']}"]
    if lc.get("workloads_both_levels"):
        lines.append(
            f"- solforge's side, {lc['workloads_both_levels']} workloads read at both levels: the "
            f"slow level's span is {lc['span_slow_over_fast']:.2f}x the fast one's, its kernels' "
            f"own GPU time {lc['busy_slow_over_fast']:.2f}x")
    if lc.get("sides_both_levels"):
        lines.append(
            f"- the host's time to launch one call, slow level over fast ({lc['sides_both_levels']} "
            f"workload sides read at both levels): {lc['launch_slow_over_fast']:.2f}x")
    return lines + [""]


def render(sm: dict) -> str:
    f = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
    n, w, g, m = sm["n"], sm["within"], sm["geomean"], sm["meta"]
    lines = [
        "# Eager reference timing, window by window: NVIDIA's time_runnable beside solforge's T_b",
        "",
        f"`{m.get('command', '')}` (solforge {str(m.get('solforge_commit', ''))[:7]}, "
        f"{m.get('gpu', '')}, torch {m.get('torch', '')}, {m.get('windows')} windows of 50 calls "
        f"a side per workload, {m.get('wall_s')} s"
        + (f"; {m['stopped']}" if m.get("stopped") else "") + ").",
        "",
        f"Within {sm['tol']:.0%}, geomean per problem, of {n} problems:",
        "",
        "| measure | within | geomean |",
        "|---|---|---|",
        *(f"| {label} | {w[k]} | {f(g[k])} |" for k, label in RATIOS.items()),
        "",
    ]
    lv = sm.get("levels") or {}
    if lv.get("pairs"):
        fs = lv["fast_share"]
        lines += [
            f"Two levels: on the workloads whose window medians span more than {BIMODAL}x, the fast "
            f"level in {fs['nvidia']:.0%} of NVIDIA's windows and {fs['solforge']:.0%} of "
            f"solforge's; both sides' windows of the same round at the same level in {lv['same']} "
            f"of {lv['pairs']} ({lv['same'] / lv['pairs']:.0%}; {lv['same_by_chance']:.0%} if "
            "drawn independently at those shares).",
            ""]
    lines += _render_companions(sm.get("companions") or {})
    lines += [
        "| problem | workloads | NVIDIA ms (range) | solforge / NVIDIA, median window "
        "| first window | NVIDIA odd/even | solforge odd/even |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in sm["problems"]:
        lo, hi = p["nvidia_ms_range"]
        lines.append(f"| {p['case']} | {p['workloads']} | {lo:.4f}-{hi:.4f} | {f(p['cross'])} | "
                     f"{f(p['first'])} | {f(p['nvidia_self'])} | {f(p['solforge_self'])} |")
    return "\n".join(lines) + "\n"


def combine(docs: list[dict]) -> dict:
    """Several runs as one: each case's rows from the last run that has it (a run cut short by its
    deadline, then the rest in another call)."""
    rows: dict = {}
    for d in docs:
        for case in dict.fromkeys(r["case"] for r in d["rows"]):
            rows[case] = [r for r in d["rows"] if r["case"] == case]
    metas = [d.get("meta", {}) for d in docs]
    meta = dict(metas[-1], command=" ; ".join(m.get("command", "") for m in metas),
                wall_s=round(sum(m.get("wall_s") or 0 for m in metas), 1),
                stopped="; ".join(m["stopped"] for m in metas if m.get("stopped")))
    return {"meta": meta, "rows": [r for rs in rows.values() for r in rs]}


def cmd_report(a) -> int:
    doc = combine([json.loads(Path(j).read_text()) for j in a.json])
    if a.json_out:
        Path(a.json_out).write_text(json.dumps(doc))
    md = render(summarize(doc))
    if a.out:
        Path(a.out).write_text(md)
    print(md)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--cases", required=True, help="compare_sol_execbench.py prepare's folder")
    r.add_argument("--sxb", required=True,
                   help="NVIDIA/SOL-ExecBench's source (its src/ is imported)")
    r.add_argument("--wheels", nargs="*", default=[])
    r.add_argument("--site", default="/tmp/site")
    r.add_argument("--windows", type=int, default=6, help="per side and workload")
    r.add_argument("--only", nargs="*", help="case name globs (default: every case)")
    r.add_argument("--cpus", help="both sides' processes on these cores (comma list), e.g. 4,5")
    r.add_argument("--one-input-set", action="store_true",
                   help="solforge's side times the first input set only, as NVIDIA's side does "
                        "(by default it alternates two, as the T_b timing does)")
    r.add_argument("--slow-ms", type=float, default=2.0,
                   help="a workload whose first NVIDIA window reads over this: two windows a side")
    r.add_argument("--budget-s", type=float, default=3.0,
                   help="solforge's workload budget a window")
    r.add_argument("--timeout-s", type=float, default=180.0, help="one command's answer")
    r.add_argument("--deadline-s", type=float, default=520.0)
    r.add_argument("--out", required=True)
    wk = sub.add_parser("worker")
    wk.add_argument("--side", choices=SIDES, required=True)
    wk.add_argument("--cases", required=True)
    wk.add_argument("--sxb-src", required=True)
    wk.add_argument("--reply-fd", type=int, required=True)
    wk.add_argument("--cpus")
    rp = sub.add_parser("report")
    rp.add_argument("json", nargs="+",
                    help="one run's JSON, or several: a case from the last that has it")
    rp.add_argument("--out")
    rp.add_argument("--json-out", help="the combined runs as one JSON")
    a = ap.parse_args()
    return {"run": cmd_run, "worker": cmd_worker, "report": cmd_report}[a.cmd](a)


if __name__ == "__main__":
    raise SystemExit(main())
