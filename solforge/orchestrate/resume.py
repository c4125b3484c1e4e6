"""Resume bookkeeping: an optimize run killed mid-way is continued by the next run with the same key.

The key is a hash of what defines the work (problems, budget, workers, arch, GPU identity); it is
kept in runs.config.resume_key, so no extra table is needed. When a run starts it
  1. closes earlier runs with its key whose process is gone (status still 'running'): their open
     attempts become 'interrupted' (Store.mark_interrupted);
  2. counts what they spent, so the budget covers the whole job, not each try;
  3. lists the attempts they left unfinished, to be finished first (as new attempts whose parent is
     the interrupted one: a final status never changes).
The store is the ground truth throughout: nothing here lives in memory across runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from dataclasses import dataclass, field
from typing import Optional


def resume_key(**parts) -> str:
    blob = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass
class ResumeState:
    key: str
    prior_runs: list[str] = field(default_factory=list)
    closed_runs: list[str] = field(default_factory=list)   # found dead here and marked interrupted
    interrupted: int = 0                                    # attempts marked interrupted by that
    spent_attempts: int = 0
    spent_gpu_seconds: float = 0.0
    pending: list[dict] = field(default_factory=list)       # attempts to finish first

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d["pending"] = [p["id"] for p in self.pending]
        return d


def _alive(pid: Optional[int], host: Optional[str]) -> bool:
    if host and host != socket.gethostname():
        return True  # cannot tell from here: leave it to its own host
    if not pid:
        return False
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def prepare(store, key: str, has_gpu: bool) -> ResumeState:
    st = ResumeState(key)
    runs = store.query(
        "SELECT id, status, pid, host FROM runs WHERE kind = 'optimize' "
        "AND json_extract_string(config, '$.resume_key') = ? ORDER BY started_at", [key])
    for r in runs:
        st.prior_runs.append(r["id"])
        if r["status"] == "running" and not _alive(r["pid"], r["host"]):
            st.interrupted += store.mark_interrupted(r["id"], "run's process died; resumed by a new run")
            st.closed_runs.append(r["id"])
    if not st.prior_runs:
        return st
    marks = ",".join("?" * len(st.prior_runs))
    row = store.query_one(
        f"SELECT count(*) AS n, coalesce(sum(gpu_seconds), 0) AS g FROM attempts "
        f"WHERE run_id IN ({marks}) AND status <> 'interrupted'", st.prior_runs)
    st.spent_attempts, st.spent_gpu_seconds = int(row["n"]), float(row["g"])
    # Unfinished: interrupted before compiling (outcome NULL), or compiled but never timed when a
    # GPU is here now. Skip those already finished by a later attempt (parent_id) or whose source
    # another attempt has since completed (the content cache would answer for it anyway).
    want = ["a.outcome IS NULL"] + (["a.outcome = 'compiled'"] if has_gpu else [])
    st.pending = store.query(
        f"SELECT a.id, a.problem, a.agent, a.parent_id, a.candidate, a.source_hash FROM attempts a "
        f"WHERE a.run_id IN ({marks}) AND a.status = 'interrupted' AND a.candidate IS NOT NULL "
        f"AND ({' OR '.join(want)}) "
        f"AND NOT EXISTS (SELECT 1 FROM attempts b WHERE b.parent_id = a.id AND b.status <> 'interrupted') "
        f"ORDER BY a.created_at, a.id", st.prior_runs)
    return st
