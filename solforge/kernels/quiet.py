"""Quiet tracing: make_fx on fake tensors logs every op that fails at ERROR level (with a traceback).
For the family matchers a reference that cannot be traced is an answer (no structure), not an error
to print, so their traces run with those loggers silenced."""

from __future__ import annotations

import logging
from contextlib import contextmanager

_LOGGERS = ("torch._subclasses.fake_tensor", "torch.fx.experimental.proxy_tensor")


@contextmanager
def quiet_fake_tensor_logs():
    loggers = [logging.getLogger(n) for n in _LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, lv in zip(loggers, levels):
            lg.setLevel(lv)
