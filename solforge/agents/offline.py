"""The offline worker (the default without a model): kernel families from solforge.kernels, tuned by
a simple search — each family's best guess first, a few random picks from its parameter space, then
local refinement around the best-scoring params (neighbours that differ in one tunable). No LLM.

Without a GPU nothing is scored, so the search only compiles each family's best guess (proof that the
family serves the problem and compiles for the target) and says that tuning needs timings.
"""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import dataclass, field
from typing import Optional

from .llm import Context, SessionResult, TryFn

INITIAL_RANDOM = 3   # random picks per family after its best guess
MAX_SPACE = 4096     # param sets considered per family (spaces are enumerated lists)
MATCH_JOBS = 16      # child processes matching problems to families at the start of a run (warm)


def params_key(family: str, params: dict) -> str:
    return family + ":" + json.dumps(params, sort_keys=True, default=str)


@dataclass
class _FamilyState:
    family: object
    space: list[dict]
    tried: dict[str, Optional[float]] = field(default_factory=dict)  # key -> score (None: none)


@dataclass
class _ProblemSearch:
    families: list[_FamilyState]
    rng: random.Random
    exhausted: bool = False

    def best(self) -> tuple[Optional[_FamilyState], Optional[dict], Optional[float]]:
        best = (None, None, None)
        for fs in self.families:
            for p in fs.space:
                s = fs.tried.get(params_key(fs.family.name, p))
                if s is not None and (best[2] is None or s > best[2]):
                    best = (fs, p, s)
        return best


def neighbours(space: list[dict], center: dict) -> list[dict]:
    """Param sets that differ from `center` in exactly one tunable, nearest value first."""
    order = {k: sorted({_sortable(p.get(k)) for p in space}, key=_order_key) for k in center}
    out = []
    for p in space:
        diff = [k for k in set(p) | set(center) if p.get(k) != center.get(k)]
        if len(diff) != 1:
            continue
        k = diff[0]
        vals = order.get(k, [])
        try:
            dist = abs(vals.index(_sortable(p.get(k))) - vals.index(_sortable(center.get(k))))
        except ValueError:
            dist = len(vals)
        out.append((dist, json.dumps(p, sort_keys=True, default=str), p))
    return [p for _, _, p in sorted(out, key=lambda t: (t[0], t[1]))]


def _sortable(v):
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)


def _order_key(v):
    # numbers in numeric order (1024 after 128), then anything else by its text
    return (0, v, "") if isinstance(v, (int, float)) else (1, 0, v)


def _match_in_child(problem) -> bool:
    """OfflineWorker.warm's child: the families' matchers and parameter spaces, for their side effect
    on the disk cache (what the parent then reads)."""
    for f in OfflineWorker.families_for(problem):
        try:
            f.param_space(problem)
        except Exception:  # noqa: BLE001 - the parent's own matching reports it
            pass
    return True


