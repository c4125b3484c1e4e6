"""Isolation: every untrusted candidate runs in a freshly spawned process with its own staging
directory, a scrubbed environment and wall-clock limits; a fault, a hang or an OOM costs only that
process. The parent never imports torch.

    stage = stage_candidate(workdir / "cand-1", problem, candidate=cand, compile_result=cr, job=...)
    report = run_stage(stage, timeout_s=300, workload_timeout_s=120)

How the process starts (`launch`, default $SOLFORGE_EVAL_LAUNCH, else "zygote"):
  spawn   `python -m solforge.evaluate.driver STAGE`: a new interpreter that imports torch itself.
  zygote  forked by a long-lived fork server (zygote.py, one per Python + PYTHONPATH, started on first
          use or by prestart()) that imported torch and the evaluator but never initialized CUDA. The
          child is just as fresh (own session, own stage, scrubbed environment, the same driver); only
          the imports are shared. If the zygote cannot start or answer, the run falls back to spawn
          (RunReport.launch and .log say so).

Results come back as JSON lines (driver.py). A workload whose "start" line arrived but whose result
did not is the one in flight: TIMEOUT when we killed the process group, RUNTIME_ERROR when the process
died on its own. Workloads after it are SKIPPED. Results that arrived before are kept.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional

from .results import EvalResult, EvalStatus, HardwareInfo, RunReport

LAUNCH_MODES = ("zygote", "spawn")

REPO_ROOT = Path(__file__).resolve().parent.parent.parent


def scrubbed_env(extra_pythonpath: Optional[list[str]] = None) -> dict[str, str]:
    """The sandbox's allowlisted environment (one list for every process that runs untrusted code:
    solforge.sandbox.env), with this solforge first on PYTHONPATH."""
    from ..sandbox.env import sandbox_env

    return sandbox_env(extra_pythonpath=extra_pythonpath)


def write_problem(stage: Path, problem, workloads=None) -> None:
    stage.mkdir(parents=True, exist_ok=True)
    (stage / "definition.json").write_text(problem.definition.model_dump_json(indent=1))
    wls = workloads if workloads is not None else problem.workloads
    (stage / "workload.jsonl").write_text(
        "".join(w.workload.model_dump_json() + "\n" for w in wls))


def stage_candidate(stage: Path, problem, *, candidate=None, compile_result=None,
                    host_source: Optional[str] = None, job: Optional[dict] = None,
                    workloads=None) -> Path:
    """Write everything the driver needs into `stage` (created if needed)."""
    stage = Path(stage)
    write_problem(stage, problem, workloads)
    job = dict(job or {})
    job.setdefault("problem", problem.definition.name)
    if candidate is not None:
        cand = candidate.model_dump() if hasattr(candidate, "model_dump") else dict(candidate)
        (stage / "candidate.json").write_text(json.dumps(cand, indent=1))
    if compile_result is not None:
        compile_result.write_stage(stage)
    if host_source is not None:
        (stage / "host.py").write_text(host_source)
        job.setdefault("candidate_kind", "host")
    job.setdefault("candidate_kind", "cuda")
    (stage / "job.json").write_text(json.dumps(job, indent=1))
    return stage


def _expected_uuids(stage: Path) -> list[str]:
    job = json.loads((stage / "job.json").read_text())
    if job.get("workloads"):
        return list(job["workloads"])
    out = []
    for line in (stage / "workload.jsonl").read_text().splitlines():
        if line.strip():
            out.append(json.loads(line)["uuid"])
    return out


def default_launch() -> str:
    v = os.environ.get("SOLFORGE_EVAL_LAUNCH", "zygote").strip().lower() or "zygote"
    return v if v in LAUNCH_MODES else "zygote"


_ZYGOTES: dict = {}
_ZYGOTES_LOCK = threading.Lock()


def _zygote_for(python: str, extra_pythonpath: Optional[list[str]]):
    """The zygote for this interpreter and PYTHONPATH, started if needed (one per runner process)."""
    from .zygote import Zygote

    env = scrubbed_env(extra_pythonpath)
    key = (python, env["PYTHONPATH"])
    with _ZYGOTES_LOCK:
        z = _ZYGOTES.get(key)
        if z is not None and (z.error or not z.alive()):
            z.close()
            z = None
        if z is None:
            z = Zygote(python, env)
            _ZYGOTES[key] = z
    return z


def prestart(python: str = sys.executable, extra_pythonpath: Optional[list[str]] = None,
             wait: bool = False) -> dict:
    """Start the zygote ahead of the first candidate (its torch import then overlaps compiling).
    Returns its hello ({"ready", "preload_s", "os_threads", ...}) when wait, else {}."""
    z = _zygote_for(python, extra_pythonpath)
    if wait:
        z.ready()
        return dict(z.hello or {"ready": False, "error": z.error})
    return {}


def shutdown_zygotes() -> None:
    with _ZYGOTES_LOCK:
        for z in _ZYGOTES.values():
            z.close()
        _ZYGOTES.clear()


atexit.register(shutdown_zygotes)
# A runner forked from this process (multiprocessing's fork start method) must not use or close
# its parent's zygotes (their Popen objects are the parent's): it starts its own.
os.register_at_fork(after_in_child=_ZYGOTES.clear)


class _Spawned:
    """Popen as the loop below uses it (poll/wait/pid/returncode + a stdout file)."""

    module = "solforge.evaluate.driver"  # a benchmark can time another driver module here

    def __init__(self, python, stage, env, err):
        self.p = subprocess.Popen([python, "-m", self.module, str(stage)],
                                  cwd=stage, env=env, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=err, start_new_session=True)
        self.pid, self.stdout, self.note = self.p.pid, self.p.stdout, ""

    def poll(self):
        return self.p.poll()

    def wait(self):
        return self.p.wait()

    @property
    def returncode(self):
        return self.p.returncode


class _Forked:
    def __init__(self, child, read_fd: int):
        self.child, self.pid, self.stdout = child, child.pid, os.fdopen(read_fd, "rb")

    def poll(self):
        return self.child.poll()

    def wait(self):
        return self.child.wait()

    @property
    def returncode(self):
        return self.child.returncode

    @property
    def note(self):
        return self.child.note

    @property
    def rusage(self):
        return self.child.rusage


def host_cpu_ticks() -> Optional[tuple[int, int, int]]:
    """(busy, steal, all) clock ticks of the whole host since boot, from /proc/stat's "cpu" line
    (busy: user + nice + system + irq + softirq; steal: time the hypervisor gave this VM's CPUs to
    someone else); None where there is no /proc/stat."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    if len(v) < 8:
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
    return user + nice + system + irq + softirq, steal, sum(v[:8])


