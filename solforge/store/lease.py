"""Short leases on a DuckDB file, so many processes can share it without losing writes.

DuckDB lets one process open a file read-write and then refuses every other process, even read-only
ones. So a process holds the file only while it works: an exclusive fcntl.flock on `<db>.lock` orders
the processes, and the DuckDB connection lives inside that lock. Opening DuckDB costs tens of
milliseconds, so the connection is kept for a short lease after each use: closed after LINGER_S idle,
or after MAX_HOLD_S of continuous holding, when the holder steps aside for STEP_ASIDE_S so a waiting
process gets its turn (waiters poll the lock faster than that). See SCHEMA.md, "Concurrency".
"""

from __future__ import annotations

import atexit
import fcntl
import os
import threading
import time
import weakref
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import duckdb

from ..errors import SolforgeError

LINGER_S = 0.05
MAX_HOLD_S = 0.5
STEP_ASIDE_S = 0.02
_POLL_MAX_S = 0.005  # must stay below STEP_ASIDE_S, or a waiter can miss the gap


class StoreBusy(SolforgeError):
    """The database stayed locked by another process for longer than the lock timeout."""


class Lease:
    """One per database file per process (see `lease_for`): threads share it under an RLock."""

    def __init__(self, path: Path, lock_timeout_s: float):
        self.path = path
        self.lock_path = Path(str(path) + ".lock")
        self.wait_path = Path(str(path) + ".lock.wait")
        self.lock_timeout_s = lock_timeout_s
        self._rlock = threading.RLock()
        self._con: duckdb.DuckDBPyConnection | None = None
        self._fd: int | None = None
        self._depth = 0
        self.tx_depth = 0  # transaction nesting, read by Store (always under the RLock)
        self._acquired_at = 0.0
        self._last_used = 0.0
        self._step_aside = False
        self._wake = threading.Event()
        self._reaper: threading.Thread | None = None
        self.opens = 0  # how many times the file was opened (for tests and benchmarks)
        self._open_at_fork = False  # a fork happened while this lease was in use
        self._poisoned = False      # (child side) the database instance is the parent's copy

    # ---- public ---------------------------------------------------------------------------
    @contextmanager
    def connection(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """The open connection, holding the file lock; nested use in one thread reuses it."""
        with self._rlock:
            if self._con is None:
                self._open()
            self._depth += 1
            try:
                yield self._con
            except duckdb.FatalException:
                # DuckDB invalidated this instance (e.g. disk full mid-commit): drop it so the
                # next operation reopens the file and replays the WAL, instead of failing forever.
                if self._depth == 1:
                    try:
                        self._close()
                    except duckdb.Error:
                        self._con = None
                        self._unlock()
                raise
            finally:
                self._depth -= 1
                self._last_used = time.monotonic()
                if self._depth == 0 and self._con is not None:
                    held = self._last_used - self._acquired_at
                    if held >= MAX_HOLD_S and self._others_waiting():
                        self._close()
                        self._step_aside = True
                    else:
                        if held >= MAX_HOLD_S:
                            self._acquired_at = self._last_used  # nobody waits: keep it
                        self._start_reaper()

    def close(self) -> None:
        with self._rlock:
            if self._depth == 0:
                self._close()

    # ---- internals ------------------------------------------------------------------------
    def _open(self) -> None:
        if self._poisoned:
            raise StoreBusy(f"{self.path}: this process was forked while its parent was using the "
                            "store; DuckDB cannot be shared across fork. Start workers with "
                            "multiprocessing 'spawn' or 'forkserver'")
        if self._step_aside:
            # We just released after a long hold: let a process blocked on the lock take it.
            self._step_aside = False
            time.sleep(STEP_ASIDE_S)
        deadline = time.monotonic() + self.lock_timeout_s
        self._fd = self._lock_file(deadline)
        try:
            self._con = self._connect(deadline)
        except BaseException:
            self._unlock()
            raise
        self._acquired_at = time.monotonic()
        self.opens += 1

    def _others_waiting(self) -> bool:
        """Whether another process holds a shared lock on the wait file (it wants the database)."""
        try:
            fd = os.open(self.wait_path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError:
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        except BlockingIOError:
            return True
        finally:
            os.close(fd)

    def _lock_file(self, deadline: float) -> int:
        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o666)
        wait_fd = None  # a shared lock on the wait file says "I am waiting" to the holder
        delay = 0.0005
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return fd
                except BlockingIOError:
                    pass
                if wait_fd is None:
                    wait_fd = os.open(self.wait_path, os.O_RDWR | os.O_CREAT, 0o666)
                try:  # may fail for an instant while the holder probes; retried next round
                    fcntl.flock(wait_fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:
                    pass
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise StoreBusy(f"{self.path}: another solforge process held the database lock "
                                    f"for over {self.lock_timeout_s:.0f} s "
                                    "(raise SOLFORGE_DB_LOCK_TIMEOUT_S if that is expected)") from None
                time.sleep(delay)
                delay = min(delay * 2, _POLL_MAX_S)
        finally:
            if wait_fd is not None:
                os.close(wait_fd)  # drops the shared lock

    def _connect(self, deadline: float) -> duckdb.DuckDBPyConnection:
        delay = 0.01
        while True:
            try:
                return duckdb.connect(str(self.path))
            except duckdb.IOException as e:
                # Held by something that does not use our lock (duckdb CLI, a notebook).
                if "lock" not in str(e).lower() or time.monotonic() > deadline:
                    if "lock" in str(e).lower():
                        raise StoreBusy(f"{self.path}: the file is held open by another program "
                                        f"(not solforge): {e}") from None
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.5)

    def _close(self) -> None:
        if self._con is not None:
            try:
                self._con.close()
            finally:
                self._con = None
                self._unlock()

    def _unlock(self) -> None:
        if self._fd is not None:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            finally:
                os.close(self._fd)
                self._fd = None

    def _start_reaper(self) -> None:
        self._wake.set()
        if self._reaper is None or not self._reaper.is_alive():
            self._reaper = threading.Thread(target=_reap, args=(weakref.ref(self),),
                                            name=f"solforge-store-lease:{self.path.name}",
                                            daemon=True)
            self._reaper.start()

    def _before_fork(self) -> None:
        # A child must not inherit an open DuckDB instance: duckdb.connect in the child would hand
        # back that copy (its instance cache), whose writes the parent never sees. So close the
        # lease now (the next use reopens); if another thread is using it, the child is refused.
        self._open_at_fork = False
        if self._rlock.acquire(blocking=False):
            try:
                if self._depth == 0:
                    self._close()
                self._open_at_fork = self._con is not None
            finally:
                self._rlock.release()
        else:
            self._open_at_fork = self._con is not None

    def _after_fork_in_child(self) -> None:
        # The parent's connection and lock are not ours: forget them without closing or unlocking
        # (an flock is shared across fork; unlocking here would release the parent's lock).
        self._rlock = threading.RLock()
        if self._con is not None:
            # Keep the parent's connection object alive: destroying it would close (checkpoint)
            # the parent's database from the child. Forked children end in os._exit.
            _FORK_ORPHANS.append(self._con)
        self._poisoned = self._open_at_fork
        self._con = None
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
        self._fd = None
        self._depth = 0
        self.tx_depth = 0
        self._wake = threading.Event()
        self._reaper = None


def _reap(ref: "weakref.ref[Lease]") -> None:
    """Close the connection once it has been idle for LINGER_S; sleep while nothing is open."""
    while True:
        lease = ref()
        if lease is None:
            return
        wake = lease._wake
        del lease
        wake.wait(timeout=1.0)
        time.sleep(LINGER_S)
        lease = ref()
        if lease is None:
            return
        with lease._rlock:
            if lease._con is None:
                lease._wake.clear()
            elif lease._depth == 0 and time.monotonic() - lease._last_used >= LINGER_S:
                lease._close()
                lease._wake.clear()
        del lease


_LEASES: dict[Path, Lease] = {}
_FORK_ORPHANS: list = []
_LEASES_LOCK = threading.Lock()


def lease_for(path: Path, lock_timeout_s: float) -> Lease:
    """The process-wide lease for a file: two Store objects on one file must share the lock."""
    key = Path(os.path.abspath(path))
    with _LEASES_LOCK:
        lease = _LEASES.get(key)
        if lease is None:
            lease = _LEASES[key] = Lease(key, lock_timeout_s)
        else:
            lease.lock_timeout_s = lock_timeout_s
        return lease


def close_all() -> None:
    for lease in list(_LEASES.values()):
        lease.close()


def _before_fork() -> None:
    for lease in list(_LEASES.values()):
        lease._before_fork()


def _after_fork() -> None:
    global _LEASES_LOCK
    _LEASES_LOCK = threading.Lock()
    for lease in _LEASES.values():
        lease._after_fork_in_child()


atexit.register(close_all)
os.register_at_fork(before=_before_fork, after_in_child=_after_fork)
