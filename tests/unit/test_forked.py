"""solforge.forked.run_forked: a value, an error line, a crash or a time-out, each one answer."""

from __future__ import annotations

import os
import time

from solforge.forked import run_forked


def _double(x):
    return 2 * x


def _boom():
    raise ValueError("bad input\nsecond line")


def _die():
    os._exit(7)


def test_value_error_crash_and_timeout():
    assert run_forked(_double, (21,), 30).value == 42
    err = run_forked(_boom, (), 30)
    assert not err.ok and err.raised and err.stopped("x") == "ValueError: bad input"
    dead = run_forked(_die, (), 30)
    assert not dead.ok and dead.stopped("x") == "stopped: crashed (exit code 7)"
    t0 = time.time()
    slow = run_forked(time.sleep, (60,), 1.0)
    assert time.time() - t0 < 10
    assert slow.timed_out and slow.stopped("tracing") == "stopped: no answer within 1 s (tracing)"
