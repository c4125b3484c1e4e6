"""The optimize loop: plan -> propose -> check -> compile -> evaluate -> score -> store, the one loop
`solforge optimize`, replay and the Prefect flows run.

  - `Stages`: plan / session / check / compile / evaluate / score / record as plain callables; the
    Prefect flow (flows/optimize.py) passes its tasks (tasks/optimize.py), so every stage of every
    attempt is a task run; without Prefect they are plain calls (transient GPU losses retried);
  - no round barrier (`_drive`): up to runs_per_round sessions (>= one per GPU) run in threads, one
    per problem, and the planner is asked again the moment any of them ends, so a GPU never idles
    waiting for the slowest session of a round; each evaluation holds one GPU slot (GpuPool), its
    evaluator pinned to that GPU: with N GPUs, N candidates are timed at once;
  - the content cache (cache.lookup) before anything is compiled: an identical candidate already
    answered on this GPU model (or, without a GPU, compiled for this arch) is not redone;
  - resume (resume.prepare): earlier runs with the same key that died are closed, their spending
    counted, the attempts they left unfinished are finished first, and the sessions they cut off
    are handed the attempts they still owe before the planner ranks anything;
  - every attempt is written through solforge.orchestrate.attempts (queued before anything runs,
    compiled, evaluated / failed). Without a GPU the loop does everything that needs none (planning,
    checks, compiles) and leaves compiled attempts waiting for a GPU.
No Prefect here: this module runs the same without it.
"""

from __future__ import annotations

import contextvars
import dataclasses
import logging
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional, Sequence

from ..agents import history
from ..agents.lab import NO_GPU
from ..agents.llm import Context
from ..agents.outcome import AttemptOutcome, Outcome
from ..agents.planner import (Action, AttemptSummary, Budget, Decision, PlannerConfig, ProblemState,
                              Spent, Worker, budget_exhausted, plan_round)
from ..candidate import Candidate
from . import attempts, cache, resume
from .errors import is_transient
from .evaluation import evaluate_pinned, score
from .gpus import GpuPool, SlotDeadline, gpu_identity, visible_gpus

log = logging.getLogger(__name__)

FEEDBACK_SHOWN = 3
POPULATION = 4


@dataclass
class LoopConfig:
    budget: Budget = field(default_factory=Budget)
    planner: PlannerConfig = field(default_factory=PlannerConfig)
    runs_per_round: int = 1      # sessions at once (at least one per GPU)
    max_rounds: int = 10_000     # planner calls
    model: str = ""              # recorded on LLM attempts
    languages: tuple = ("cuda",)  # what the LLM may write in (the planner picks among them)


@dataclass
class ProblemReport:
    problem: str
    attempts: int = 0
    outcomes: dict = field(default_factory=dict)
    best_sol_score: Optional[float] = None
    best_attempt: Optional[str] = None
    compiled: int = 0


@dataclass
class LoopReport:
    run_id: str
    rounds: int = 0
    stop_reason: str = ""
    spent: Spent = field(default_factory=Spent)
    gpu: bool = False
    notes: list[str] = field(default_factory=list)
    problems: dict[str, ProblemReport] = field(default_factory=dict)
    gpu_use: dict = field(default_factory=dict)   # per-GPU busy share and evaluations per minute

    def to_json(self) -> dict:
        d = asdict(self)
        d["problems"] = [asdict(p) for p in self.problems.values()]
        return d


# ---- the stages and their plain (Prefect-free) defaults ----------------------------------------
def _retrying(fn: Callable, retries: int = 2, delay_s: float = 2.0) -> Callable:
    """Without an orchestrator: retry transient failures only (what tasks/common.py does in Prefect)."""
    def call(*a, **k):
        for i in range(retries + 1):
            try:
                return fn(*a, **k)
            except Exception as e:  # noqa: BLE001
                if i == retries or not is_transient(e):
                    raise
                log.warning("transient failure, retrying (%d/%d): %s", i + 1, retries, e)
                time.sleep(delay_s)
    return call


def _session(loop, decision) -> None:
    loop.propose(decision)


def _check(lab, problem, cand) -> Optional[Outcome]:
    return lab.check(problem, cand)


def _compile(lab, cand):
    return lab.compile(cand)


def _record(loop, aid, out, compile_row=None) -> None:
    attempts.finish(loop.store, aid, out, compile_row)


