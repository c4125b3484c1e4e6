"""Several evaluations on one GPU, each timing it alone.

Evaluator processes that share a GPU (a coverage sweep's lanes) run their correctness work side by
side, but a timing taken while another process's kernels run is not the kernel's time. With
$SOLFORGE_GPU_SHARE naming a lock file, every process holds that file shared around its correctness
work and exclusively around its timing (the timed calls, the re-check after them, the caching
probe), so the GPU is quiet while anyone times. Without the variable both are no-ops.

Linux flock gives a waiting exclusive locker no priority over new shared lockers; a gate file fixes
that: every locker passes the gate for an instant, and
an exclusive one keeps it until it holds the lock, so the others drain and nobody new starts. No
section is nested in another (a process never waits at the gate while it holds the lock).
"""

from __future__ import annotations

import contextlib
import fcntl
import os

ENV = "SOLFORGE_GPU_SHARE"


@contextlib.contextmanager
def held(path: str, exclusive: bool):
    """The lock file `path` held shared or exclusively, through the gate (a no-op without a path).
    Also the baseline scheduler's lease on a GPU (solforge.baselines.plan.gpu_lease)."""
    if not path:
        yield
        return
    with open(path, "a+") as lock, open(path + ".gate", "a+") as gate:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _held(exclusive: bool, path: str = ""):
    return held(path or os.environ.get(ENV, "").strip(), exclusive)


def shared():
    """Around GPU work that others may overlap (inputs, reference, correctness calls)."""
    return _held(False)


def alone(path: str = ""):
    """Around a measurement: every other process's shared work has finished and none starts.
    `path`: the lock file where the caller is not under $SOLFORGE_GPU_SHARE itself (a driver of
    evaluations that runs one alone: too big to share the GPU's memory)."""
    return _held(True, path)
