"""Which failures are worth another try.

Deterministic failures (a compile error, a wrong answer, bad input) repeat on the same input: never
retried. Transient ones are: an LLM provider that timed out, rate-limited or dropped the connection,
and a GPU worker that was lost under a candidate (its evaluator killed from outside, the device gone)
before it reported anything. The retry policy (tasks/common.py) asks `is_transient`.
"""

from __future__ import annotations


class TransientError(Exception):
    """Something outside the candidate failed; the same call may well succeed next time."""


class GpuLost(TransientError):
    """The evaluator never reported: its process was killed from outside or the GPU went away."""


# LiteLLM's provider errors, by class name: importing litellm here would pull it onto the GPU box.
_LLM_TRANSIENT = {"RateLimitError", "APIConnectionError", "ServiceUnavailableError", "Timeout",
                  "InternalServerError", "APITimeoutError", "BadGatewayError"}
# Failures that read like a lost device rather than a faulty kernel.
_GPU_LOST_MARKERS = ("no cuda-capable device", "cuda driver version is insufficient",
                     "gpu is lost", "device not ready", "uncorrectable ecc", "cuda_error_no_device",
                     "busy or unavailable")


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, (TransientError, ConnectionError, TimeoutError)):
        return True
    if any(c.__name__ in _LLM_TRANSIENT for c in type(exc).__mro__):
        return True
    return False


def gpu_lost(report) -> bool:
    """True when an evaluator RunReport shows the GPU or its worker failed, not the candidate:
    the process died without reporting its hardware line (CUDA never came up), or it was killed by a
    signal we did not send, or its stderr names a lost device."""
    tail = (getattr(report, "stderr_tail", "") or "").lower()
    if any(m in tail for m in _GPU_LOST_MARKERS):
        return True
    rc = getattr(report, "exit_code", None)
    killed_by_us = bool(getattr(report, "killed", False))
    never_started = getattr(report, "hardware", None) is None
    return never_started and not killed_by_us and rc is not None and rc < 0
