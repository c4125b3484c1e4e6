"""Answers kept on disk as JSON, one file per key under <cache_dir>/<kind>/<key>.json.

Used by the compiler's outcomes (compiler/api.py) and the sandboxed tracers' answers
(kernels/trace_cache.py): both are pure functions of their request and of the code that answers it,
so the caller's key includes a hash of that code. A write goes through a temporary file and
os.replace, so a reader never sees half an entry; a damaged or unreadable entry is a miss (and is
written again); a disk that refuses the write costs only the reuse.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional


def entry_path(kind: str, key: str) -> Optional[Path]:
    try:
        from . import settings

        return settings.get().cache_dir / kind / f"{key}.json"
    except Exception:  # noqa: BLE001 - no settings: no disk cache
        return None


def load(kind: str, key: str) -> Optional[Any]:
    path = entry_path(kind, key)
    if path is None or not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def save(kind: str, key: str, value: Any) -> None:
    path = entry_path(kind, key)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(value))
        os.replace(tmp, path)
    except (OSError, TypeError, ValueError):
        pass
