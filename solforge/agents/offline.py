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
import signal
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Optional

from .llm import Context, SessionResult, TryFn

INITIAL_RANDOM = 3   # random picks per family after its best guess
MAX_SPACE = 4096     # param sets considered per family (spaces are enumerated lists)
MATCH_JOBS = 16      # child processes matching problems to families at the start of a run (warm)
# how much lower than the run the matching children run (os.nice): they work beside the run's
# evaluations, whose CPU time (inputs, checks, reading the profiler) lengthens every evaluation; on
# the H200 box, 16 children tracing two big references for a whole wall budget kept its 16 cores
# busy at 371% beside two lanes' evaluations
MATCH_NICE = 10
STOP_WAIT_S = 10.0   # how long the end of a run waits for the matching thread to stop


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


def match_pool(n: int):
    """The matching children: spawned (the caller may already run threads: the evaluator's fork
    server), each at MATCH_NICE below the run."""
    import concurrent.futures as cf
    import multiprocessing as mp

    return cf.ProcessPoolExecutor(n, mp_context=mp.get_context("spawn"), initializer=_init_match_child)


def _init_match_child() -> None:
    try:
        os.nice(MATCH_NICE)
    except OSError:  # not allowed here: match at the run's priority
        pass
    # the parent stops children still matching at its deadline (SIGTERM): their sandboxed traces
    # go with them instead of tracing on to their own time limit beside the next run's work
    signal.signal(signal.SIGTERM, _stop_matching)


def _stop_matching(signum, _frame) -> None:
    from ..sandbox.runner import stop_all

    stop_all()
    os._exit(128 + signum)


def _match_in_child(problem) -> bool:
    """OfflineWorker.warm's child: the families' matchers and parameter spaces, for their side effect
    on the disk cache (what the parent then reads). False where the compiler's trace ran past its
    time box: that answer is not kept on disk (a later, less loaded run may pass), so the parent
    would trace again, for as long, in its matching thread, which lands one problem at a time; the
    problem is left out of this run instead (the compiler would not serve it in time anyway)."""
    for f in OfflineWorker.families_for(problem):
        try:
            f.param_space(problem)
        except Exception:  # noqa: BLE001 - the parent's own matching reports it
            pass
    from ..kernels.compiled import answer_kept

    return answer_kept(problem)


