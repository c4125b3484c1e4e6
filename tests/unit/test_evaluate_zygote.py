"""The zygote launch (solforge/evaluate/zygote.py through runner.run_stage): each candidate still gets
its own process, session, stage, environment without secrets, wall-clock limits; faults and hangs are
recorded and the next candidate runs. Real processes, real forks, host candidates on the CPU."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "adversarial"))
import harness  # noqa: E402

from solforge.evaluate import runner  # noqa: E402
from solforge.evaluate.runner import run_stage, stage_candidate  # noqa: E402

WL = ["adv-4k"]
HONEST = ("import torch\n"
          "def run(inputs, outputs, ctx):\n"
          "    z = inputs['x']\n"
          "    for _ in range(64):\n"
          "        z = torch.sin(z) + inputs['y']\n"
          "    outputs['out'].copy_(z)\n")


def _body(code: str) -> str:
    """A host candidate that runs `code` first, then computes the honest answer."""
    return "import os, sys, time\n" + HONEST.replace(
        "def run(inputs, outputs, ctx):\n",
        "def run(inputs, outputs, ctx):\n" + "".join("    " + ln + "\n" for ln in code.splitlines()))


@pytest.fixture(scope="module")
def problem():
    from solforge.problem import load_problem_dir

    return load_problem_dir(harness.PROBLEM_DIR)


@pytest.fixture(scope="module")
def pypath(tmp_path_factory):
    # A PYTHONPATH of our own: this module's zygote is not shared with other tests' runs, and its
    # environment is the one set below (a fake secret in the parent).
    os.environ["SOLFORGE_TEST_API_KEY"] = "must-not-leak"
    d = tmp_path_factory.mktemp("zygote_path")
    hello = runner.prestart(extra_pythonpath=[str(d)], wait=True)
    assert hello.get("ready"), hello
    assert hello["cuda"] == "uninitialized"
    yield [str(d)]
    os.environ.pop("SOLFORGE_TEST_API_KEY", None)


def _run(problem, tmp_path, name, source, pypath, **kw):
    st = stage_candidate(tmp_path / name, problem, host_source=source,
                         job={"allow_torch": True, "workloads": WL})
    return run_stage(st, extra_pythonpath=pypath, launch="zygote", **kw)


def test_honest_candidate_passes_with_phases(problem, tmp_path, pypath):
    rep = _run(problem, tmp_path, "honest", HONEST, pypath, timeout_s=120)
    r = rep.results[0]
    assert rep.launch == "zygote" and rep.phases["mode"] in ("zygote", "zygote-spare"), rep.log
    assert r.status.value == "passed", r.message + rep.stderr_tail
    secs = rep.phases["seconds"]
    for k in ("launch", "imports", "load", "cuda_init", "reference", "checks", "teardown"):
        assert k in secs, secs
    # torch came preloaded: the child's import phase is a dictionary lookup, not an import
    assert secs["imports"] < 0.5, secs
    assert "phases" in r.extra and r.extra["phases"]["workload"] > 0



def test_the_runner_returns_at_done_and_the_driver_is_ended(problem, tmp_path, pypath):
    """With every result in ("done") and little GPU memory held, the runner returns without waiting
    for the driver's exit (a CUDA context's teardown); the driver's group is killed and reaped
    behind it. With return_at_done_bytes 0 it waits and has the exit code."""
    rep = _run(problem, tmp_path, "at_done", HONEST, pypath, timeout_s=120,
               return_at_done_bytes=8 << 30)
    assert rep.results[0].status.value == "passed", rep.results[0].message + rep.stderr_tail
    assert rep.exit_code is None and rep.phases["seconds"]["teardown"] < 0.05, rep.phases
    pid = rep.phases["pid"]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"driver {pid} still there 10 s after its results")
    waited = _run(problem, tmp_path, "wait_exit", HONEST, pypath, timeout_s=120, return_at_done_bytes=0)
    assert waited.results[0].status.value == "passed" and waited.exit_code == 0


def test_cprofile_setting_reports_the_python_time_of_the_workload_loop(problem, tmp_path, pypath):
    """Job setting "cprofile": N puts the N functions of most own time in the phases (benchmarks'
    view of what a phase is made of); without it there are none."""
    st = stage_candidate(tmp_path / "prof", problem, host_source=HONEST,
                         job={"allow_torch": True, "workloads": WL, "settings": {"cprofile": 5}})
    rep = run_stage(st, extra_pythonpath=pypath, launch="zygote", timeout_s=120)
    assert rep.results[0].status.value == "passed", rep.results[0].message + rep.stderr_tail
    rows = rep.phases["profile"]
    assert 0 < len(rows) <= 5 and all(set(r) == {"func", "calls", "own_s", "cum_s"} for r in rows)
    assert [r["own_s"] for r in rows] == sorted((r["own_s"] for r in rows), reverse=True)
    assert any("evaluate_workload" in r["func"] or r["cum_s"] > 0 for r in rows)
    plain = _run(problem, tmp_path, "noprof", HONEST, pypath, timeout_s=120)
    assert "profile" not in plain.phases

def test_each_candidate_is_a_fresh_session_without_secrets(problem, tmp_path, pypath):
    probe = _body(
        "leak = [k for k in os.environ if 'API_KEY' in k]\n"
        "socks = []\n"
        "for f in os.listdir('/proc/self/fd'):\n"
        "    try:\n"
        "        socks.append(os.readlink(f'/proc/self/fd/{f}'))\n"
        "    except OSError:\n"
        "        pass\n"
        "socks = [s for s in socks if s.startswith('socket:')]\n"
        "if leak or socks or os.getsid(0) != os.getpid() or os.environ.get('CUDA_VISIBLE_DEVICES') != '7':\n"
        "    raise RuntimeError(f'ISOLATION leak={leak} socks={socks} sid={os.getsid(0)} pid={os.getpid()}')\n"
        # torch is preloaded in the zygote: a mark left on it must not reach the next candidate
        "import torch as T\n"
        "if getattr(T, '_adv_mark', os.getpid()) != os.getpid():\n"
        "    raise RuntimeError('ISOLATION state survived from another candidate')\n"
        "T._adv_mark = os.getpid()\n")
    pids = set()
    for i in range(2):
        rep = _run(problem, tmp_path, f"probe{i}", probe, pypath, timeout_s=120,
                   env={"CUDA_VISIBLE_DEVICES": "7"})
        r = rep.results[0]
        assert r.status.value == "passed", r.message + rep.stderr_tail
        pids.add(rep.phases["pid"])
    assert len(pids) == 2 and None not in pids
    assert os.environ.get("SOLFORGE_TEST_API_KEY") == "must-not-leak"  # the parent still has it


def test_next_candidate_runs_in_the_spare_made_ahead(problem, tmp_path, pypath):
    """After a request the zygote forks a spare child for the same slot environment (its CUDA context
    made while the current candidate runs); the next request with that environment is served by it:
    a new process, a fresh session, no socket left open, the slot's environment, and only once."""
    probe = _body(
        "socks = [os.readlink(f'/proc/self/fd/{f}') for f in os.listdir('/proc/self/fd')\n"
        "         if os.path.exists(f'/proc/self/fd/{f}')]\n"
        "socks = [s for s in socks if s.startswith('socket:')]\n"
        "if socks or os.getsid(0) != os.getpid() or os.environ.get('CUDA_VISIBLE_DEVICES') != '5':\n"
        "    raise RuntimeError(f'ISOLATION socks={socks} sid={os.getsid(0)} pid={os.getpid()}')\n")
    modes, pids = [], set()
    for i in range(3):
        rep = _run(problem, tmp_path, f"spare{i}", probe, pypath, timeout_s=120,
                   env={"CUDA_VISIBLE_DEVICES": "5", "SOLFORGE_EVAL_SPARE": "1"})
        r = rep.results[0]
        assert r.status.value == "passed", r.message + rep.stderr_tail
        modes.append(rep.phases["mode"])
        pids.add(rep.phases["pid"])
    assert modes[1:] == ["zygote-spare", "zygote-spare"], modes
    assert len(pids) == 3
    # another slot's environment is never served by this slot's spare
    rep = _run(problem, tmp_path, "other_slot", probe.replace("'5'", "'6'"), pypath, timeout_s=120,
               env={"CUDA_VISIBLE_DEVICES": "6", "SOLFORGE_EVAL_SPARE": "1"})
    assert rep.results[0].status.value == "passed" and rep.phases["mode"] == "zygote", rep.phases
    # a slot that asks for no spare (the default) gets a child forked per request
    for i in range(2):
        rep = _run(problem, tmp_path, f"nospare{i}", probe, pypath, timeout_s=120,
                   env={"CUDA_VISIBLE_DEVICES": "5", "SOLFORGE_EVAL_SPARE": "0"})
        assert rep.results[0].status.value == "passed" and rep.phases["mode"] == "zygote"