def start_evaluator() -> None:
    """Start the evaluator's fork server now and return at once: its imports (torch, torch._inductor:
    5-9 s on the H200 boxes) then overlap whatever the caller does next (setup.build: selecting and
    tracing problems, the store, the lab). Nothing to start when evaluators are spawned."""
    from ..evaluate import runner

    if runner.default_launch() == "zygote":
        runner.prestart()


def _prestart(loop) -> dict:
    """Before the run's clock starts: the evaluator's fork server, started (if setup.build has not
    already) and waited for. Its start-up is paid once per run, the same with 1 or N GPUs; waited for
    inside the run it was the first evaluation on every GPU (its `launch` phase: 6.6-7.8 s of
    8-12 s first evaluations) and a slice of the wall budget. Returns the fork server's hello plus
    `waited_s` (how long the run waited for it here); {} when spawning."""
    from ..evaluate import runner

    if runner.default_launch() != "zygote":
        return {}
    t0 = time.monotonic()
    hello = runner.prestart(wait=True) or {}
    return {**hello, "waited_s": round(time.monotonic() - t0, 3)}


@dataclass
class Stages:
    session: Callable = _session                # (loop, decision) -> None: the worker proposes
    plan: Callable = plan_round                 # (states, budget, spent, planner_cfg, n) -> decisions
    check: Callable = _check                    # (lab, problem, cand) -> Outcome | None
    compile: Callable = _compile                # (lab, cand) -> (Outcome, CompileResult | None)
    evaluate: Callable = _retrying(evaluate_pinned)  # (lab, problem, cand, compiled, pool) -> Outcome
    score: Callable = score                     # (lab, problem, outcome) -> outcome
    record: Callable = _record                  # (loop, attempt_id, outcome, compile_row) -> None
    prestart: Callable = _prestart              # (loop) -> dict | None: before the run, with a GPU


def default_pool(has_gpu: bool) -> GpuPool:
    """Every visible GPU; a lab that evaluates with a stand-in where none is visible gets one slot
    of its own (nothing real to lock across processes)."""
    if not has_gpu:
        return GpuPool([])
    gpus = visible_gpus()
    return GpuPool(gpus) if gpus else GpuPool(["0"], cross_process=False)


