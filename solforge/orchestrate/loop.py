"""The optimize loop as an orchestrator runs it: stages as swappable calls, sessions in parallel,
evaluations on GPU slots, a content cache, and resume after a kill.

`OrchestratedLoop` is solforge.agents.loop.OptimizeLoop with
  - `Stages`: plan / check / compile / evaluate / score / record as plain callables; the Prefect flow
    (flows/optimize.py) passes its tasks, so every stage of every attempt is a task run;
  - no round barrier (`_drive`): up to runs_per_round sessions (>= one per GPU) run in threads, one
    per problem, and the planner is asked again the moment any of them ends, so a GPU never idles
    waiting for the slowest session of a round; each evaluation holds one GPU slot (GpuPool), its
    evaluator pinned to that GPU: with N GPUs, N candidates are timed at once;
  - the content cache (cache.lookup) before anything is compiled: an identical candidate already
    answered on this GPU model (or, without a GPU, compiled for this arch) is not redone;
  - resume (resume.prepare): earlier runs with the same key that died are closed, their spending
    counted, and the attempts they left unfinished are finished first.
No Prefect here: this module runs the same without it.
"""

from __future__ import annotations

import contextvars
import dataclasses
import logging
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from ..agents.lab import NO_GPU
from ..agents.loop import LoopReport, OptimizeLoop, _fit
from ..agents.outcome import AttemptOutcome, Outcome
from ..agents.planner import Action, Decision, plan_round
from ..candidate import Candidate
from . import cache, resume
from .errors import is_transient
from .evaluation import evaluate_pinned, score
from .gpus import GpuPool, gpu_identity

log = logging.getLogger(__name__)


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


def _check(lab, problem, cand) -> Optional[Outcome]:
    return lab.check(problem, cand)


def _compile(lab, cand):
    return lab.compile(cand)


def _session(loop, decision) -> None:
    OptimizeLoop._session(loop, decision)


