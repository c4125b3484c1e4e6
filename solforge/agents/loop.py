"""The optimize loop: planner round -> propose -> compile -> evaluate -> score -> store.

Each attempt is written (queued) before anything runs, marked compiled with its compile result, and
completed (evaluated / failed) with its per-workload results and scores. Without a GPU the loop does
everything that needs none (planning, checks, compiles) and leaves compiled attempts waiting for a GPU.
The store has one writer: this process.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional, Sequence

from ..candidate import Candidate
from . import history
from .lab import NO_GPU, Lab
from .llm import Context
from .outcome import AttemptOutcome, Outcome
from .planner import (Action, AttemptSummary, Budget, Decision, PlannerConfig, ProblemState, Spent, Worker,
                      plan_round)

log = logging.getLogger(__name__)

FEEDBACK_SHOWN = 3
POPULATION = 4


@dataclass
class LoopConfig:
    budget: Budget = field(default_factory=Budget)
    planner: PlannerConfig = field(default_factory=PlannerConfig)
    runs_per_round: int = 1      # problems that get attempts in one planner round
    max_rounds: int = 10_000
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


class OptimizeLoop:
    def __init__(self, store, problems: Sequence, lab: Lab, workers: dict, cfg: LoopConfig,
                 progress: Optional[Callable[[str], None]] = None):
        self.store = store
        self.problems = {p.name: p for p in problems}
        self.lab = lab
        self.workers = workers  # {"offline": OfflineWorker, "llm": LlmWorker}
        self.cfg = cfg
        self.cfg.planner.gpu_available = lab.has_gpu
        self.cfg.planner.llm_available = "llm" in workers
        self.progress = progress or (lambda msg: log.info(msg))
        self.spent = Spent()
        self.run_id: Optional[str] = None
        self._feedback: dict[str, list[tuple[str, Outcome]]] = {}
        self._empty: dict[str, int] = {}     # sessions that produced no attempt, per problem
        self._sessions: dict[str, int] = {}
        self._baselined: set[str] = set()
        self._t_start = time.monotonic()
        self._llm_calls_run: list[str] = []

    # ---- the run ---------------------------------------------------------------------------------
    def run(self) -> LoopReport:
        from ..store.status import RunStatus

        from ..provenance import run_provenance

        config = self._config_json()
        config["provenance"] = run_provenance()
        self.run_id = self.store.create_run(kind="optimize", gpu_profile=self.lab.gpu_profile,
                                            config=config, provenance=config["provenance"])
        report = LoopReport(self.run_id, gpu=self.lab.has_gpu)
        # workers may be added after construction (the CLI wires the LLM to loop.on_llm_call)
        self.cfg.planner.llm_available = "llm" in self.workers
        self.cfg.planner.gpu_available = self.lab.has_gpu
        if not self.lab.has_gpu:
            report.notes.append(NO_GPU + ": attempts stay 'compiled' until evaluated on a GPU")
            self.progress(NO_GPU)
        self._seed_offline()
        status, error = RunStatus.FINISHED, None
        try:
            self._t_start = time.monotonic()
            self._drive(report)
        except KeyboardInterrupt:
            status, error = RunStatus.INTERRUPTED, "interrupted by the user"
            report.stop_reason = error
            raise
        except Exception as e:
            status, error = RunStatus.FAILED, f"{type(e).__name__}: {e}"
            raise
        finally:
            self.store.finish_run(self.run_id, status, error)
            report.spent = self.spent
            report.problems = self._summary()
        self.progress(f"stopped: {report.stop_reason}")
        return report

    def _drive(self, report: LoopReport) -> None:
        """Planner rounds until one runs nothing; each round's sessions end before the next is planned
        (solforge.orchestrate replaces this with a pipeline that plans as each session ends)."""
        for rnd in range(self.cfg.max_rounds):
            report.rounds = rnd + 1
            self.spent.wall_seconds = time.monotonic() - self._t_start
            decisions = self._plan(self._states(), self.cfg.budget, self.spent, self.cfg.planner,
                                   self.cfg.runs_per_round)
            self._record(decisions)
            runs = [d for d in decisions if d.action is Action.RUN]
            if not runs:
                report.stop_reason = decisions[-1].reason if decisions else "nothing to do"
                return
            self._run_sessions(runs)
        report.stop_reason = f"round limit ({self.cfg.max_rounds}) reached"

    def _plan(self, states, budget, spent, planner_cfg, n) -> list[Decision]:
        """One planner round (a hook: solforge.orchestrate runs it as its own stage)."""
        return plan_round(states, budget, spent, planner_cfg, n)

    def _run_sessions(self, runs: Sequence[Decision]) -> None:
        """One round's sessions; in order here (solforge.orchestrate runs them concurrently)."""
        for d in runs:
            self._session(d)

    def _session(self, d: Decision) -> None:
        problem = self.problems[d.problem]
        worker = self.workers[d.worker.value]
        if self.lab.has_gpu:
            self._ensure_baseline(problem)
        ctx = self._context(problem)
        self.progress(f"{problem.name}: {d.worker.value}/{d.language} x{d.attempts} ({d.reason})")
        try:
            res = worker.propose(problem, d.language, ctx, self._trier(problem, worker.name),
                                 d.attempts)
        except _OutOfTime:
            return  # the next planner round records the stop
        if not res.tried:
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
        """T_b for every workload (SOL scores need it): from the store, else measured here, once."""
        sols = self.lab.roofline(problem)
        if all(s.t_base_ms is not None for s in sols) or problem.name in self._baselined:
            return
        self._baselined.add(problem.name)
        import tempfile
        from pathlib import Path

        from ..evaluate.baseline import time_problem

        t0 = time.perf_counter()
        rows = []
        with tempfile.TemporaryDirectory(prefix="solforge-baseline-") as tmp:
            try:
                for r in time_problem(problem, "eager", Path(tmp), reps=self.lab.baseline_reps,
                                      workload_budget_s=0.5, problem_budget_s=30.0,
                                      blob_roots=_blob_roots(problem)):
                    rows.append(r)
            except Exception as e:  # noqa: BLE001 - no baseline: attempts are timed but not scored
                self.progress(f"{problem.name}: baseline failed: {type(e).__name__}: {e}")
        self.spent.add(gpu_seconds=time.perf_counter() - t0)
        if rows:
            self.store.insert_rows("baselines", [_fit(self.store, "baselines", r.to_json())
                                                 for r in rows])
        by = {r.workload_uuid: r.median_ms for r in rows if r.status == "passed" and r.median_ms}
        for s in sols:
            if s.uuid in by and s.t_base_ms is None:
                s.t_base_ms, s.t_base_variant = by[s.uuid], "eager"
        self.progress(f"{problem.name}: baseline measured on {len(by)}/{len(sols)} workloads "
                      f"({time.perf_counter() - t0:.1f} s)")

    # ---- one attempt -----------------------------------------------------------------------------
    def _trier(self, problem, agent: str):
        def try_candidate(cand: Candidate, parent: Optional[str], call_ids: list) -> tuple[str, Outcome]:
            return self.try_candidate(problem, agent, cand, parent, call_ids)
        return try_candidate

    def _open_attempt(self, problem, agent: str, cand: Candidate, parent: Optional[str],
                      call_ids: Sequence[str]) -> str:
        """Write the attempt (queued) before anything runs, and link the LLM calls that made it."""
        aid = self.store.create_attempt(problem.name, run_id=self.run_id, parent_id=parent,
                                        agent=agent, model=self.cfg.model if agent == "llm" else None,
                                        language=cand.language, candidate=cand, params=cand.params,
                                        source_hash=cand.source_hash())
        if call_ids:
            marks = ",".join("?" * len(call_ids))
            self.store.execute(f"UPDATE llm_calls SET attempt_id = ? WHERE id IN ({marks})",
                               [aid, *call_ids])
        return aid

    def try_candidate(self, problem, agent: str, cand: Candidate, parent: Optional[str],
                      call_ids: Sequence[str] = ()) -> tuple[str, Outcome]:
        s = self.store
        wall = self.cfg.budget.wall_seconds
        if wall is not None and time.monotonic() - self._t_start >= wall:
            raise _OutOfTime()
        aid = self._open_attempt(problem, agent, cand, parent, call_ids)
        self.spent.add(attempts=1)
        bad = self.lab.check(problem, cand)
        if bad is not None:
            self._finish(aid, bad, compile_row={"status": "invalid", "log": bad.message})
            return self._note(problem, aid, bad)
        out, res = self.lab.compile(cand)
        compile_row = _fit(s, "compile_results", res.to_row(aid)) if res else {
            "attempt_id": aid, "status": "error", "log": out.compile_log}
        if out.status is not AttemptOutcome.COMPILED:
            self._finish(aid, out, compile_row=compile_row)
            return self._note(problem, aid, out)
        s.mark_attempt(aid, "compiled", rows={"compile_results": [compile_row]},
                       outcome=AttemptOutcome.COMPILED.value)
        if not self.lab.has_gpu:
            out.message = NO_GPU
            return self._note(problem, aid, out)
        ev = self.lab.evaluate(problem, cand, res)
        ev.compile_log, ev.compile_seconds, ev.cubin_hash = out.compile_log, out.compile_seconds, out.cubin_hash
        self.spent.add(gpu_seconds=ev.gpu_seconds)
        self._finish(aid, ev)
        return self._note(problem, aid, ev)

    def _finish(self, aid: str, out: Outcome, compile_row: Optional[dict] = None) -> None:
        rows: dict[str, list] = {}
        if compile_row is not None:
            compile_row = {**compile_row, "attempt_id": aid}
            rows["compile_results"] = [compile_row]
        evals = [_fit(self.store, "eval_results", {**r, "attempt_id": aid}) for r in out.eval_rows]
        if not evals and out.workloads:
            evals = [{"attempt_id": aid, "workload_uuid": w.uuid, "status": w.status,
                      "correct": w.correct, "max_abs_err": w.max_abs_err,
                      "max_rel_err": w.max_rel_err, "matched_ratio": w.matched_ratio,
                      "median_ms": w.median_ms, "message": w.error[:4000]} for w in out.workloads]
        if evals:
            rows["eval_results"] = evals
        scores = [{"attempt_id": aid, "workload_uuid": w.uuid, "speedup": w.speedup,
                   "sol_score": w.sol_score, "t_kernel_ms": w.median_ms, "t_baseline_ms": w.t_base_ms,
                   "t_sol_ms": w.t_sol_ms, "baseline_variant": w.t_base_variant or "eager"}
                  for w in out.workloads if w.median_ms is not None and w.correct]
        if scores:
            rows["scores"] = scores
        final = "evaluated" if evals else "failed"
        self.store.mark_attempt(aid, final, rows=rows, outcome=out.status.value,
                                sol_score=out.sol_score, gpu_seconds=out.gpu_seconds,
                                **_eval_fields(out),
                                error=None if out.status is AttemptOutcome.OK else
                                f"{out.status.value}: {out.message}"[:4000])

    def _note(self, problem, aid: str, out: Outcome) -> tuple[str, Outcome]:
        fb = self._feedback.setdefault(problem.name, [])
        fb.append((f"attempt {aid[:8]}", out))
        del fb[:-10]
        score = f" SOL {out.sol_score:.3f}" if out.sol_score is not None else ""
        self.progress(f"  {problem.name} {aid[:8]}: {out.status.value}{score} {out.message[:120]}")
        return aid, out

    # ---- what the planner and workers see --------------------------------------------------------
    def _states(self) -> list[ProblemState]:
        hist = history.histories(self.store, list(self.problems), run_id=self.run_id)
        states = []
        offline = self.workers.get("offline")
        for name, p in self.problems.items():
            attempts = hist[name]
            # sessions that produced nothing count as failures, so an LLM that never answers with a
            # candidate is not picked forever
            attempts += [AttemptSummary("llm", "cuda", "parse_error")] * self._empty.get(name, 0)
            states.append(ProblemState(name, attempts,
                                       has_offline_family=bool(offline and offline.has_family(p)),
                                       languages=tuple(self.cfg.languages)))
        return states

    def _context(self, problem) -> Context:
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
        self.spent.add(dollars=row.get("cost_usd") or 0.0)
        self.store.insert_rows("llm_calls", [{**row, "run_id": self.run_id}])

    def _summary(self) -> dict[str, ProblemReport]:
        out = {}
        if self.run_id is None:
            return out
        rows = self.store.query(
            "SELECT problem, outcome, count(*) AS n, max(sol_score) AS best FROM attempts "
            "WHERE run_id = ? GROUP BY problem, outcome", [self.run_id])
        for r in rows:
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
                "arch": self.lab.arch, "gpu": self.lab.has_gpu, "started": time.time()}


class _OutOfTime(Exception):
    """The wall-clock budget ran out between two attempts of a session."""


def _blob_roots(problem) -> list:
    from pathlib import Path

    src = getattr(problem, "source", None)
    return [Path(src)] if src and Path(src).is_dir() else []


def _eval_fields(out: Outcome) -> dict:
    """attempts.eval_launch / eval_mode / eval_phases (migration 031), NULL when nothing was evaluated;
    set by the same UPDATE as the status, so the record is never half-written."""
    return {"eval_launch": out.eval_launch or None, "eval_mode": out.eval_mode or None,
            "eval_phases": out.eval_phases or None}


def _fit(store, table: str, row: dict) -> dict:
    """Only the columns the table has (result objects carry more than the store keeps)."""
    cols = store.columns(table)
    return {k: v for k, v in row.items() if k in cols}


def _new_id() -> str:
    from ..store import new_id

    return new_id()
