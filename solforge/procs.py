"""Whether a process of this host is still running (standard library only: the evaluator's GPU-share
queue, the store's writer records and resume's run owners all ask it)."""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """True while `pid` runs; a process we may not signal (another user's) counts as running, one
    that has exited but is not yet reaped by its parent (a zombie) does not."""
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(int(pid))


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False                    # no /proc (not Linux): what kill(0) said
    # "pid (comm) S ...": the state follows the last ')' (comm may hold spaces and parentheses)
    return stat[stat.rfind(b")") + 2: stat.rfind(b")") + 3] == b"Z"
