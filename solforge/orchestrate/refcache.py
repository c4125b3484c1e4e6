"""The orchestrator's side of the reference-output cache (solforge/evaluate/refcache.py).

One RefCaches per run. For a problem it covers (`patterns`: fnmatch globs or substrings of problem
names, e.g. "014_gqa*,015_gqa*"), the first evaluation fills the cache in a trusted process on a GPU
slot of its own (others of the same problem wait for it, holding no slot), and every evaluation then
gets job["refcache"] (the directory, each entry's sha256 from the filler's summary held here in
memory, the pool of probe seeds). Workloads the filler could not fill (their reference ran over
max_ref_s, or the fill budget ran out) are left out of the problem's evaluations (`skipped`), listed in
summary() and the run's log: evaluating them would re-run that reference in every candidate's process.

The cache directory is a fresh mkdtemp (0700) outside every candidate's stage, unless `root` is given
(then root/<run-id>); it is deleted at the end of the run (close()) unless keep=True.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid as uuidlib
from pathlib import Path
from typing import Optional

log = logging.getLogger(__name__)


def parse_patterns(spec: Optional[str]) -> list[str]:
    return [p.strip() for p in (spec or "").replace(" ", ",").split(",") if p.strip()]


def matches(patterns: list[str], name: str) -> bool:
    return any(fnmatch.fnmatch(name, p) or (not any(c in p for c in "*?[") and p in name)
               for p in patterns)


class RefCaches:
    def __init__(self, patterns: list[str], *, root: Optional[Path] = None, probe: int = 1,
                 max_ref_s: float = 120.0, budget_s: Optional[float] = None, keep: bool = False,
                 python: str = sys.executable):
        self.patterns = list(patterns)
        self.probe, self.max_ref_s, self.budget_s = probe, max_ref_s, budget_s
        self.keep, self.python = keep, python
        if root is None:
            self.root = Path(tempfile.mkdtemp(prefix="solforge-refcache-"))
        else:
            self.root = Path(root) / f"run-{uuidlib.uuid4().hex[:12]}"
            self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o700)
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self.fills: dict[str, dict] = {}     # problem -> filler summary (or {"error": ...})
        self.uses: dict[str, int] = {}       # problem -> evaluations given the cache

    def wants(self, name: str) -> bool:
        return matches(self.patterns, name)

    def _lock(self, name: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(name, threading.Lock())

    def job_for(self, lab, problem, pool) -> Optional[dict]:
        """{"refcache": spec, "workloads": [uuids]} to merge into the problem's job, or None (not
        covered, or the fill failed: the evaluation runs the reference live)."""
        name = problem.name
        if not self.wants(name):
            return None
        with self._lock(name):
            if name not in self.fills:
                self.fills[name] = self._fill(lab, problem, pool)
        s = self.fills[name]
        if s.get("error") or not s.get("entries"):
            return None
        from ..evaluate.refcache import job_spec

        self.uses[name] = self.uses.get(name, 0) + 1
        keep = [w.uuid for w in problem.workloads if w.uuid not in s.get("unfillable", {})]
        return {"refcache": job_spec(self.root / _safe(name), s), "workloads": keep}

    def _fill(self, lab, problem, pool) -> dict:
        from ..evaluate import runner

        cache_dir = self.root / _safe(problem.name)
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="solforge-refcache-fill-") as tmp:
            stage = runner.stage_candidate(Path(tmp) / "stage", problem, job=lab.eval_job(problem))
            cmd = [self.python, "-m", "solforge.evaluate.refcache_fill", "fill", str(stage), str(cache_dir),
                   "--probe", str(self.probe), "--max-ref-s", str(self.max_ref_s)]
            if self.budget_s:
                cmd += ["--budget-s", str(self.budget_s)]
            limit = (self.budget_s or 3600.0) + self.max_ref_s + 120.0
            with pool.slot(label=f"refcache-fill:{problem.name}") as slot:
                env = {**runner.scrubbed_env(), **(slot.env or {})}
                try:
                    p = subprocess.run(cmd, cwd=tmp, env=env, stdin=subprocess.DEVNULL,
                                       capture_output=True, text=True, timeout=limit)
                except subprocess.TimeoutExpired:
                    return {"error": f"fill ran over {limit:.0f} s", "wall_s": time.monotonic() - t0}
        wall = round(time.monotonic() - t0, 3)
        line = (p.stdout.strip().splitlines() or [""])[-1]
        try:
            summary = json.loads(line)
        except ValueError:
            err = f"fill failed (exit {p.returncode}): {p.stderr[-600:]}"
            log.warning("reference cache for %s: %s", problem.name, err)
            return {"error": err, "wall_s": wall}
        summary["wall_s"] = wall
        n = sum(len(v) for v in summary.get("entries", {}).values())
        nbytes = sum(e.get("bytes", 0) for v in summary.get("entries", {}).values() for e in v.values())
        summary["n_entries"], summary["n_bytes"] = n, nbytes
        log.warning("reference cache for %s: %d entries (%.1f MB) in %.1f s; unfillable: %s",
                    problem.name, n, nbytes / 1e6, wall, summary.get("unfillable") or "none")
        return summary

    def summary(self) -> dict:
        out = {}
        for name, s in self.fills.items():
            out[name] = {k: s.get(k) for k in ("error", "wall_s", "total_s", "n_entries", "n_bytes",
                                              "unfillable", "key_parts")}
            out[name]["evaluations"] = self.uses.get(name, 0)
        return out

    def close(self) -> None:
        if not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:120]
