"""Resume bookkeeping: an optimize run killed mid-way is continued by the next run with the same key.

The key is a hash of what defines the work (problems, budget, workers, arch, GPU identity); it is
kept in runs.config.resume_key, so no extra table is needed. When a run starts it
  1. closes earlier runs with its key whose process is gone (status still 'running'): their open
     attempts become 'interrupted' (Store.mark_interrupted);
  2. counts what they spent, so the budget covers the whole job, not each try;
  3. lists the attempts they left unfinished, to be finished first (as new attempts whose parent is
     the interrupted one: a final status never changes);
  4. lists the sessions they cut off (a 'run' decision that never ended, planner_decisions.ended_at),
     with the attempts each still owes its problem: the planner hands those out before anything else,
     so the resumed job makes the candidates the uninterrupted one would have made.
The store is the ground truth throughout: nothing here lives in memory across runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from dataclasses import dataclass, field
from typing import Optional

from ..agents.planner import OwedSession
from ..procs import pid_alive
from ..store import attempt_queries as q


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
    owed: dict = field(default_factory=dict)                # problem -> OwedSession (cut off)

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d["pending"] = [p["id"] for p in self.pending]
        d["owed"] = {k: v.attempts for k, v in self.owed.items()}
        return d


def _alive(pid: Optional[int], host: Optional[str]) -> bool:
    if host and host != socket.gethostname():
        return True  # cannot tell from here: leave it to its own host
    if not pid:
        return False
    return pid == os.getpid() or pid_alive(pid)


def prepare(store, key: str, has_gpu: bool) -> ResumeState:
    st = ResumeState(key)
    runs = q.runs_with_resume_key(store, key)
    for r in runs:
        st.prior_runs.append(r["id"])
        if r["status"] == "running" and not _alive(r["pid"], r["host"]):
            st.interrupted += store.mark_interrupted(r["id"], "run's process died; resumed by a new run")
            st.closed_runs.append(r["id"])
    if not st.prior_runs:
        return st
    st.spent_attempts, st.spent_gpu_seconds = q.spent_by_runs(store, st.prior_runs)
    # Unfinished: interrupted before compiling (outcome NULL), or compiled but never timed when a
    # GPU is here now. Skip those already finished by a later attempt (parent_id) or whose source
    # another attempt has since completed (the content cache would answer for it anyway).
    st.pending = q.unfinished_attempts(store, st.prior_runs, compiled_too=has_gpu)
    for r in q.cut_sessions(store, st.prior_runs):
        left = int(r["attempts"] or 0) - int(r["made"])
        if left > 0 and r["worker"]:
            st.owed[r["problem"]] = OwedSession(r["worker"], r["language"] or "cuda", left)
    return st


def session_ended(store, run_id: str, problem: str) -> None:
    """A session returned (whatever it made): a resumed run owes its problem nothing for it."""
    q.end_session(store, run_id, problem)
