"""Guards for the traces the family matchers take of a reference.

- Quiet: make_fx on fake tensors logs every op that fails at ERROR level (with a traceback). For a
  matcher a reference that cannot be traced is an answer (no structure), not an error to print.
- Budget: a family's kernel is a small graph (the served references make under 100 torch calls a trace);
  a reference that makes thousands of calls (a whole decoder layer looping over its experts) is no
  family's, and tracing it on fake tensors costs tens of seconds. The budget stops such a trace.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager

from torch.overrides import TorchFunctionMode

_LOGGERS = ("torch._subclasses.fake_tensor", "torch.fx.experimental.proxy_tensor")
MAX_TORCH_CALLS = 600


class TraceTooLong(RuntimeError):
    pass


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


class call_budget(TorchFunctionMode):
    """Inside the traced function: raise TraceTooLong after `limit` torch calls."""

    def __init__(self, limit: int = MAX_TORCH_CALLS):
        super().__init__()
        self.left = limit

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.left -= 1
        if self.left < 0:
            raise TraceTooLong("more torch calls than any family's kernel graph")
        return func(*args, **(kwargs or {}))