def test_hang_is_killed_and_next_candidate_runs(problem, tmp_path, pypath):
    # The hang also leaves a grandchild in its process group: the kill takes the whole group.
    hang = _body("import subprocess\n"
                 "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
                 "time.sleep(600)")
    t0 = time.monotonic()
    rep = _run(problem, tmp_path, "hang", hang, pypath, timeout_s=60, workload_timeout_s=3)
    assert time.monotonic() - t0 < 30
    r = rep.results[0]
    assert rep.killed and r.status.value == "timeout", (r.status, r.message)
    rep2 = _run(problem, tmp_path, "after_hang", HONEST, pypath, timeout_s=120)
    assert rep2.results[0].status.value == "passed", rep2.results[0].message


def test_waiting_for_other_lanes_does_not_count_against_the_limits(problem, tmp_path, pypath):
    # Another lane holds the GPU alone (its timing) for longer than this candidate's workload limit:
    # the wait is reported ("wait" .. "waited") and does not count, so the honest candidate passes;
    # the plain wall cap still bounds it.
    import threading

    from solforge.evaluate import gpu_share

    lock = str(tmp_path / "gpu.lock")
    entered, release = threading.Event(), threading.Event()

    def other_lane():
        with gpu_share.held(lock, exclusive=True):
            entered.set()
            release.wait(30)

    th = threading.Thread(target=other_lane)
    th.start()
    entered.wait(10)
    threading.Timer(8.0, release.set).start()
    t0 = time.monotonic()
    rep = _run(problem, tmp_path, "queued", HONEST, pypath, timeout_s=5, workload_timeout_s=3,
               wall_cap_s=60, env={gpu_share.ENV: lock})
    th.join()
    assert time.monotonic() - t0 >= 7.5  # it really waited behind the other lane
    r = rep.results[0]
    assert not rep.killed and r.status.value == "passed", (r.status, r.message, rep.stderr_tail)
    assert rep.phases["seconds"].get("gpu_wait", 0) >= 5, rep.phases["seconds"]


