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

Exclusive sections go oldest first: a process that wants one leaves a ticket (when it first used
the share, its pid) in `<lock>.queue/` and goes to the gate only while no older live process is
waiting there too. Without it the gate handed the timing section round the lanes a workload each,
so six long evaluations advanced in lockstep and all ended near the sum of their times (a process's
clock stops while it waits, so none timed out), none within a device call; oldest first, they end
one after another. Shared sections are not ordered: correctness work still overlaps anyone's.

Oldest first between sections too: a process that has had the timing section leaves a mark in
`<lock>.active/` for as long as it lives, and a younger one waits for the section while an older
marked process is between its sections (its next workload's correctness work), for at most
`settings.gpu_share_hold_s`. Without it the oldest-first order held only among processes waiting at
the same instant: the oldest, back at its shared work, let the next one time a workload, and three
evaluations of slow plans on three lanes of an H200 advanced in lockstep and none ended within 380 s
(2026-12-04). The bound keeps an older process's long shared work (a reference whose input
generator loops in Python) from idling the GPU's timing for long.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path
from typing import Optional

from ..procs import pid_alive

ENV = "SOLFORGE_GPU_SHARE"
# When this process first used the share (time.time_ns); the runner's zygote forks a process per
# evaluation, so that is about when the evaluation started. Settable for a process started for it.
SINCE_ENV = "SOLFORGE_GPU_SHARE_SINCE_NS"
POLL_S = 0.002
_since: Optional[tuple] = None      # (pid, ns): a forked child starts its own


def _since_ns() -> int:
    global _since
    if _since is None or _since[0] != os.getpid():
        v = os.environ.get(SINCE_ENV, "").strip()
        _since = (os.getpid(), int(v) if v.isdigit() else time.time_ns())
    return _since[1]


def _hold_s() -> float:
    from .. import settings

    return float(settings.get().gpu_share_hold_s)


def _live(folder: Path) -> list:
    """The names of the tickets or marks in `folder` whose process lives; a dead one's is removed on
    the way."""
    live = []
    for t in folder.iterdir():
        try:
            pid = int(t.name.rsplit("-", 1)[1])
        except (IndexError, ValueError):
            continue
        if pid_alive(pid):
            live.append(t.name)
        else:
            t.unlink(missing_ok=True)
    return live


def _older_active(active: Path, mine: str) -> bool:
    """A live process older than `mine` has had the timing section (its mark)."""
    return any(name < mine for name in _live(active))


def _oldest_waiting(queue: Path) -> Optional[str]:
    """The oldest live ticket in the queue."""
    return min(_live(queue), default=None)


@contextlib.contextmanager
def _gate(path: str, gate, exclusive: bool, mark: bool = False):
    """Holding the gate; for an exclusive section, only once no older live process waits for one
    (see the module's docstring). The ticket stays until the caller holds the lock."""
    if not exclusive:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        return
    queue, active = Path(path + ".queue"), Path(path + ".active")
    queue.mkdir(exist_ok=True)
    active.mkdir(exist_ok=True)
    ticket = queue / f"{_since_ns():020d}-{os.getpid()}"
    ticket.touch()
    hold_until = time.monotonic() + _hold_s()
    try:
        while True:
            while _oldest_waiting(queue) not in (ticket.name, None) or (
                    time.monotonic() < hold_until and _older_active(active, ticket.name)):
                time.sleep(POLL_S)
            fcntl.flock(gate, fcntl.LOCK_EX)
            if _oldest_waiting(queue) in (ticket.name, None):
                break
            fcntl.flock(gate, fcntl.LOCK_UN)     # an older one came while this one waited at the gate
        if mark:                                 # an evaluation that has timed: younger ones let it finish
            (active / ticket.name).touch()
        try:
            yield
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
    finally:
        ticket.unlink(missing_ok=True)


@contextlib.contextmanager
def held(path: str, exclusive: bool, mark: bool = False):
    """The lock file `path` held shared or exclusively, through the gate (a no-op without a path).
    Also the baseline scheduler's lease on a GPU (solforge.baselines.plan.gpu_lease). `mark`: an
    evaluation's timing section, which leaves this process's mark in `<lock>.active/` (younger
    evaluations let it finish); a long-lived holder (a lease, a parent that runs an evaluation
    alone) leaves none."""
    if not path:
        yield
        return
    _since_ns()
    with open(path, "a+") as lock, open(path + ".gate", "a+") as gate:
        with _gate(path, gate, exclusive, mark):
            fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _held(exclusive: bool, path: str = ""):
    # an evaluation's own sections come through $SOLFORGE_GPU_SHARE; a caller naming the lock file
    # is not an evaluation that times a workload at a time
    return held(path or os.environ.get(ENV, "").strip(), exclusive, mark=exclusive and not path)


def shared():
    """Around GPU work that others may overlap (inputs, reference, correctness calls)."""
    return _held(False)


def alone(path: str = ""):
    """Around a measurement: every other process's shared work has finished and none starts.
    `path`: the lock file where the caller is not under $SOLFORGE_GPU_SHARE itself (a driver of
    evaluations that runs one alone: too big to share the GPU's memory)."""
    return _held(True, path)