class OfflineWorker:
    name = "offline"

    def __init__(self, lab, seed: int = 0):
        self.lab = lab
        self.seed = seed
        self._search: dict[str, _ProblemSearch] = {}
        # the matching (warm): problems still being matched, a condition signalled as each lands,
        # remember() calls kept for pending problems, the thread and its answer
        self._pending: set[str] = set()
        self._landed = threading.Condition(threading.RLock())
        self._stash: dict[str, list] = {}
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._result: dict = {}

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
             progress=None, wait: bool = True) -> dict:
        """Match problems to their families in child processes, within a deadline.

        The compiler family traces and compiles a problem to know whether it serves it (tens of
        seconds for a large graph, up to the trace time box). Done one problem at a time inside the
        planner's first round, 146 problems held a run for its whole wall budget without one attempt;
        matched all up front before planning, 94 problems (66 of them untraced) held a 500 s run the
        same way. So the children fill the disk cache (compiler outcomes, tracer answers) and this
        process reads each answer as it lands: with wait=False this returns at once,
        `pending(name)` says which problems are still being matched, `wait_matched` blocks until
        the next one lands, and the loop plans the matched ones meanwhile. A problem still
        unmatched `deadline_s` from now is served by no family in this run (said once, by count),
        so planning never waits on it.
        Returns (wait=True, or later from `matching_result`) {"matched", "unmatched", "seconds"}."""
        todo = [p for p in problems if p.name not in self._search]
        self._stop = threading.Event()
        self._result = {"matched": 0, "unmatched": [], "seconds": 0.0}
        with self._landed:
            self._pending = {p.name for p in todo}
        self._thread = threading.Thread(target=self._match_all,
                                        args=(todo, deadline_s, jobs, progress or (lambda msg: None)),
                                        name="solforge-matching", daemon=True)
        self._thread.start()
        return self.matching_result() if wait else {"matching": len(todo)}

    def pending(self, name: str) -> bool:
        return name in self._pending

    def pending_count(self) -> int:
        return len(self._pending)

    def wait_matched(self, timeout: float, below: Optional[int] = None) -> None:
        """Until fewer than `below` problems (default: those pending now) are still being matched,
        or timeout."""
        with self._landed:
            n = len(self._pending) if below is None else below
            if n:
                self._landed.wait_for(lambda: len(self._pending) < n, timeout)

    def matching_result(self, stop: bool = False, stop_wait_s: float = STOP_WAIT_S) -> dict:
        """The matching's answer once it ends; stop=True ends it now (the run is over: children still
        matching are stopped, their problems count as unmatched). A stop waits at most
        `stop_wait_s`: the thread may be reading a landed answer that this process has to compute
        itself (a trace), and the run's end must not wait for that; the thread is a daemon."""
        if self._thread is None:
            return {}
        if stop:
            self._stop.set()
            self._thread.join(stop_wait_s)
            if self._thread.is_alive():
                with self._landed:
                    left = sorted(self._pending)
                return {**self._result, "unmatched": left, "left_running": True}
            return self._result
        self._thread.join()
        return self._result

    def _match_all(self, todo, deadline_s, jobs, say) -> None:
        import concurrent.futures as cf

        t0 = time.monotonic()
        done: set[str] = set()
        by_name = {p.name: p for p in todo}

        def land(name: str, matched: bool) -> None:
            # read the answer the child left in the disk cache (or mark the problem unserved) before
            # the planner may see the problem
            try:
                if matched:
                    self._state(by_name[name])
                    done.add(name)
                else:
                    self._search[name] = _ProblemSearch([], random.Random(0), exhausted=True)
            finally:
                with self._landed:
                    self._pending.discard(name)
                    for cand, score in self._stash.pop(name, []) if name in done else ():
                        self._remember_now(by_name[name], cand, score)
                    self._landed.notify_all()

        try:
            if len(todo) == 1 and (deadline_s is None or deadline_s > 0):
                land(todo[0].name, True)  # one problem: no pool to start, _state matches it here
            elif todo and (deadline_s is None or deadline_s > 0):
                # each child imports torch (~0.5 GB): at most MATCH_JOBS of them, however many CPUs
                n = max(1, min(len(todo), jobs or min(MATCH_JOBS, len(os.sched_getaffinity(0)))))
                say(f"matching {len(todo)} problem(s) to kernel families on {n} process(es)")
                end = None if deadline_s is None else t0 + deadline_s
                # one matching session for the children and this process: a tracer that ran past
                # its time box in a child is not run again here (kernels/trace_cache.py)
                from ..kernels.trace_cache import SESSION_ENV

                os.environ[SESSION_ENV] = uuid.uuid4().hex
                ex = match_pool(n)
                try:
                    futs = {ex.submit(_match_in_child, p): p.name for p in todo}
                    left = set(futs)
                    while left and not self._stop.is_set():
                        tmo = 1.0 if end is None else min(1.0, end - time.monotonic())
                        if tmo <= 0:
                            break
                        ready, left = cf.wait(left, timeout=tmo, return_when=cf.FIRST_COMPLETED)
                        for f in ready:
                            # a child that died, or whose answer is not on disk: left out, not
                            # redone here
                            land(futs[f], f.exception() is None and f.result() is True)
                finally:
                    # children still matching are stopped (a trace they started ends at its own
                    # time limit): their answers would come after the deadline or the run's end
                    procs = list((getattr(ex, "_processes", None) or {}).values())
                    ex.shutdown(wait=False, cancel_futures=True)
                    for proc in procs:
                        if proc.is_alive():
                            proc.terminate()
        finally:
            unmatched = sorted(n for n in by_name if n not in done)
            for name in unmatched:
                if name in self._pending:
                    land(name, False)
            secs = round(time.monotonic() - t0, 1)
            if len(todo) > 1:
                say(f"matched {len(done)} problem(s) in {secs} s"
                    + (f"; {len(unmatched)} not matched within the deadline are left out of this run"
                       if unmatched else ""))
            self._result = {"matched": len(done), "unmatched": unmatched, "seconds": secs}

    def has_family(self, problem) -> bool:
        if self.pending(problem.name):
            return False  # still being matched in a child: asking here would trace it in-process
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
        """Seed the search with an attempt from the store (a previous run), by the notes' family tag.
        For a problem still being matched, kept until its match lands."""
        with self._landed:
            if self.pending(problem.name):
                self._stash.setdefault(problem.name, []).append((candidate, score))
                return
        self._remember_now(problem, candidate, score)

    def _remember_now(self, problem, candidate: dict, score: Optional[float]) -> None:
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