class OfflineWorker:
    name = "offline"

    def __init__(self, lab, seed: int = 0):
        self.lab = lab
        self.seed = seed
        self._search: dict[str, _ProblemSearch] = {}

    @staticmethod
    def families_for(problem) -> list:
        try:
            from ..kernels import families_for
        except ImportError:
            return []
        try:
            return list(families_for(problem, compiler=True))
        except Exception:  # noqa: BLE001 - a family's matcher failing must not stop the run
            return []

    def warm(self, problems, deadline_s: Optional[float] = None, jobs: Optional[int] = None,
             progress=None) -> dict:
        """Match every problem to its families up front, in child processes, before any planning.

        The compiler family traces and compiles a problem to know whether it serves it (tens of
        seconds for a large graph; three compiles where a GEMM has template and attention variants).
        Done one problem at a time inside the planner's first round, 146 problems held a run for its
        whole wall budget without one attempt. The children fill the disk cache (compiler outcomes,
        tracer answers); this process then reads each answer from it. A problem still unmatched
        `deadline_s` from now is served by no family in this run (said once, by name count), so
        planning never waits on it. Returns {"matched": n, "unmatched": [names], "seconds": s}."""
        import concurrent.futures as cf
        import multiprocessing as mp

        say = progress or (lambda msg: None)
        todo = [p for p in problems if p.name not in self._search]
        t0 = time.monotonic()
        done: set[str] = set()
        if len(todo) == 1 and (deadline_s is None or deadline_s > 0):
            done.add(todo[0].name)  # one problem: no pool to start, _state below matches it
        elif todo and (deadline_s is None or deadline_s > 0):
            # each child imports torch (~0.5 GB): at most MATCH_JOBS of them, however many CPUs
            n = max(1, min(len(todo), jobs or min(MATCH_JOBS, len(os.sched_getaffinity(0)))))
            say(f"matching {len(todo)} problem(s) to kernel families on {n} process(es)")
            # spawn, not fork: the caller may already run threads (the evaluator's fork server)
            ex = cf.ProcessPoolExecutor(n, mp_context=mp.get_context("spawn"))
            try:
                futs = {ex.submit(_match_in_child, p): p.name for p in todo}
                try:
                    for f in cf.as_completed(futs, timeout=deadline_s):
                        if f.exception() is None:  # a child that died: left out, not redone here
                            done.add(futs[f])
                except cf.TimeoutError:
                    pass
            finally:
                # children still matching are stopped (a trace they started ends at its own
                # time limit): their answers would come after the deadline
                procs = list((getattr(ex, "_processes", None) or {}).values())
                ex.shutdown(wait=False, cancel_futures=True)
                for proc in procs:
                    if proc.is_alive():
                        proc.terminate()
        unmatched = []
        for p in todo:
            if p.name in done:
                self._state(p)  # from the disk cache the child filled
            else:
                unmatched.append(p.name)
                self._search[p.name] = _ProblemSearch([], random.Random(0), exhausted=True)
        secs = round(time.monotonic() - t0, 1)
        if len(todo) > 1:
            say(f"matched {len(done)} problem(s) in {secs} s"
                + (f"; {len(unmatched)} not matched within the deadline are left out of this run"
                   if unmatched else ""))
        return {"matched": len(done), "unmatched": unmatched, "seconds": secs}

    def has_family(self, problem) -> bool:
        st = self._state(problem)
        return bool(st.families) and not st.exhausted

    def _state(self, problem) -> _ProblemSearch:
        if problem.name not in self._search:
            fams = []
            for f in self.families_for(problem):
                try:
                    space = list(f.param_space(problem))[:MAX_SPACE]
                except Exception:  # noqa: BLE001
                    space = []
                if space:
                    fams.append(_FamilyState(f, space))
            rng = random.Random(f"{self.seed}/{problem.name}")
            self._search[problem.name] = _ProblemSearch(fams, rng)
        return self._search[problem.name]

    def remember(self, problem, candidate: dict, score: Optional[float]) -> None:
        """Seed the search with an attempt from the store (a previous run), by the notes' family tag."""
        st = self._state(problem)
        fam = _family_of_notes(candidate.get("notes", ""))
        for fs in st.families:
            if fs.family.name == fam:
                params = {k: v for k, v in (candidate.get("params") or {}).items()}
                for p in fs.space:  # match the tunables only: fixed params are #defined too
                    if all(params.get(k) == v for k, v in p.items()):
                        key = params_key(fam, p)
                        old = fs.tried.get(key)
                        fs.tried[key] = score if old is None else max(old, score or old)

    def next_params(self, problem, n: int) -> list[tuple[_FamilyState, dict, str]]:
        """Up to n untried (family, params, why) in search order."""
        st = self._state(problem)
        picks: list[tuple[_FamilyState, dict, str]] = []
        chosen: set[str] = set()

        def take(fs, p, why):
            k = params_key(fs.family.name, p)
            if k in fs.tried or k in chosen or len(picks) >= n:
                return
            chosen.add(k)
            picks.append((fs, p, why))

        for fs in st.families:  # 1. each family's best guess
            take(fs, fs.space[0], "family's default")
        scored = self.lab.has_gpu
        if not scored:
            return picks  # without timings there is nothing to tune
        bfs, bp, bscore = st.best()
        if bfs is not None:  # 2. local refinement around the best
            for p in neighbours(bfs.space, bp):
                take(bfs, p, f"neighbour of best ({bscore:.3f})")
        for fs in st.families:  # 3. random exploration
            untried = [p for p in fs.space if params_key(fs.family.name, p) not in fs.tried]
            st.rng.shuffle(untried)
            for p in untried[:INITIAL_RANDOM if bfs is not None else n]:
                take(fs, p, "random")
        return picks

    def propose(self, problem, language: str, ctx: Context, try_candidate: TryFn,
                max_attempts: int) -> SessionResult:
        st = self._state(problem)
        result = SessionResult()
        picks = self.next_params(problem, max_attempts)
        if not picks:
            st.exhausted = True
            result.stopped = ("no GPU: each family's default is compiled; tuning needs timings"
                              if not self.lab.has_gpu else "search space exhausted")
            return result
        for fs, params, why in picks:
            key = params_key(fs.family.name, params)
            try:
                cand = fs.family.instantiate(problem, params)
            except Exception as e:  # noqa: BLE001 - a bad point of the space: skip it, remember it
                fs.tried[key] = None
                result.stopped = f"instantiate failed: {e}"
                continue
            cand.notes = f"family={fs.family.name} ({why}); {cand.notes}".strip("; ")
            parent = _parent_for(ctx, fs.family.name)
            aid, out = try_candidate(cand, parent, [])
            fs.tried[key] = out.sol_score
            result.tried.append((aid, out))
        result.stopped = result.stopped or f"tried {len(result.tried)} param set(s)"
        return result


def _family_of_notes(notes: str) -> str:
    if notes.startswith("family="):
        return notes[len("family="):].split(" ", 1)[0].split(";", 1)[0]
    return ""


def _parent_for(ctx: Context, family: str) -> Optional[str]:
    """A tuned point refines the best attempt so far (its lineage), whatever family it came from."""
    return ctx.best_attempt_id
