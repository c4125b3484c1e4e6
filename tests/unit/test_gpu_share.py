"""Evaluations that share a GPU: correctness side by side, timing alone (solforge.evaluate.gpu_share),
across real processes holding a real lock file."""
import multiprocessing as mp
import os
import time

from solforge.evaluate import gpu_share


def _hold(path, exclusive, start, secs, log):
    os.environ[gpu_share.ENV] = path
    time.sleep(start)
    with (gpu_share.alone() if exclusive else gpu_share.shared()):
        t0 = time.time()
        time.sleep(secs)
        log.put(("alone" if exclusive else "shared", t0, time.time()))


def _run(tmp_path, plan):
    ctx = mp.get_context("fork")
    log = ctx.Queue()
    procs = [ctx.Process(target=_hold, args=(str(tmp_path / "gpu.lock"), ex, st, secs, log))
             for ex, st, secs in plan]
    for p in procs:
        p.start()
    for p in procs:
        p.join(20)
    return [log.get(timeout=5) for _ in procs]


def test_a_measurement_waits_for_shared_work_and_shared_work_overlaps(tmp_path):
    got = _run(tmp_path, [(False, 0.0, 0.6), (False, 0.0, 0.6), (True, 0.2, 0.3), (False, 0.35, 0.1)])
    shared = sorted(g for g in got if g[0] == "shared")
    alone = next(g for g in got if g[0] == "alone")
    a, b = shared[0], shared[1]
    assert a[1] < b[2] and b[1] < a[2]               # the first two ran side by side
    for s in shared:                                 # nothing shared overlaps the measurement
        assert s[2] <= alone[1] + 0.02 or s[1] >= alone[2] - 0.02, (s, alone)
    late = shared[2]                                 # came after the measurement asked: waits for it
    assert late[1] >= alone[2] - 0.02, (late, alone)


def test_without_the_variable_nothing_is_locked(tmp_path, monkeypatch):
    monkeypatch.delenv(gpu_share.ENV, raising=False)
    with gpu_share.alone(), gpu_share.alone():       # nested: no lock, no deadlock
        pass
    assert not list(tmp_path.iterdir())


def _timed_alone(path, since_ns, started, log):
    os.environ[gpu_share.ENV] = path
    os.environ[gpu_share.SINCE_ENV] = str(since_ns)
    started.put(os.getpid())
    with gpu_share.alone():
        log.put((since_ns, time.time()))
        time.sleep(0.05)


def test_the_oldest_waiting_process_times_first(tmp_path):
    """Four processes wait for the timing section while this one holds it, the youngest first. The
    first, alone in line then, holds the gate; the three after it get the section oldest first
    (without the order, whoever reached the gate went first: lanes took turns a workload each and
    long evaluations all ended together, late)."""
    path = str(tmp_path / "gpu.lock")
    os.environ[gpu_share.ENV] = path
    ctx = mp.get_context("fork")
    log, started = ctx.Queue(), ctx.Queue()
    try:
        with gpu_share.alone():
            procs = []
            for since in (400, 300, 200, 100):       # the youngest starts waiting first
                p = ctx.Process(target=_timed_alone, args=(path, since, started, log))
                p.start()
                started.get(timeout=10)
                time.sleep(0.2)                      # it is at the queue before the next one starts
                procs.append(p)
        for p in procs:
            p.join(20)
        order = [log.get(timeout=5)[0] for _ in procs]
    finally:
        os.environ.pop(gpu_share.ENV, None)
    assert order == [400, 100, 200, 300], order
    assert not list((tmp_path / "gpu.lock.queue").iterdir())    # every ticket gone


def test_a_dead_process_ticket_does_not_block(tmp_path, monkeypatch):
    path = str(tmp_path / "gpu.lock")
    queue = tmp_path / "gpu.lock.queue"
    queue.mkdir()
    dead = mp.get_context("fork").Process(target=time.sleep, args=(0,))
    dead.start()
    dead.join()
    (queue / f"{1:020d}-{dead.pid}").touch()        # older than anyone, its process gone
    monkeypatch.setenv(gpu_share.ENV, path)
    t0 = time.time()
    with gpu_share.alone():
        pass
    assert time.time() - t0 < 2
    assert not list(queue.iterdir())