def _record(loop, aid, out, compile_row=None) -> None:
    loop._finish(aid, out, compile_row=compile_row)


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
    inside the run it was the first evaluation on every GPU (its `launch` phase: 6.6-7.8 s of the
    session-3 runs' 8-12 s first evaluations) and a slice of the wall budget. Returns the fork
    server's hello plus `waited_s` (how long the run waited for it here); {} when spawning."""
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


class OrchestratedLoop(OptimizeLoop):
    def __init__(self, store, problems: Sequence, lab, workers: dict, cfg, *, pool: GpuPool,
                 stages: Optional[Stages] = None, key_parts: Optional[dict] = None,
                 progress: Optional[Callable[[str], None]] = None):
        lab.has_gpu = len(pool) > 0
        super().__init__(store, problems, lab, workers, cfg, progress=progress)
        self.pool = pool
        self.stages = stages or Stages()
        self.gpu_identity = gpu_identity(pool.gpus)
        # one session per GPU at least, so every GPU has a candidate to time
        self.cfg.runs_per_round = max(self.cfg.runs_per_round, len(pool))
        self.key = resume.resume_key(**{**(key_parts or {}), "problem_names": sorted(self.problems),
                                        "arch": lab.arch, "gpu_identity": self.gpu_identity,
                                        "workers": sorted(workers)})
        self.resume_state: Optional[resume.ResumeState] = None
        self.cache_hits = 0
        self.resumed = 0
        self.use_cache = True  # False: re-measure even what the store already answers (replay --force)
        self._lock = threading.Lock()
        self._reserved: dict[str, int] = {}  # problem -> attempts planned for its running session, unspent
        self.session_log: list[tuple[str, float, float]] = []  # (problem, start, end) monotonic
        self.evaluator_start: dict = {}  # the fork server's hello + waited_s (_prestart)

    # ---- run, resumed --------------------------------------------------------------------------
    def run(self) -> LoopReport:
        if self.lab.has_gpu:
            self.evaluator_start = self.stages.prestart(self) or {}
        self.resume_state = st = resume.prepare(self.store, self.key, self.lab.has_gpu)
        self.spent.add(attempts=st.spent_attempts, gpu_seconds=st.spent_gpu_seconds)
        if st.prior_runs:
            self.progress(f"resuming: {len(st.prior_runs)} earlier run(s) with this key, "
                          f"{st.spent_attempts} attempt(s) already spent, {len(st.pending)} unfinished, "
                          f"{st.interrupted} marked interrupted")
        report = super().run()
        report.gpu_use = self.gpu_use()
        ev = self.evaluator_start
        if ev:
            report.gpu_use["evaluator_start"] = ev
            report.notes.append(
                f"evaluator fork server: {'ready' if ev.get('ready') else 'NOT ready (spawned instead)'}"
                f" {ev.get('startup_s', '?')} s after its start, {ev.get('waited_s', '?')} s of it "
                "waited for before the run's clock started")
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
        return report

    def gpu_use(self) -> dict:
        """Evaluations per minute and each GPU's busy share over the span in which GPU work existed
        (first slot taken to last slot released): the two-GPU scaling numbers."""
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

    def _seed_offline(self) -> None:
        super()._seed_offline()
        self._finish_pending()  # the run row exists now: unfinished attempts first

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
        self._parallel([lambda j=j: self.try_candidate(*j) for j in jobs])
        self.resumed += len(jobs)

    def _config_json(self) -> dict:
        return {**super()._config_json(), "resume_key": self.key, "gpu_identity": self.gpu_identity,
                "gpus": list(self.pool.gpus), "evaluator_version": cache.evaluator_version()}

    # ---- concurrency ---------------------------------------------------------------------------
    def _parallel(self, calls: list[Callable]) -> list:
        if len(calls) <= 1:
            return [c() for c in calls]
        width = max(len(self.pool), 1) * 2 if self.lab.has_gpu else 2
        with ThreadPoolExecutor(max_workers=min(len(calls), width),
                                thread_name_prefix="solforge-session") as ex:
            # each thread gets a copy of the caller's context (an orchestrator's run context lives there)
            futs = [ex.submit(contextvars.copy_context().run, c) for c in calls]
            return [f.result() for f in futs]

    def _run_sessions(self, runs) -> None:
        """Rounds with a barrier (OptimizeLoop._drive; kept for comparison): one round's sessions at once."""
        self._parallel([lambda d=d: self._run_one(d) for d in runs])

    # ---- the pipeline: no round barrier --------------------------------------------------------
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
                if free > 0 and failure is None and plans < self.cfg.max_rounds:
                    plans += 1
                    report.rounds = plans
                    decisions = self._plan_free(free, {d.problem for d in inflight.values()})
                    runs = [d for d in decisions if d.action is Action.RUN]
                    if runs or not inflight:
                        self._record(decisions)
                    if not runs and not inflight:
                        report.stop_reason = decisions[-1].reason if decisions else "nothing to do"
                        return
                    for d in runs:
                        with self._lock:
                            self._reserved[d.problem] = d.attempts
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
                done, _ = wait(list(inflight), return_when=FIRST_COMPLETED)
                for f in done:
                    d = inflight.pop(f)
                    with self._lock:
                        self._reserved.pop(d.problem, None)
                    if f.exception() is not None and failure is None:
                        failure = f.exception()
        finally:
            ex.shutdown(wait=True, cancel_futures=True)

    def _plan_free(self, n: int, busy: set) -> list[Decision]:
        """A planner round over the problems no running session has, for `n` free places."""
        states = [st for st in self._states() if st.name not in busy]
        with self._lock:
            self.spent.wall_seconds = time.monotonic() - self._t_start
            spent = dataclasses.replace(self.spent,
                                        attempts=self.spent.attempts + sum(self._reserved.values()))
        return self._plan(states, self.cfg.budget, spent, self.cfg.planner, n)

    def _run_one(self, d: Decision) -> None:
        t0 = time.monotonic()
        try:
            self.stages.session(self, d)
        finally:
            with self._lock:
                self.session_log.append((d.problem, t0, time.monotonic()))

    def _ensure_baseline(self, problem) -> None:
        sols = self.lab.roofline(problem)
        if all(s.t_base_ms is not None for s in sols) or problem.name in self._baselined:
            return
        # measured in this process on its first visible GPU: hold that GPU's slot meanwhile
        with self.pool.slot(prefer=self.pool.gpus[0], label=f"baseline:{problem.name}"):
            super()._ensure_baseline(problem)

    def _plan(self, states, budget, spent, planner_cfg, n):
        return self.stages.plan(states, budget, spent, planner_cfg, n)

    def _states(self):
        with self._lock:
            return super()._states()

    # ---- one attempt, stage by stage -----------------------------------------------------------
    def try_candidate(self, problem, agent: str, cand: Candidate, parent: Optional[str],
                      call_ids: Sequence[str] = ()) -> tuple[str, Outcome]:
        st, s = self.stages, self.store
        hit = cache.lookup(s, problem, cand.source_hash(), gpu_identity=self.gpu_identity,
                           arch=self.lab.arch, has_gpu=self.lab.has_gpu,
                           evaluator=cache.evaluator_version()) if self.use_cache else None
        if hit is not None:
            aid, out = hit
            with self._lock:
                self.cache_hits += 1
            return self._note(problem, aid, out)
        aid = self._open_attempt(problem, agent, cand, parent, call_ids)
        with self._lock:
            self.spent.add(attempts=1)
            if self._reserved.get(problem.name):
                self._reserved[problem.name] -= 1  # planned for its session: now spent
        bad = st.check(self.lab, problem, cand)
        if bad is not None:
            st.record(self, aid, bad, {"status": "invalid", "log": bad.message})
            return self._note(problem, aid, bad)
        out, res = st.compile(self.lab, cand)
        compile_row = _fit(s, "compile_results", res.to_row(aid)) if res else {
            "attempt_id": aid, "status": "error", "log": out.compile_log}
        if out.status is not AttemptOutcome.COMPILED:
            st.record(self, aid, out, compile_row)
            return self._note(problem, aid, out)
        s.mark_attempt(aid, "compiled", rows={"compile_results": [compile_row]},
                       outcome=AttemptOutcome.COMPILED.value)
        if not self.lab.has_gpu:
            out.message = NO_GPU
            return self._note(problem, aid, out)
        ev = st.evaluate(self.lab, problem, cand, res, self.pool)
        ev = st.score(self.lab, problem, ev)
        ev.compile_log, ev.compile_seconds, ev.cubin_hash = out.compile_log, out.compile_seconds, out.cubin_hash
        with self._lock:
            self.spent.add(gpu_seconds=ev.gpu_seconds)
        st.record(self, aid, ev, None)
        return self._note(problem, aid, ev)
