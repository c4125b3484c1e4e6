"""fn(*args) in a forked child with a wall-clock limit (standard library only): one slow or crashing
problem costs its own line, never the command. The child starts with the parent's modules (torch
imported once); what it returns comes back through a queue, so it must pickle."""

from __future__ import annotations

import multiprocessing as mp
import queue
import time
from dataclasses import dataclass
from typing import Any, Callable


@dataclass
class Forked:
    ok: bool
    value: Any = None
    why: str = ""            # not ok: "no answer within N s", "crashed (exit code N)" or the error line
    timed_out: bool = False
    raised: bool = False     # fn raised: `why` is its error line

    def stopped(self, doing: str) -> str:
        """A one-line reason: the error line, or "stopped: ..." (with what the child was doing when
        its time ran out)."""
        if self.raised:
            return self.why
        return f"stopped: {self.why} ({doing})" if self.timed_out else f"stopped: {self.why}"


def _child(fn: Callable, args: tuple, q) -> None:
    try:
        q.put((True, fn(*args)))
    except Exception as e:  # noqa: BLE001 - the child's failure is the caller's one line
        q.put((False, f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"))


def run_forked(fn: Callable, args: tuple, limit_s: float) -> Forked:
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    proc = ctx.Process(target=_child, args=(fn, args, q))
    proc.start()
    end = time.monotonic() + limit_s
    out = None
    while out is None:
        left = end - time.monotonic()
        alive = proc.is_alive()      # before the get: an answer put just before exiting still counts
        try:
            ok, value = q.get(timeout=max(0.0, min(0.5, left)))
            out = Forked(True, value) if ok else Forked(False, why=value, raised=True)
        except queue.Empty:
            if not alive:            # died without an answer: no need to wait out the limit
                proc.join()
                out = Forked(False, why=f"crashed (exit code {proc.exitcode})")
            elif left <= 0:
                out = Forked(False, why=f"no answer within {limit_s:.0f} s", timed_out=True)
    if proc.is_alive():
        proc.kill()
    proc.join()
    return out