def _evaluation(path, since_ns, plan, log):
    """An evaluation's sections in order: ("alone" | "shared", seconds)."""
    os.environ[gpu_share.ENV] = path
    os.environ[gpu_share.SINCE_ENV] = str(since_ns)
    for kind, secs in plan:
        with (gpu_share.alone() if kind == "alone" else gpu_share.shared()):
            if kind == "alone":
                log.put((since_ns, time.time()))
            time.sleep(secs)


def _alone_order(tmp_path, monkeypatch, hold_s, older_shared_s):
    """An older evaluation times, does its next workload's correctness work (shared), and times
    again; a younger one asks for the timing section while the older one times the first time.
    The order in which their timing sections ran."""
    monkeypatch.setenv("SOLFORGE_GPU_SHARE_HOLD_S", str(hold_s))
    path = str(tmp_path / "gpu.lock")
    ctx = mp.get_context("fork")
    log = ctx.Queue()
    older = ctx.Process(target=_evaluation, args=(path, 100, [("alone", 0.3), ("shared", older_shared_s),
                                                             ("alone", 0.1)], log))
    younger = ctx.Process(target=_evaluation, args=(path, 200, [("alone", 0.1)], log))
    older.start()
    time.sleep(0.15)                                 # the older one is timing
    younger.start()
    for p in (older, younger):
        p.join(20)
    return [log.get(timeout=5)[0] for _ in range(3)]


def test_an_older_evaluation_between_its_timing_sections_keeps_its_turn(tmp_path, monkeypatch):
    """Oldest first across an evaluation's sections, not only among processes waiting at the same
    instant: while the older one does its next workload's correctness work, the younger waits for
    it rather than timing in between (lanes advancing a workload each in lockstep ended none of
    three slow evaluations within 380 s on an H200)."""
    assert _alone_order(tmp_path, monkeypatch, hold_s=30, older_shared_s=0.5) == [100, 100, 200]


def test_the_wait_for_an_older_evaluation_is_bounded(tmp_path, monkeypatch):
    """An older evaluation's long shared work (a reference's slow input generator) holds a younger
    one's timing back for gpu_share_hold_s at most, then the younger one times in between."""
    assert _alone_order(tmp_path, monkeypatch, hold_s=0.2, older_shared_s=1.5) == [100, 200, 100]


def test_a_lock_held_by_path_leaves_no_mark(tmp_path, monkeypatch):
    """A long-lived holder (the optimize process running an evaluation alone, a baseline lease)
    names the lock file: it is no evaluation between workloads, and younger ones do not wait for it."""
    monkeypatch.delenv(gpu_share.ENV, raising=False)
    path = str(tmp_path / "gpu.lock")
    with gpu_share.alone(path):
        pass
    assert not list((tmp_path / "gpu.lock.active").iterdir())
    monkeypatch.setenv(gpu_share.ENV, path)
    with gpu_share.alone():
        pass
    assert [t.name.rsplit("-", 1)[1] for t in (tmp_path / "gpu.lock.active").iterdir()] == [str(os.getpid())]


def test_an_exited_process_not_yet_reaped_is_not_alive():
    """A lane's evaluation that has exited but whose parent has not reaped it yet (a zombie) holds
    no one back: it is not alive."""
    from solforge.procs import pid_alive

    pid = os.fork()
    if pid == 0:
        os._exit(0)
    try:
        deadline = time.time() + 10
        while pid_alive(pid) and time.time() < deadline:
            time.sleep(0.01)
        assert not pid_alive(pid)
        assert os.waitpid(pid, os.WNOHANG)[0] == pid      # it was a zombie: this reaps it
    finally:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    assert pid_alive(os.getpid())
