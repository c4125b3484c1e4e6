"""Whether a process of this host is still running (standard library only: the evaluator's GPU-share
queue, the store's writer records and resume's run owners all ask it)."""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """True while `pid` runs; a process we may not signal (another user's) counts as running."""
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