def host_cpu_seconds(before, after) -> dict:
    """CPU-seconds of the whole host between two host_cpu_ticks(): busy and stolen."""
    if not before or not after:
        return {}
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    return {"host_busy_cpu_s": round((after[0] - before[0]) / hz, 3),
            "host_steal_s": round((after[1] - before[1]) / hz, 3)}


def _launch(mode, python, stage, env_extra, extra_pythonpath, err, t_launch, log):
    """(process handle, mode actually used)."""
    if mode == "zygote":
        from .zygote import ZygoteError

        r, w = os.pipe()
        try:
            z = _zygote_for(python, extra_pythonpath)
            child = z.spawn(stage, w, err.fileno(), env={**(env_extra or {})}, t_launch=t_launch)
            os.close(w)
            return _Forked(child, r), "zygote"
        except (ZygoteError, OSError) as e:
            os.close(r)
            os.close(w)
            log.append(f"zygote unavailable, spawned instead: {e}"[:500])
    env = {**scrubbed_env(extra_pythonpath), **(env_extra or {}), "SOLFORGE_LAUNCH_T": repr(t_launch)}
    proc = _Spawned(python, stage, env, err)
    from .zygote import cpuset

    cpus = cpuset(env.get("SOLFORGE_EVAL_CPUSET"))
    if cpus:  # before the interpreter starts its threads (torch's come with its import, later)
        try:
            os.sched_setaffinity(proc.pid, cpus)
        except OSError as e:
            log.append(f"SOLFORGE_EVAL_CPUSET not applied: {e}")
    return proc, "spawn"


class OwnClock:
    """An evaluation's own time: wall time minus the spans the driver reported waiting to enter a
    shared GPU's sections ("wait" .. "waited" lines; gpu_share). Lanes queued behind each other's
    timing keep their limits; a candidate that hangs inside a section runs into them."""

    def __init__(self, now: float):
        self.t0, self.waited, self.since = now, 0.0, None

    def wait(self, now: float) -> None:
        if self.since is None:
            self.since = now

    def resume(self, now: float) -> None:
        if self.since is not None:
            self.waited += now - self.since
            self.since = None

    def own(self, now: float) -> float:
        """Seconds since t0 not spent waiting."""
        return now - self.t0 - self.waited - (now - self.since if self.since is not None else 0.0)


