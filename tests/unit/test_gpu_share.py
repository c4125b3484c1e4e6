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