def test_own_clock_pauses_while_waiting():
    c = runner.OwnClock(100.0)
    c.wait(101.0)
    assert c.own(105.0) == 1.0            # waiting: the clock stands
    c.resume(106.0)
    assert c.own(108.0) == 3.0            # 8 s of wall, 5 of them waiting
    c.resume(109.0)                       # a stray "waited" changes nothing
    assert c.own(110.0) == 5.0


def test_crash_is_recorded_and_next_candidate_runs(problem, tmp_path, pypath):
    crash = _body("import ctypes\nctypes.string_at(0)")  # SIGSEGV in the child
    rep = _run(problem, tmp_path, "crash", crash, pypath, timeout_s=60)
    r = rep.results[0]
    assert r.status.value == "runtime_error" and "SIGSEGV" in r.message, r.message
    rep2 = _run(problem, tmp_path, "after_crash", HONEST, pypath, timeout_s=120)
    assert rep2.results[0].status.value == "passed", rep2.results[0].message


def test_killing_the_zygote_costs_only_that_candidate(problem, tmp_path, pypath):
    # The candidate kills its parent (the zygote) and then hangs: its runner must still end it, and
    # the next run gets a new zygote.
    evil = _body("import signal\nos.kill(os.getppid(), signal.SIGKILL)\ntime.sleep(600)")
    t0 = time.monotonic()
    rep = _run(problem, tmp_path, "evil", evil, pypath, timeout_s=60)
    assert time.monotonic() - t0 < 30
    assert rep.results[0].status.value in ("runtime_error", "timeout"), rep.results[0].message
    rep2 = _run(problem, tmp_path, "after_evil", HONEST, pypath, timeout_s=120)
    assert rep2.launch == "zygote" and rep2.results[0].status.value == "passed", \
        rep2.results[0].message + " ".join(rep2.log)


def test_falls_back_to_spawn_when_no_zygote(problem, tmp_path, monkeypatch):
    from solforge.evaluate.zygote import ZygoteError

    def broken(*a, **k):
        raise ZygoteError("test: no zygote")

    monkeypatch.setattr(runner, "_zygote_for", broken)
    st = stage_candidate(tmp_path / "fallback", problem, host_source=HONEST,
                         job={"allow_torch": True, "workloads": WL})
    rep = run_stage(st, timeout_s=180, launch="zygote")
    assert rep.launch == "spawn" and any("zygote unavailable" in m for m in rep.log)
    assert rep.results[0].status.value == "passed", rep.results[0].message + rep.stderr_tail
    assert rep.phases["seconds"]["imports"] > 0