def run_stage(stage: Path, *, timeout_s: float = 300.0, workload_timeout_s: Optional[float] = None,
              python: str = sys.executable, extra_pythonpath: Optional[list[str]] = None,
              env: Optional[dict] = None, launch: Optional[str] = None,
              workloads: Optional[list[str]] = None, wall_cap_s: Optional[float] = None,
              return_at_done_bytes: Optional[int] = None) -> RunReport:
    """Start the driver on a staged directory (a fresh process: see `launch` above) and collect its
    results, whatever happens to it.

    `timeout_s` (the whole evaluation) and `workload_timeout_s` (one workload) count the evaluation's
    own time (OwnClock: waits for other lanes' GPU sections do not count); `wall_cap_s` (default
    `timeout_s`) bounds the plain wall time, whatever the driver reports.

    `env` adds to the scrubbed environment, e.g. {"CUDA_VISIBLE_DEVICES": "1"} to pin one GPU.
    `workloads`: evaluate only these uuids, in this order (rewrites the stage's job.json; screening).
    `return_at_done_bytes` (default settings.eval_return_at_done_bytes): once the driver says "done"
    having held at most this much GPU memory, return without waiting for its exit (its process
    group is killed and reaped in the background; the report then has no exit code and no CPU
    counters)."""
    stage = Path(stage).resolve()
    if workloads is not None:
        job = json.loads((stage / "job.json").read_text())
        job["workloads"] = list(workloads)
        (stage / "job.json").write_text(json.dumps(job, indent=1))
    expected = _expected_uuids(stage)
    problem = json.loads((stage / "job.json").read_text()).get("problem", "")
    err_path = stage / "driver.stderr"
    mode = launch or default_launch()
    if mode not in LAUNCH_MODES:
        raise ValueError(f"launch must be one of {LAUNCH_MODES}, not {mode!r}")
    t0 = time.monotonic()
    host0 = host_cpu_ticks()
    log: list[str] = []
    with open(err_path, "wb") as err:
        proc, mode = _launch(mode, python, stage, env, extra_pythonpath, err, time.time(), log)
        lines: list[dict] = []
        clock = OwnClock(t0)
        last_start: list = [None]  # own-clock reading at the latest "start" line
        t_first: list = [None]
        t_done: list = [None]
        if return_at_done_bytes is None:
            from .. import settings

            return_at_done_bytes = settings.get().eval_return_at_done_bytes
        released = threading.Event()   # "done" with little enough GPU memory: return at once

        def reader():
            for raw in proc.stdout:
                try:
                    obj = json.loads(raw)
                except ValueError:
                    log.append(raw.decode(errors="replace")[:500])
                    continue
                now = time.monotonic()
                if t_first[0] is None:
                    t_first[0] = now
                kind = obj.get("type")
                if kind == "wait":
                    clock.wait(now)
                    continue
                if kind == "waited":
                    clock.resume(now)
                    continue
                if kind == "start":
                    last_start[0] = clock.own(now)
                elif kind == "done":
                    t_done[0] = now
                lines.append(obj)
                peak = obj.get("gpu_reserved_peak") if kind == "done" else None
                if return_at_done_bytes and isinstance(peak, int) and 0 <= peak <= return_at_done_bytes:
                    released.set()

        th = threading.Thread(target=reader, daemon=True)
        th.start()
        killed, why = False, ""
        cap = max(timeout_s, wall_cap_s or 0.0)
        while proc.poll() is None:
            now = time.monotonic()
            own = clock.own(now)
            if own > timeout_s:
                killed, why = True, f"wall-clock limit of {timeout_s:.0f} s"
            elif now - t0 > cap:
                killed, why = True, f"wall-clock limit of {cap:.0f} s (waits for the GPU included)"
            elif workload_timeout_s and last_start[0] is not None and \
                    own - last_start[0] > workload_timeout_s:
                killed, why = True, f"workload limit of {workload_timeout_s:.0f} s"
            if killed:
                _kill_group(proc)
                break
            if released.wait(0.01):
                break
        t_exit = time.monotonic()
        if released.is_set() and not killed:
            # every result is in: the exit (the CUDA context's teardown) happens off the clock
            _kill_group(proc)
            threading.Thread(target=_reap, args=(proc, th), daemon=True).start()
        else:
            proc.wait()
            t_exit = time.monotonic()
            _reap(proc, th)   # anything the candidate left in its process group, the pipe
    if getattr(proc, "note", ""):
        log.append(proc.note)
    stderr_tail = err_path.read_text(errors="replace")[-4000:] if err_path.exists() else ""
    report = _assemble(problem, expected, lines, proc.returncode, killed, why, stderr_tail, log,
                       time.monotonic() - t0)
    report.launch = mode
    # the exit's counters (the zygote's wait4), else, returned at "done", the driver's own there
    done = next((o for o in reversed(lines) if o.get("type") == "done"), {})
    own = getattr(proc, "rusage", None) or (done.get("rusage") if isinstance(done.get("rusage"), dict)
                                            else None)
    report.phases = _phases(lines, t0, t_first[0], t_done[0], t_exit,
                            cpu={**(own or {}), **host_cpu_seconds(host0, host_cpu_ticks())})
    return report


