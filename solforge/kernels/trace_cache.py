"""The sandboxed reference tracers' answers, kept on disk (<cache_dir>/traces/<key>.json).

Matching a problem asks two tracers (kernels/structure.py, kernels/pointwise_trace.py) that run the
reference in a fresh sandbox: several seconds per tracer and problem, paid again by every process
(an optimize run on a new box traced each of ~190 problems three times before its first evaluation).
The answer depends only on the request and the tracer's code, so the key is both: the entry point,
its payload (the definition) and a hash of the tracer modules' sources. Only answers are kept (by
solforge/disk_cache.py); a sandbox failure (timeout, crash) raises as before and is asked again next
time. What comes back from the disk is decoded exactly as a fresh answer is (tagged JSON of the
caller's dataclasses only).
"""

from __future__ import annotations

import functools
import hashlib
import json
import sys
from pathlib import Path
from typing import Sequence

from .. import disk_cache


@functools.lru_cache(maxsize=None)
def _sources_hash(modules: tuple) -> str:
    """Once per process: the code that runs is what was imported."""
    h = hashlib.sha256()
    for name in sorted(modules):
        mod = sys.modules.get(name)
        f = getattr(mod, "__file__", None)
        h.update(name.encode())
        h.update(Path(f).read_bytes() if f else b"?")
    return h.hexdigest()[:16]


# A matching session (OfflineWorker.warm sets it for its children and its own process): within it a
# trace that ran past its time box is remembered on disk, so the process that reads a child's
# answers does not run the same trace again for as long; another session asks afresh (a less
# loaded run may pass).
SESSION_ENV = "SOLFORGE_MATCH_SESSION"


def sandboxed_trace(module: str, function: str, payload: dict, *, timeout_s: float,
                    code: Sequence[str]) -> dict:
    """run_python(module, function, payload)'s answer, from the disk when the same request was
    answered by the same code (`code`: the modules whose sources decide the answer)."""
    import os

    from ..sandbox import SandboxError, run_python

    key = hashlib.sha256(json.dumps([module, function, payload, _sources_hash(tuple(code))], sort_keys=True,
                                    default=str).encode()).hexdigest()
    out = disk_cache.load("traces", key)
    if isinstance(out, dict):
        return out
    session = os.environ.get(SESSION_ENV, "")
    failed_key = f"{key}-{session}"
    if session:
        failed = disk_cache.load("traces_timed_out", failed_key)
        if isinstance(failed, dict):
            raise SandboxError(str(failed.get("message", "timed out")), "timeout")
    try:
        out = run_python(module, function, payload, timeout_s=timeout_s)
    except SandboxError as e:
        if session and e.kind == "timeout":
            disk_cache.save("traces_timed_out", failed_key, {"message": str(e)})
        raise
    disk_cache.save("traces", key, out)
    return out