def test_slot_sets_the_childs_cpu_threads(problem, tmp_path, pypath, monkeypatch):
    """The GPU slot's thread count reaches a forked child (OMP_NUM_THREADS alone would not: the
    zygote's OpenMP runtime read the environment before the fork)."""
    from solforge.orchestrate.gpus import GpuPool, eval_threads

    monkeypatch.delenv("SOLFORGE_EVAL_THREADS", raising=False)
    assert 1 <= eval_threads(2) <= eval_threads(1) <= 8
    monkeypatch.setenv("SOLFORGE_EVAL_THREADS", "3")
    pool = GpuPool(["7"], cross_process=False)
    with pool.slot() as slot:
        env = slot.env
    assert env == {"CUDA_VISIBLE_DEVICES": "7", "OMP_NUM_THREADS": "3", "SOLFORGE_EVAL_THREADS": "3"}
    probe = _body("import torch as T\n"
                  "if T.get_num_threads() != int(os.environ['SOLFORGE_EVAL_THREADS']):\n"
                  "    raise RuntimeError(f'THREADS {T.get_num_threads()}')\n")
    for n in ("3", "1"):
        rep = _run(problem, tmp_path, f"threads{n}", probe, pypath, timeout_s=120,
                   env={**env, "OMP_NUM_THREADS": n, "SOLFORGE_EVAL_THREADS": n})
        assert rep.results[0].status.value == "passed", rep.results[0].message + rep.stderr_tail


def test_child_finds_the_profilers_lazy_imports_done(problem, tmp_path, pypath):
    """torch.profiler's first session imports torch._inductor (and torch._dynamo, sympy) through
    torch's lazy __getattr__; in a zygote child they are already there, so the first timed session
    does not pay for them. The candidate looks before anything in the child could have imported them
    (its module is loaded before the first workload is timed)."""
    probe = ("import sys\n"
             "_MISSING = [m for m in ('torch._inductor', 'torch._dynamo', 'sympy') if m not in sys.modules]\n"
             + _body("if _MISSING:\n    raise RuntimeError(f'NOT PRELOADED {_MISSING}')\n"))
    assert "torch._inductor" not in runner.prestart(extra_pythonpath=pypath,
                                                    wait=True)["optional_failed"]
    rep = _run(problem, tmp_path, "lazy", probe, pypath, timeout_s=120)
    assert rep.launch == "zygote", rep.log
    assert rep.results[0].status.value == "passed", rep.results[0].message + rep.stderr_tail


def test_child_cpu_seconds_tell_working_from_waiting(problem, tmp_path, pypath):
    """The zygote reports each child's rusage (wait4) and the runner the host's CPU-seconds while it
    ran; both reach the stored eval_phases. A candidate that computes for 0.6 s costs ~0.6 CPU-seconds
    more than one that sleeps for 0.6 s, although both take about as long."""
    from solforge.evaluate.phase_totals import flat_seconds

    busy = _body("t = time.process_time()\nwhile time.process_time() - t < 0.6:\n    pass\n")
    idle = _body("time.sleep(0.6)\n")
    cpu = {}
    for name, src in (("busy", busy), ("idle", idle)):
        rep = _run(problem, tmp_path, f"cpu_{name}", src, pypath, timeout_s=120)
        assert rep.results[0].status.value == "passed", rep.results[0].message + rep.stderr_tail
        c = rep.phases["cpu"]
        assert c["user_s"] >= 0 and c["sys_s"] >= 0 and c["nvcsw"] >= 0 and c["nivcsw"] >= 0, c
        flat = flat_seconds(rep.phases)
        assert flat["cpu_user"] == pytest.approx(c["user_s"], abs=1e-6)
        assert flat["cpu_sys"] == pytest.approx(c["sys_s"], abs=1e-6)
        if os.path.exists("/proc/stat"):
            assert flat["host_busy_cpu"] >= 0 and flat["host_steal"] >= 0, flat
        cpu[name] = c["user_s"] + c["sys_s"]
    assert cpu["busy"] >= 0.6, cpu
    assert cpu["busy"] - cpu["idle"] >= 0.3, cpu