class OptimizeLoop:
    def __init__(self, store, problems: Sequence, lab, workers: dict, cfg: LoopConfig, *,
                 pool: Optional[GpuPool] = None, stages: Optional[Stages] = None,
                 key_parts: Optional[dict] = None, progress: Optional[Callable[[str], None]] = None):
        self.pool = pool if pool is not None else default_pool(lab.has_gpu)
        lab.has_gpu = len(self.pool) > 0
        self.store = store
        self.problems = {p.name: p for p in problems}
        self.lab = lab
        self.workers = workers  # {"offline": OfflineWorker, "llm": LlmWorker}
        self.cfg = cfg
        self.cfg.planner.gpu_available = lab.has_gpu
        self.cfg.planner.llm_available = "llm" in workers
        # one session per GPU at least, so every GPU has a candidate to time
        self.cfg.runs_per_round = max(self.cfg.runs_per_round, len(self.pool))
        self.stages = stages or Stages()
        self.progress = progress or (lambda msg: log.info(msg))
        self.spent = Spent()
        self.run_id: Optional[str] = None
        self.gpu_identity = gpu_identity(self.pool.gpus)
        # what identifies the job for resume; without key_parts every loop is a job of its own
        parts = key_parts if key_parts is not None else {"job": _new_id()}
        self.key = resume.resume_key(**{**parts, "problem_names": sorted(self.problems),
                                        "arch": lab.arch, "gpu_identity": self.gpu_identity,
                                        "workers": sorted(workers)})
        self.resume_state: Optional[resume.ResumeState] = None
        self.cache_hits = 0
        self.resumed = 0
        self.use_cache = True  # False: re-measure even what the store already answers (replay --force)
        self.session_log: list[tuple[str, float, float]] = []  # (problem, start, end) monotonic
        self.evaluator_start: dict = {}  # the fork server's hello + waited_s (_prestart)
        self.matching: dict = {}         # OfflineWorker.warm's answer: matched, unmatched, seconds
        self._lock = threading.Lock()
        self._reserved: dict[str, int] = {}  # problem -> attempts planned for its running session, unspent
        self._owed: dict = {}                # problem -> OwedSession: cut off by a dead earlier run
        self._feedback: dict[str, list[tuple[str, Outcome]]] = {}
        self._empty: dict[str, int] = {}     # sessions that produced no attempt, per problem
        self._sessions: dict[str, int] = {}
        self._baselined: set[str] = set()
        self._t_start = time.monotonic()

    # ---- the run ---------------------------------------------------------------------------------
    def run(self) -> LoopReport:
        from ..provenance import run_provenance
        from ..store.status import RunStatus

        if self.lab.has_gpu:
            self.evaluator_start = self.stages.prestart(self) or {}
        self.resume_state = st = resume.prepare(self.store, self.key, self.lab.has_gpu)
        self.spent.add(attempts=st.spent_attempts, gpu_seconds=st.spent_gpu_seconds)
        self._owed = dict(st.owed)
        if st.prior_runs:
            self.progress(f"resuming: {len(st.prior_runs)} earlier run(s) with this key, "
                          f"{st.spent_attempts} attempt(s) already spent, {len(st.pending)} unfinished, "
                          f"{st.interrupted} marked interrupted, {len(st.owed)} session(s) cut off")
        config = self._config_json()
        config["provenance"] = run_provenance()
        self.run_id = self.store.create_run(kind="optimize", gpu_profile=self.lab.gpu_profile,
                                            config=config, provenance=config["provenance"])
        report = LoopReport(self.run_id, gpu=self.lab.has_gpu)
        # workers may be added after construction (setup.build wires the LLM to loop.on_llm_call)
        self.cfg.planner.llm_available = "llm" in self.workers
        self.cfg.planner.gpu_available = self.lab.has_gpu
        if not self.lab.has_gpu:
            report.notes.append(NO_GPU + ": attempts stay 'compiled' until evaluated on a GPU")
            self.progress(NO_GPU)
        status, error = RunStatus.FINISHED, None
        try:
            self._t_start = time.monotonic()  # the wall budget covers matching and seeding too
            if self.cfg.budget.wall_seconds is not None:
                self.pool.deadline = self._t_start + self.cfg.budget.wall_seconds
            self._match_offline()
            self._finish_pending()  # the run row exists now: unfinished attempts first
            self._seed_offline()    # after: a worker must not propose again what was just finished
            self._drive(report)
        except KeyboardInterrupt:
            status, error = RunStatus.INTERRUPTED, "interrupted by the user"
            report.stop_reason = error
            raise
        except Exception as e:
            status, error = RunStatus.FAILED, f"{type(e).__name__}: {e}"
            raise
        finally:
            off = self.workers.get("offline")
            if off is not None and hasattr(off, "matching_result"):
                self.matching = off.matching_result(stop=True)  # the run is over: matching too
            self.pool.deadline = None  # the pool may serve another run after this one
            self.store.finish_run(self.run_id, status, error)
            report.spent = self.spent
            report.problems = self._summary()
            self._close_report(report)
        self.progress(f"stopped: {report.stop_reason}")
        return report

    def _close_report(self, report: LoopReport) -> None:
        report.gpu_use = self.gpu_use()
        ev = self.evaluator_start
        if ev:
            report.gpu_use["evaluator_start"] = ev
            report.notes.append(
                f"evaluator fork server: {'ready' if ev.get('ready') else 'NOT ready (spawned instead)'}"
                f" {ev.get('startup_s', '?')} s after its start, {ev.get('waited_s', '?')} s of it "
                "waited for before the run's clock started")
        m = self.matching
        if m.get("unmatched"):
            report.notes.append(f"{len(m['unmatched'])} problem(s) not matched to a kernel family within "
                                f"the wall budget ({m['seconds']} s of matching): "
                                + ", ".join(m["unmatched"][:8]) + (" ..." if len(m["unmatched"]) > 8 else ""))
        caches = getattr(self.lab, "refcaches", None)
        if caches is not None:
            rc = caches.summary()
            report.gpu_use["refcache"] = rc
            for name, v in rc.items():
                report.notes.append(
                    f"reference cache {name}: " + (f"fill failed: {v['error']}" if v.get("error") else
                    f"{v.get('n_entries')} entries, {(v.get('n_bytes') or 0) / 1e6:.0f} MB, filled in "
                    f"{v.get('wall_s')} s, used by {v.get('evaluations')} evaluation(s); left out "
                    f"(reference too slow): {sorted(v.get('unfillable') or {}) or 'none'}"))
            caches.close()
        if report.gpu_use.get("evaluations"):
            u = report.gpu_use
            report.notes.append(
                f"GPUs {','.join(self.pool.gpus)}: {u['evaluations']} evaluations, "
                f"{u['evaluations_per_minute']:.2f}/min while work remained; busy "
                + ", ".join(f"GPU {g} {f:.0%}" for g, f in u["busy_while_work"].items()))

    def gpu_use(self) -> dict:
        """Evaluations per minute and each GPU's busy share over the span in which GPU work existed
        (first slot taken to last slot released): the scaling numbers."""
        iv = [(s, e, lbl) for u in self.pool.use.values() for s, e, lbl in u.intervals]
        # baselines and reference-cache fills hold slots too
        ev = [(s, e) for s, e, lbl in iv if not lbl.startswith(("baseline:", "refcache-fill:"))]
        if not ev:
            return {"evaluations": 0}
        t0, t1 = min(s for s, _, _ in iv), max(e for _, e, _ in iv)
        return {"evaluations": len(ev), "baselines": len(iv) - len(ev), "span_s": t1 - t0,
                "evaluations_per_minute": len(ev) / max(t1 - t0, 1e-9) * 60,
                "busy_while_work": self.pool.busy_fractions(t0, t1),
                "seconds_per_evaluation": sum(e - s for s, e in ev) / len(ev)}

    def _finish_pending(self) -> None:
        seen: set[tuple[str, str]] = set()
        jobs = []
        for p in self.resume_state.pending if self.resume_state else []:
            problem = self.problems.get(p["problem"])
            if problem is None or (p["problem"], p["source_hash"]) in seen:
                continue
            seen.add((p["problem"], p["source_hash"]))
            try:
                cand = Candidate.model_validate(p["candidate"])
            except Exception:  # noqa: BLE001 - an unreadable candidate cannot be finished
                continue
            jobs.append((problem, p["agent"] or "resume", cand, p["id"]))
        if not jobs:
            return
        self.progress(f"finishing {len(jobs)} attempt(s) left unfinished by the interrupted run")
        self.run_candidates(jobs)
        self.resumed += len(jobs)

    def run_candidates(self, jobs: Sequence[tuple]) -> list:
        """try_candidate for each (problem, agent, candidate, parent), spread over the GPUs: resume's
        unfinished attempts, replay's stored ones. One stopped by the wall budget gives None."""
        def one(job):
            try:
                return self.try_candidate(*job)
            except _OutOfTime:
                return None
        return self._parallel([lambda j=j: one(j) for j in jobs])

    # ---- concurrency -----------------------------------------------------------------------------
    def _parallel(self, calls: list[Callable]) -> list:
        if len(calls) <= 1:
            return [c() for c in calls]
        width = max(len(self.pool), 1) * 2 if self.lab.has_gpu else 2
        with ThreadPoolExecutor(max_workers=min(len(calls), width),
                                thread_name_prefix="solforge-session") as ex:
            # each thread gets a copy of the caller's context (an orchestrator's run context lives there)
            futs = [ex.submit(contextvars.copy_context().run, c) for c in calls]
            return [f.result() for f in futs]

    def _drive(self, report: LoopReport) -> None:
        """Plan as sessions end, not in rounds. Up to `runs_per_round` sessions (at least one per GPU)
        run at once, each on a problem no other running session has; the moment one ends, the planner
        ranks the problems that are free and the best start. No GPU waits for the slowest session of
        a round, and the planner sees each result as soon as it is stored.

        Budget: attempts planned for running sessions and not spent yet count as spent while planning
        (rounds gave that for free), so the attempt budget is never overcommitted. A plan that starts
        nothing while sessions run only waits (no planner_decisions row: nothing was decided); the
        final word, STOP or nothing to do, is planned and recorded once nothing runs any more. A
        session that raises stops the planning; the others finish, then the error is raised."""
        width = max(1, self.cfg.runs_per_round)
        inflight: dict = {}          # Future -> Decision
        failure: Optional[BaseException] = None
        plans = 0
        ex = ThreadPoolExecutor(max_workers=width, thread_name_prefix="solforge-session")
        try:
            while True:
                free = width - len(inflight)
                matching = 0  # problems still being matched when this pass planned (none: no plan)
                if free > 0 and failure is None and plans < self.cfg.max_rounds:
                    plans += 1
                    report.rounds = plans
                    matching = self._matching()  # before planning: one may land meanwhile
                    decisions = self._plan_free(free, {d.problem for d in inflight.values()})
                    runs = [d for d in decisions if d.action is Action.RUN]
                    # nothing to start yet, but problems are still being matched: plan again when
                    # the next one lands (nothing decided, so nothing recorded)
                    waiting = not runs and not inflight and matching and not self._budget_spent()
                    if (runs or not inflight) and not waiting:
                        self._record(decisions)
                    if waiting:
                        self.workers["offline"].wait_matched(timeout=5.0, below=matching)
                        continue
                    if not runs and not inflight:
                        report.stop_reason = decisions[-1].reason if decisions else "nothing to do"
                        return
                    for d in runs:
                        with self._lock:
                            self._reserved[d.problem] = d.attempts
                            self._owed.pop(d.problem, None)  # this session pays what was owed
                        # each session thread gets a copy of this context (an orchestrator's run
                        # context lives there)
                        inflight[ex.submit(contextvars.copy_context().run, self._run_one, d)] = d
                elif not inflight:
                    if failure is not None:
                        raise failure
                    report.stop_reason = f"round limit ({self.cfg.max_rounds}) reached"
                    return
                if not inflight:
                    continue
                done = self._wait_sessions(inflight, free_after=width - len(inflight) > 0,
                                           matching_at_plan=matching)
                for f in done:
                    d = inflight.pop(f)
                    with self._lock:
                        self._reserved.pop(d.problem, None)
                    if f.exception() is not None and failure is None:
                        failure = f.exception()
        finally:
            ex.shutdown(wait=True, cancel_futures=True)

    def _matching(self) -> int:
        """Problems the offline worker is still matching (OfflineWorker.warm, wait=False)."""
        off = self.workers.get("offline")
        return off.pending_count() if off is not None and hasattr(off, "pending_count") else 0

    def _budget_spent(self) -> bool:
        return budget_exhausted(self.cfg.budget, self._spent_now()) is not None

    def _spent_now(self) -> Spent:
        """What is spent, the wall clock brought up to now, with the attempts planned for running
        sessions and not spent yet counted as spent (the attempt budget is never overcommitted)."""
        with self._lock:
            self.spent.wall_seconds = time.monotonic() - self._t_start
            return dataclasses.replace(self.spent,
                                       attempts=self.spent.attempts + sum(self._reserved.values()))

    def _wait_sessions(self, inflight: dict, free_after: bool, matching_at_plan: int) -> set:
        """Until a session ends; while a place is free and problems are still being matched, also
        until the next match lands, so the free place starts on it instead of waiting for a session.
        Counted from the plan, not from now: a match that landed between the plan and this wait
        returns at once (counting from now, the free place waited for the slowest running session
        while the problem just matched sat idle)."""
        if not free_after or not matching_at_plan:
            return wait(list(inflight), return_when=FIRST_COMPLETED)[0]
        while True:
            if self._matching() < matching_at_plan:
                return set()  # plan again: the landed problem may start on the free place
            done, _ = wait(list(inflight), timeout=1.0, return_when=FIRST_COMPLETED)
            if done:
                return done

    def _drive_rounds(self, report: LoopReport) -> None:
        """Planner rounds with a barrier: every session of a round ends before the next round is
        planned. Not what run() does (see _drive); kept to measure what the pipeline gains. A
        barrier at the start too: every problem's match first."""
        off = self.workers.get("offline")
        if off is not None and hasattr(off, "matching_result"):
            off.matching_result()
        for rnd in range(self.cfg.max_rounds):
            report.rounds = rnd + 1
            decisions = self._plan_free(max(1, self.cfg.runs_per_round), set())
            self._record(decisions)
            runs = [d for d in decisions if d.action is Action.RUN]
            if not runs:
                report.stop_reason = decisions[-1].reason if decisions else "nothing to do"
                return
            for d in runs:
                self._reserved[d.problem] = d.attempts
                self._owed.pop(d.problem, None)
            self._parallel([lambda d=d: self._run_one(d) for d in runs])
            self._reserved.clear()
        report.stop_reason = f"round limit ({self.cfg.max_rounds}) reached"

    def _plan_free(self, n: int, busy: set) -> list[Decision]:
        """A planner round over the problems no running session has, for `n` free places."""
        states = [st for st in self._states() if st.name not in busy]
        return self.stages.plan(states, self.cfg.budget, self._spent_now(), self.cfg.planner, n)

    def _run_one(self, d: Decision) -> None:
        t0 = time.monotonic()
        try:
            self.stages.session(self, d)
        finally:
            with self._lock:
                self.session_log.append((d.problem, t0, time.monotonic()))
            # returned, whatever it made: only a session whose process died is owed on resume
            resume.session_ended(self.store, self.run_id, d.problem)

    # ---- one session: the worker proposes, each candidate goes through try_candidate -------------
    def propose(self, d: Decision) -> None:
        problem = self.problems[d.problem]
        worker = self.workers[d.worker.value]
        if self.lab.has_gpu:
            try:
                self._ensure_baseline(problem)
            except SlotDeadline:
                return  # the wall budget ended before the GPU was free: the next round stops
        ctx = self._context(problem)
        self.progress(f"{problem.name}: {d.worker.value}/{d.language} x{d.attempts} ({d.reason})")

        def trier(cand: Candidate, parent: Optional[str], call_ids: list) -> tuple[str, Outcome]:
            return self.try_candidate(problem, worker.name, cand, parent, call_ids, language=d.language)
        try:
            res = worker.propose(problem, d.language, ctx, trier, d.attempts)
        except _OutOfTime:
            return  # the next planner round records the stop
        if not res.tried:
            with self._lock:
                self._empty[problem.name] = self._empty.get(problem.name, 0) + 1
        if res.fatal and d.worker is Worker.LLM:
            # an outage, a spent cap or a rejected request: the LLM is out for the rest of the run
            self.cfg.planner.llm_available = False
            self.workers.pop("llm", None)
            self._record([Decision(Action.SKIP, problem.name, d.worker, d.language, 0, 0.0,
                                   f"LLM worker stopped: {res.stopped}")])
            self.progress(f"LLM worker stopped: {res.stopped}")
        elif res.stopped:
            log.info("%s: %s", problem.name, res.stopped)

    def _ensure_baseline(self, problem) -> None:
        """T_b for every workload (SOL scores need it): from the store, else measured here, once, on
        this process's first visible GPU, holding that GPU's slot meanwhile."""
        sols = self.lab.roofline(problem)
        with self._lock:
            if all(s.t_base_ms is not None for s in sols) or problem.name in self._baselined:
                return
            self._baselined.add(problem.name)
        from ..evaluate.baseline import time_problem_isolated
        from ..evaluate.job import blob_roots

        t0 = time.perf_counter()
        rows = []
        # the reference is a dataset's code: it runs in the sandbox (one line per workload if it
        # hangs, crashes or reaches for what it must not), never in this process
        with self.pool.slot(prefer=self.pool.gpus[0], label=f"baseline:{problem.name}"):
            try:
                rows = time_problem_isolated(
                    problem, "eager", reps=self.lab.baseline_reps, workload_budget_s=0.5,
                    problem_budget_s=30.0, blob_roots=list(blob_roots(problem)))
            except Exception as e:  # noqa: BLE001 - no baseline: attempts are timed but not scored
                self.progress(f"{problem.name}: baseline failed: {type(e).__name__}: {e}")
        with self._lock:
            self.spent.add(gpu_seconds=time.perf_counter() - t0)
        if rows:
            self.store.insert_rows("baselines", [attempts.fit(self.store, "baselines", r.to_json())
                                                 for r in rows])
        by = {r.workload_uuid: r.median_ms for r in rows if r.status == "passed" and r.median_ms}
        for s in sols:
            if s.uuid in by and s.t_base_ms is None:
                s.t_base_ms, s.t_base_variant = by[s.uuid], "eager"
        self.progress(f"{problem.name}: baseline measured on {len(by)}/{len(sols)} workloads "
                      f"({time.perf_counter() - t0:.1f} s)")

    # ---- one attempt, stage by stage -------------------------------------------------------------
    def try_candidate(self, problem, agent: str, cand: Candidate, parent: Optional[str],
                      call_ids: Sequence[str] = (), language: Optional[str] = None) -> tuple[str, Outcome]:
        st, s = self.stages, self.store
        wall = self.cfg.budget.wall_seconds
        if wall is not None and time.monotonic() - self._t_start >= wall:
            raise _OutOfTime()
        hit = cache.lookup(s, problem, cand.source_hash(), gpu_identity=self.gpu_identity,
                           arch=self.lab.arch, has_gpu=self.lab.has_gpu,
                           evaluator=cache.evaluator_version()) if self.use_cache else None
        if hit is not None:
            aid, out = hit
            with self._lock:
                self.cache_hits += 1
            return self._note(problem, aid, out)
        aid = attempts.open_attempt(s, problem.name, cand, run_id=self.run_id, agent=agent,
                                    model=self.cfg.model if agent == "llm" else None,
                                    parent=parent, call_ids=call_ids)
        with self._lock:
            self.spent.add(attempts=1)
            if self._reserved.get(problem.name):
                self._reserved[problem.name] -= 1  # planned for its session: now spent
        bad = st.check(self.lab, problem, cand)
        if bad is None and agent == "llm" and language and cand.language != language:
            # a model asked for one language must not get another's code run (a CuTe answer is
            # Python): refused before anything compiles, one line fed back to the model
            why = f"the run asked for a {language!r} candidate, the answer is {cand.language!r}"
            bad = Outcome(AttemptOutcome.INVALID, why, compile_log=why)
        if bad is not None:
            st.record(self, aid, bad, attempts.invalid_row(bad))
            return self._note(problem, aid, bad)
        out, res = st.compile(self.lab, cand)
        row = attempts.compile_row(s, aid, out, res)
        if out.status is not AttemptOutcome.COMPILED:
            st.record(self, aid, out, row)
            return self._note(problem, aid, out)
        attempts.mark_compiled(s, aid, row)
        if not self.lab.has_gpu:
            out.message = NO_GPU
            return self._note(problem, aid, out)
        try:
            ev = st.evaluate(self.lab, problem, cand, res, self.pool)
        except SlotDeadline as e:
            # compiled, never evaluated: interrupted (not half-done), and a resumed run finishes it
            attempts.interrupt(s, aid, str(e))
            raise _OutOfTime() from None
        ev = st.score(self.lab, problem, ev)
        ev.compile_log, ev.compile_seconds, ev.cubin_hash = out.compile_log, out.compile_seconds, out.cubin_hash
        with self._lock:
            self.spent.add(gpu_seconds=ev.gpu_seconds)
        st.record(self, aid, ev, None)
        return self._note(problem, aid, ev)

    def _note(self, problem, aid: str, out: Outcome) -> tuple[str, Outcome]:
        with self._lock:
            fb = self._feedback.setdefault(problem.name, [])
            fb.append((f"attempt {aid[:8]}", out))
            del fb[:-10]
        score_txt = f" SOL {out.sol_score:.3f}" if out.sol_score is not None else ""
        self.progress(f"  {problem.name} {aid[:8]}: {out.status.value}{score_txt} {out.message[:120]}")
        return aid, out

    # ---- what the planner and workers see --------------------------------------------------------
    def _states(self) -> list[ProblemState]:
        from ..store.attempt_queries import baseline_cost_ms

        with self._lock:
            hist = history.histories(self.store, list(self.problems), run_id=self.run_id)
            empty, owed = dict(self._empty), dict(self._owed)
        cost = baseline_cost_ms(self.store)
        states = []
        offline = self.workers.get("offline")
        for name, p in self.problems.items():
            if offline is not None and hasattr(offline, "pending") and offline.pending(name):
                continue  # not matched yet: planned once its match lands, never skipped for it
            summaries = hist[name]
            # sessions that produced nothing count as failures, so an LLM that never answers with a
            # candidate is not picked forever
            summaries += [AttemptSummary("llm", "cuda", "parse_error")] * empty.get(name, 0)
            states.append(ProblemState(name, summaries,
                                       has_offline_family=bool(offline and offline.has_family(p)),
                                       languages=tuple(self.cfg.languages),
                                       cost_ms=cost.get(name), owed=owed.get(name)))
        return states

    def _context(self, problem) -> Context:
        with self._lock:
            n = self._sessions.get(problem.name, 0)
            self._sessions[problem.name] = n + 1
        pop = history.population(self.store, problem.name, POPULATION)
        ctx = Context(feedback=self._feedback.get(problem.name, [])[-FEEDBACK_SHOWN:],
                      history=lambda k: self._feedback.get(problem.name, [])[-k:])
        if pop:
            # mostly the best; every third session another live candidate, to keep lineages apart
            pick = pop[0] if n % 3 != 2 or len(pop) == 1 else pop[1 + (n // 3) % (len(pop) - 1)]
            try:
                ctx.best = Candidate.model_validate(pick["candidate"])
                ctx.best_score, ctx.best_attempt_id = pick["sol_score"], pick["id"]
            except Exception:  # noqa: BLE001
                pass
        return ctx

    def _match_offline(self) -> None:
        """Every problem matched to its kernel families in parallel child processes, within the wall
        budget (OfflineWorker.warm): the planner asks each problem whether a family serves it, and a
        compiler match is a trace and a compile. Sessions start as soon as the first matches land."""
        off = self.workers.get("offline")
        if off is None or not hasattr(off, "warm"):
            return
        wall = self.cfg.budget.wall_seconds
        left = None if wall is None else wall - (time.monotonic() - self._t_start)
        # in the background: the loop plans each problem as its match lands (_states, _drive)
        off.warm(list(self.problems.values()), deadline_s=left, progress=self.progress, wait=False)

    def _seed_offline(self) -> None:
        off = self.workers.get("offline")
        if off is None:
            return
        for name, p in self.problems.items():
            for r in history.population(self.store, name, 50):
                if isinstance(r["candidate"], dict):
                    off.remember(p, r["candidate"], r["sol_score"])

    def _record(self, decisions: Sequence[Decision]) -> None:
        if not decisions:
            return
        budget = {"budget": asdict(self.cfg.budget), "spent": asdict(self.spent),
                  "llm_available": self.cfg.planner.llm_available, "gpu": self.lab.has_gpu}
        self.store.insert_rows("planner_decisions", [{
            "id": _new_id(), "run_id": self.run_id, "problem": d.problem,
            "worker": d.worker.value if d.worker else None, "language": d.language,
            "reason": d.reason, "budget": budget, "action": d.action.value,
            "priority": d.priority, "attempts": d.attempts, "metrics": d.metrics}
            for d in decisions])

    def on_llm_call(self, row: dict) -> None:
        """llm_calls sink for the LLM worker (rows are already scrubbed of secrets)."""
        with self._lock:
            self.spent.add(dollars=row.get("cost_usd") or 0.0)
        self.store.insert_rows("llm_calls", [{**row, "run_id": self.run_id}])

    def _summary(self) -> dict[str, ProblemReport]:
        from ..store.attempt_queries import run_outcome_counts

        out: dict[str, ProblemReport] = {}
        if self.run_id is None:
            return out
        for r in run_outcome_counts(self.store, self.run_id):
            pr = out.setdefault(r["problem"], ProblemReport(r["problem"]))
            pr.attempts += r["n"]
            pr.outcomes[r["outcome"] or "pending"] = r["n"]
            if r["outcome"] in ("compiled", "ok"):
                pr.compiled += r["n"]
            if r["best"] is not None and (pr.best_sol_score is None or r["best"] > pr.best_sol_score):
                pr.best_sol_score = r["best"]
        for name in out:
            b = history.best_attempt(self.store, name)
            out[name].best_attempt = b[0] if b and b[2] is not None else None
        return out

    def _config_json(self) -> dict:
        return {"budget": asdict(self.cfg.budget), "planner": asdict(self.cfg.planner),
                "runs_per_round": self.cfg.runs_per_round, "model": self.cfg.model,
                "workers": sorted(self.workers), "problems": sorted(self.problems),
                "arch": self.lab.arch, "gpu": self.lab.has_gpu, "started": time.time(),
                "resume_key": self.key, "gpu_identity": self.gpu_identity,
                "gpus": list(self.pool.gpus), "evaluator_version": cache.evaluator_version()}


class _OutOfTime(Exception):
    """The wall-clock budget ran out between two attempts of a session."""


def _new_id() -> str:
    from ..store import new_id

    return new_id()