def _phases(lines, t0, t_first, t_done, t_exit, cpu: Optional[dict] = None) -> dict:
    """The driver's phase seconds plus the runner's view (first line latency, teardown, total) and,
    under "cpu", what the process used (zygote children: the zygote's wait4, phases.rusage_dict) and
    the whole host's busy and stolen CPU-seconds meanwhile (host_cpu_seconds)."""
    ph = next((o for o in lines if o.get("type") == "phases"), None)
    out = {"seconds": dict(ph.get("seconds", {})) if ph else _finished_workloads(lines, t0, t_exit),
           "mode": ph.get("mode") if ph else None, "driver_s": ph.get("driver_s") if ph else None,
           "pid": ph.get("pid") if ph else None}
    if ph and ph.get("profile"):
        out["profile"] = ph["profile"]      # the driver's cProfile rows (job setting "cprofile")
    if t_done is not None:
        out["seconds"]["teardown"] = round(t_exit - t_done, 6)
    if t_first is not None:
        out["first_line_s"] = round(t_first - t0, 6)
    out["total_s"] = round(t_exit - t0, 6)
    if cpu:
        out["cpu"] = dict(cpu)
    return out


def _finished_workloads(lines, t0, t_exit) -> dict:
    """Without the driver's phases (killed, or died, before it wrote them): the phases of the
    workloads it finished, summed, and "unfinished": the rest of the run's time (start-up and the
    workload it was in when it ended), so a timed-out evaluation still says where its time went."""
    out: dict[str, float] = {}
    for o in lines:
        ph = (o.get("extra") or {}).get("phases") if o.get("type") == "result" else None
        for k, v in (ph or {}).items():
            if isinstance(v, (int, float)):
                out[k] = out.get(k, 0.0) + float(v)
    done = out.pop("workload", 0.0)
    if out or done:
        out["unfinished"] = max(0.0, (t_exit - t0) - done)
    return {k: round(v, 6) for k, v in out.items()}


def _reap(proc, reader: threading.Thread) -> None:
    """A driver's end: its exit (awaited), its process group killed, its pipe closed (in the
    background for a driver released at "done")."""
    try:
        proc.wait()
    except Exception:  # noqa: BLE001 - nothing is waiting for this answer
        pass
    _kill_group(proc, quiet=True)
    reader.join(timeout=5)
    try:
        proc.stdout.close()
    except OSError:
        pass


def _kill_group(proc, quiet: bool = False) -> None:
    """SIGKILL the driver's process group (it is a session leader: its pid is the group id)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        if quiet:
            return
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _assemble(problem, expected, lines, rc, killed, why, stderr_tail, log, wall) -> RunReport:
    hw = None
    results: dict[str, EvalResult] = {}
    in_flight = None
    for obj in lines:
        t = obj.get("type")
        if t == "hardware":
            hw = HardwareInfo.from_dict({k: v for k, v in obj.items() if k != "type"})
        elif t == "start":
            in_flight = obj.get("uuid")
        elif t == "result":
            r = EvalResult.from_json({k: v for k, v in obj.items() if k != "type"})
            results[r.workload_uuid] = r
            if in_flight == r.workload_uuid:
                in_flight = None
    if rc is not None and rc < 0:
        try:
            death = f"killed by signal {signal.Signals(-rc).name}"
        except ValueError:
            death = f"killed by signal {-rc}"
    else:
        death = f"exit code {rc}"
    tail = stderr_tail.strip().splitlines()[-3:] if stderr_tail.strip() else []
    out = []
    after_failure = False
    for u in expected:
        if u in results:
            out.append(results[u])
            continue
        if u == in_flight:
            if killed:
                out.append(EvalResult(u, EvalStatus.TIMEOUT, problem=problem,
                                      message=f"killed: {why} (process group killed)"))
            else:
                status = EvalStatus.OOM if "out of memory" in stderr_tail.lower() else \
                    EvalStatus.RUNTIME_ERROR
                out.append(EvalResult(u, status, problem=problem,
                                      message=f"the evaluator process died ({death}): "
                                              + " | ".join(tail)[-800:]))
            after_failure = True
            continue
        reason = "the candidate's process was killed" if killed else f"the process ended ({death})"
        if not after_failure and not killed and rc == 0:
            reason = "the driver did not report it"
        out.append(EvalResult(u, EvalStatus.SKIPPED, problem=problem,
                              message=f"not evaluated: {reason}"
                                      + (f"; {' | '.join(tail)[-400:]}" if tail and not killed else "")))
    return RunReport(problem=problem, results=out, hardware=hw, wall_s=wall, exit_code=rc,
                     killed=killed, stderr_tail=stderr_tail, log=log)