def test_slot_pins_the_child_and_asks_for_its_wait_mode(problem, tmp_path, pypath, monkeypatch):
    """SOLFORGE_EVAL_PIN=split gives each GPU slot its own CPUs and the child (forked or spawned) runs
    on those only; SOLFORGE_EVAL_SYNC=blocking reaches the child, which without a GPU reports that it
    could not apply it and evaluates as before."""
    from solforge.orchestrate.gpus import GpuPool, eval_cpusets

    monkeypatch.delenv("SOLFORGE_EVAL_PIN", raising=False)
    assert eval_cpusets(2) == ["", ""]
    monkeypatch.setenv("SOLFORGE_EVAL_PIN", "split")
    monkeypatch.setenv("SOLFORGE_EVAL_SYNC", "blocking")
    allowed = sorted(os.sched_getaffinity(0))
    sets = eval_cpusets(2)
    if len(allowed) >= 2:
        a, b = ({int(c) for c in s.split(",")} for s in sets)
        assert a and b and not (a & b) and (a | b) <= set(allowed)
    pool = GpuPool(["7", "8"], cross_process=False)
    with pool.slot(prefer="8") as slot:
        env = slot.env
    assert env["SOLFORGE_EVAL_SYNC"] == "blocking"
    assert env.get("SOLFORGE_EVAL_CPUSET", "") == sets[1]
    want = allowed[-1]  # one CPU, so the check below cannot pass by accident
    probe = _body(f"if os.sched_getaffinity(0) != {{{want}}}:\n"
                  "    raise RuntimeError(f'PINNED {os.sched_getaffinity(0)}')\n")
    env = {**env, "SOLFORGE_EVAL_CPUSET": str(want)}
    rep = _run(problem, tmp_path, "pinned", probe, pypath, timeout_s=120, env=env)
    assert rep.launch == "zygote" and rep.results[0].status.value == "passed", \
        rep.results[0].message + rep.stderr_tail
    import torch

    if not torch.cuda.is_available():
        assert "SOLFORGE_EVAL_SYNC not applied" in rep.stderr_tail, rep.stderr_tail
    st = stage_candidate(tmp_path / "pinned_spawn", problem, host_source=probe,
                         job={"allow_torch": True, "workloads": WL})
    rep = run_stage(st, timeout_s=180, launch="spawn", env=env)
    assert rep.launch == "spawn" and rep.results[0].status.value == "passed", \
        rep.results[0].message + rep.stderr_tail


def test_waiting_for_another_lanes_timing_is_its_own_phase(problem, tmp_path, pypath):
    """Lanes sharing one GPU: while another process holds the GPU alone (it times), an evaluation
    waits to start its correctness work; those seconds are `gpu_wait`, not `checks`."""
    import threading

    from solforge.evaluate import gpu_share

    lock = str(tmp_path / "gpu0.share")
    taken, hold_s = threading.Event(), 3.0

    def other_lane():
        with gpu_share.held(lock, exclusive=True):
            taken.set()
            time.sleep(hold_s)

    t = threading.Thread(target=other_lane)
    t.start()
    assert taken.wait(10)
    rep = _run(problem, tmp_path, "waits", HONEST, pypath, timeout_s=120,
               env={gpu_share.ENV: lock})
    t.join()
    r = rep.results[0]
    assert r.status.value == "passed", r.message + rep.stderr_tail
    secs = rep.phases["seconds"]
    assert secs.get("gpu_wait", 0) > hold_s - 1.5, secs
    assert secs["checks"] < hold_s - 1.5, secs  # the wait is not counted twice


def test_descriptors_a_childs_setup_opened_survive_the_drivers_sweep():
    """A spare's CUDA context (or cuInit for the slot's wait mode) opens device files before the
    driver runs; the driver's sweep of inherited descriptors must keep them, or the context dies at
    its first launch. Here a plain file stands in for the device file, in a forked child."""
    from solforge.evaluate.zygote import _close_others, _is_open, _open_fds, _opened_by

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit code
        code = 3
        try:
            keep = _open_fds()
            fd, opened = _opened_by(lambda: os.open(os.devnull, os.O_RDONLY))
            stray = os.open(os.devnull, os.O_RDONLY)          # opened later: not kept
            _close_others(keep | opened)
            code = 0 if opened == {fd} and _is_open(fd) and not _is_open(stray) else 1
        finally:
            os._exit(code)
    os.close(r)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
