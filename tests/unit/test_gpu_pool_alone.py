"""GpuPool.alone: every lane of one GPU for one evaluation (an evaluation that ran out of memory
beside other lanes runs again alone). Real threads, real flocks in a temporary lock directory and a
second process holding a lane."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from solforge.orchestrate.gpus import GpuPool, SlotDeadline


@pytest.fixture
def lock_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SOLFORGE_GPU_LOCK_DIR", str(tmp_path / "locks"))
    return tmp_path / "locks"


def test_alone_waits_for_the_lanes_and_keeps_them_from_others(lock_dir):
    pool = GpuPool(["0", "1"], lanes=2)
    busy = pool.acquire(prefer="0")
    events = []

    def alone():
        with pool.alone("0", label="alone") as slot:
            events.append(("alone in", time.monotonic()))
            assert slot.gpu == "0"
            time.sleep(0.3)
        events.append(("alone out", time.monotonic()))

    t = threading.Thread(target=alone)
    t.start()
    time.sleep(0.2)
    assert not events                      # one lane of GPU 0 is still held
    other = pool.acquire(prefer="1")       # another GPU is not held up
    pool.release(other)
    got = []
    late = threading.Thread(target=lambda: got.append((pool.acquire(prefer="0"), time.monotonic())))
    late.start()
    time.sleep(0.2)
    assert not got                         # GPU 0's free lane is kept for the waiting alone()
    pool.release(busy)
    t.join(5)
    late.join(5)
    assert [e[0] for e in events] == ["alone in", "alone out"]
    assert got and got[0][1] >= events[1][1] - 0.01   # the late one only after alone() ended
    pool.release(got[0][0])
    assert sorted(pool._free) == sorted([("0", 0), ("0", 1), ("1", 0), ("1", 1)])


def test_alone_waits_for_a_lane_another_process_holds(lock_dir):
    lock_dir.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({str(lock_dir / '0.lane1.lock')!r}, os.O_RDWR | os.O_CREAT, 0o666)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('held', flush=True)\n"
        "time.sleep(0.8)\n")], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    pool = GpuPool(["0"], lanes=2)
    t0 = time.monotonic()
    with pool.alone("0"):
        waited = time.monotonic() - t0
    holder.wait(5)
    assert waited > 0.3
    with pool.alone("0"):                  # handed back: at once now
        pass


def test_alone_stops_at_the_deadline(lock_dir):
    pool = GpuPool(["0"], lanes=2)
    busy = pool.acquire()
    pool.deadline = time.monotonic() + 0.2
    with pytest.raises(SlotDeadline):
        with pool.alone("0"):
            pass
    pool.release(busy)
    assert "0" not in pool._draining
