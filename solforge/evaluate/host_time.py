"""Whether a timed call is host time: the GPU busy (Timing.busy_ms) under
settings.host_bound_busy_share of the call's span means the span is mostly the host launching small
kernels, and moves with the host's speed (docs/timing_agreement.md). One rule for the baselines'
summary and the side by side with NVIDIA's CLI. Imports nothing heavy."""

from __future__ import annotations

from .. import settings


def is_host_bound(span_ms: float, busy_ms: float) -> bool:
    return busy_ms < settings.get().host_bound_busy_share * span_ms
