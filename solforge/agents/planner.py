"""The planner: which problem gets the next attempts, with which worker and language, and why.

Pure decision logic: it reads a snapshot of the history (ProblemState per problem) and the budget, and
returns Decisions. It does no I/O; the loop turns its Decisions into planner_decisions rows. That keeps
it testable on synthetic histories.

How it ranks (each term is in the Decision's reason):
- headroom: 1 - best SOL score (a problem at its speed of light has nothing left to win);
- yield: SOL-score gained per GPU-second over the recent attempts (money goes where it buys progress);
- exploration: problems with few attempts get a bonus that decays with the attempt count, so every
  problem is tried before the planner concentrates;
- it stops spending on a problem at/near SOL (best >= sol_target), or stuck (no improvement in
  `stuck_after` attempts), and switches worker or language after a failure streak.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Optional, Sequence


class Worker(str, Enum):
    OFFLINE = "offline"
    LLM = "llm"


class Action(str, Enum):
    RUN = "run"    # spend the next attempts here
    SKIP = "skip"  # this problem gets nothing now (reason says why)
    STOP = "stop"  # the whole budget is spent: nothing more this run


# Attempt outcomes the planner distinguishes; mirrors the loop's AttemptOutcome values.
SUCCESS_STATUSES = {"ok", "compiled"}  # "compiled": passed compile but could not be timed (no GPU)
FAILURE_STATUSES = {"compile_error", "incorrect", "runtime_error", "timeout", "parse_error",
                    "invalid"}


UNTRIED_PRIORITY = 1000.0
OWED_PRIORITY = 2 * UNTRIED_PRIORITY  # a resumed job first ends the sessions its last run cut off


@dataclass
class AttemptSummary:
    """One past attempt, as much as the planner needs of it."""

    worker: str
    language: str
    status: str
    sol_score: Optional[float] = None  # mean over workloads; None when not timed
    gpu_seconds: float = 0.0
    dollars: float = 0.0
    this_run: bool = True  # False: an earlier run's attempt in the same database
    # its run ended before it had a verdict (attempts.status 'interrupted'): it says nothing about
    # the problem, so a problem whose attempts are all interrupted still counts as not tried
    interrupted: bool = False


@dataclass
class OwedSession:
    """A session an earlier run of the same job started and did not finish (its process died): the
    worker and language it ran and the attempts it still owes. Handed out first on resume, so a job
    killed and resumed makes the candidates it would have made uninterrupted."""

    worker: str
    language: str
    attempts: int


@dataclass
class ProblemState:
    name: str
    attempts: list[AttemptSummary] = field(default_factory=list)  # oldest first
    has_offline_family: bool = False  # solforge.kernels has a family for it
    languages: tuple[str, ...] = ("cuda", "cute")
    # T_b summed over its workloads (None: no baseline yet): what one evaluation of it roughly
    # costs; among problems of equal priority (every untried one) the cheaper goes first, so a
    # budgeted pass over many new problems reaches the most
    cost_ms: Optional[float] = None
    owed: Optional[OwedSession] = None

    @property
    def tried(self) -> list[AttemptSummary]:
        """The attempts that reached a verdict (compiled, evaluated or failed)."""
        return [a for a in self.attempts if not a.interrupted]

    @property
    def best_sol(self) -> Optional[float]:
        scores = [a.sol_score for a in self.attempts if a.sol_score is not None]
        return max(scores) if scores else None


@dataclass
class Budget:
    """Caps for one optimize run. None means no cap on that resource."""

    attempts: Optional[int] = None
    gpu_seconds: Optional[float] = None
    dollars: Optional[float] = None
    wall_seconds: Optional[float] = None  # the whole run, compile and planning included


@dataclass
class Spent:
    attempts: int = 0
    gpu_seconds: float = 0.0
    dollars: float = 0.0
    wall_seconds: float = 0.0  # set by the loop before each round

    def add(self, attempts: int = 0, gpu_seconds: float = 0.0, dollars: float = 0.0) -> None:
        self.attempts += attempts
        self.gpu_seconds += gpu_seconds
        self.dollars += dollars


@dataclass
class PlannerConfig:
    sol_target: float = 0.95       # a problem whose best SOL score reaches this is done
    stuck_after: int = 8           # attempts in a row without improvement -> stuck
    min_gain: float = 1e-3         # a SOL-score gain smaller than this is not an improvement
    failure_streak: int = 4        # failures in a row with one worker/language -> switch
    recent_window: int = 6         # attempts the yield is measured over
    explore_weight: float = 1.0    # weight of the exploration bonus
    yield_weight: float = 50.0     # weight of SOL gain per GPU-second
    attempts_per_round: int = 4    # attempts handed to one problem per decision
    llm_available: bool = False    # a model is configured
    gpu_available: bool = True     # without one, nothing is timed: rank by attempts only
    min_dollars_for_llm: float = 0.01


@dataclass
class Decision:
    action: Action
    problem: Optional[str]
    worker: Optional[Worker]
    language: Optional[str]
    attempts: int
    priority: float
    reason: str
    metrics: dict = field(default_factory=dict)

    def row(self) -> dict:
        d = asdict(self)
        d["action"] = self.action.value
        d["worker"] = self.worker.value if self.worker else None
        return d


def improvements(attempts: Sequence[AttemptSummary], min_gain: float) -> list[float]:
    """Gain in best-so-far SOL score that each attempt brought (0 when none)."""
    best = None
    out = []
    for a in attempts:
        gain = 0.0
        if a.sol_score is not None:
            if best is None:
                gain = a.sol_score
                best = a.sol_score
            elif a.sol_score > best + min_gain:
                gain = a.sol_score - best
                best = a.sol_score
        out.append(gain)
    return out


def attempts_since_improvement(attempts: Sequence[AttemptSummary], cfg: PlannerConfig,
                               worker: Optional[str] = None) -> int:
    """Attempts (by `worker`, or by anyone) since the last one that raised the best SOL score.

    Gains are measured against the problem's best so far whoever found it, so a worker that only
    repeats what another found counts as not improving."""
    gains = improvements(attempts, cfg.min_gain)
    n = 0
    for a, g in zip(reversed(attempts), reversed(gains)):
        # Counted within this run only: a new run (new family space, new code, new baselines) gets a
        # fresh look at a problem an earlier run gave up on; gains still count against every run's best.
        if not a.this_run:
            break
        if worker is not None and a.worker != worker:
            continue
        if g > 0:
            break
        n += 1
    return n


def failure_streak(attempts: Sequence[AttemptSummary], worker: str, language: str) -> int:
    n = 0
    for a in reversed([a for a in attempts if a.worker == worker and a.language == language]):
        if not a.this_run:
            break  # as above: an earlier run's failures do not bar this run
        if a.status in FAILURE_STATUSES:
            n += 1
        else:
            break
    return n


def recent_yield(attempts: Sequence[AttemptSummary], cfg: PlannerConfig) -> float:
    """SOL-score gained per GPU-second over the last `recent_window` attempts.

    The first score a problem gets is its starting level, not progress, so it gains nothing here."""
    if not attempts:
        return 0.0
    gains = improvements(attempts, cfg.min_gain)
    first = next((i for i, a in enumerate(attempts) if a.sol_score is not None), None)
    if first is not None:
        gains[first] = 0.0
    gains = gains[-cfg.recent_window:]
    secs = sum(a.gpu_seconds for a in attempts[-cfg.recent_window:])
    return sum(gains) / max(secs, 1.0)  # at least 1 s: a free attempt is not infinitely good


def _llm_ok(cfg: PlannerConfig, budget: Budget, spent: Spent) -> bool:
    """A model is configured and the dollar budget still covers a call."""
    return cfg.llm_available and (budget.dollars is None
                                  or budget.dollars - spent.dollars >= cfg.min_dollars_for_llm)


def choose_worker(state: ProblemState, cfg: PlannerConfig, budget: Budget, spent: Spent
                  ) -> tuple[Optional[Worker], Optional[str], str]:
    """(worker, language, why). None (with why) when no worker can make progress on this problem."""
    llm_ok = _llm_ok(cfg, budget, spent)
    options: list[tuple[Worker, str]] = []
    if state.has_offline_family:
        options.append((Worker.OFFLINE, "cuda"))
    if llm_ok:
        options.extend((Worker.LLM, lang) for lang in state.languages)
    if not options:
        why = "no kernel family matches it (or its search space is exhausted)"
        if not cfg.llm_available:
            why += " and no LLM is configured"
        elif not llm_ok:
            why += " and the LLM dollar budget is spent"
        return None, None, why
    viable, excluded = [], []
    for w, lang in options:
        since = attempts_since_improvement(state.attempts, cfg, w.value)
        streak = failure_streak(state.attempts, w.value, lang)
        if since >= cfg.stuck_after:
            excluded.append(f"{w.value} stuck ({since} attempts without improvement)")
        elif streak >= cfg.failure_streak:
            excluded.append(f"{w.value}/{lang} failed {streak} times in a row")
        else:
            viable.append((w, lang, since, streak))
    if not viable:
        return None, None, "; ".join(dict.fromkeys(excluded))
    # An offline search that has stalled hands over to the LLM, which can write a kernel no family
    # has; the LLM, after failures in one language, tries the other (failed ones are excluded above).
    for w, lang, since, streak in viable:
        if w is Worker.OFFLINE:
            if since >= max(1, cfg.stuck_after // 2) and any(v[0] is Worker.LLM for v in viable):
                continue
            return w, lang, "a kernel family matches: offline search first (no LLM cost)"
        why = ("offline search stalled" if state.has_offline_family
               else "no kernel family matches")
        if streak:
            why += f"; {streak} failure(s) in a row in {lang}"
        if excluded:
            why += "; " + "; ".join(excluded)
        return w, lang, why
    w, lang, _, _ = viable[0]
    return w, lang, "only viable worker"


def rank(state: ProblemState, cfg: PlannerConfig) -> tuple[float, dict]:
    """A problem's priority and the numbers behind it."""
    best = state.best_sol
    headroom = 1.0 - (best if best is not None else 0.0)
    # An interrupted attempt (its run ended first) is no verdict: a problem with only those ranks
    # with the untried ones, cheapest first, instead of behind every never-tried problem.
    tried = state.tried
    n = len(tried)
    y = recent_yield(tried, cfg)
    explore = cfg.explore_weight / math.sqrt(1.0 + n)
    if n == 0:
        priority = UNTRIED_PRIORITY + explore  # every problem is tried once before any ranking
    elif cfg.gpu_available:
        priority = max(headroom, 0.0) * (explore + cfg.yield_weight * y)
    else:
        priority = explore  # no timings: spread attempts evenly
    return priority, {"best_sol": best, "headroom": round(headroom, 4), "attempts": n,
                      "yield_per_gpu_s": round(y, 6), "explore": round(explore, 4)}


def budget_exhausted(budget: Budget, spent: Spent) -> Optional[str]:
    if budget.attempts is not None and spent.attempts >= budget.attempts:
        return f"attempt budget spent ({spent.attempts}/{budget.attempts})"
    if budget.gpu_seconds is not None and spent.gpu_seconds >= budget.gpu_seconds:
        return f"GPU-second budget spent ({spent.gpu_seconds:.1f}/{budget.gpu_seconds:.1f} s)"
    if budget.wall_seconds is not None and spent.wall_seconds >= budget.wall_seconds:
        return f"wall-clock budget spent ({spent.wall_seconds:.0f}/{budget.wall_seconds:.0f} s)"
    return None


def plan_round(states: Sequence[ProblemState], budget: Budget, spent: Spent, cfg: PlannerConfig,
               max_runs: int = 1) -> list[Decision]:
    """One planner round: a SKIP for each problem that gets nothing (with why), RUN decisions for the
    `max_runs` best-ranked ones, or a single STOP when the budget is spent or nothing can progress."""
    why_stop = budget_exhausted(budget, spent)
    if why_stop:
        return [Decision(Action.STOP, None, None, None, 0, 0.0, why_stop, _spent_metrics(budget, spent))]
    out: list[Decision] = []
    ranked: list[tuple[float, Decision]] = []
    for st in states:
        prio, m = rank(st, cfg)
        owed = _owed_decision(st, cfg, budget, spent, m)
        if owed is not None:
            ranked.append((owed.priority, owed))
            continue
        best = st.best_sol
        if cfg.gpu_available and best is not None and best >= cfg.sol_target:
            out.append(Decision(Action.SKIP, st.name, None, None, 0, prio,
                                f"at/near speed of light: best SOL score {best:.3f} >= "
                                f"{cfg.sol_target}", m))
            continue
        if not cfg.gpu_available and any(a.status in SUCCESS_STATUSES for a in st.attempts):
            # Without a GPU more candidates cannot be ranked: one that compiles is all we can earn.
            out.append(Decision(Action.SKIP, st.name, None, None, 0, prio,
                                "has a compiled candidate; correctness and timing need a GPU", m))
            continue
        worker, lang, why = choose_worker(st, cfg, budget, spent)
        if worker is None:
            label = "stuck" if "stuck" in why else "no worker"
            out.append(Decision(Action.SKIP, st.name, None, None, 0, prio, f"{label}: {why}", m))
            continue
        if not st.tried:
            what = (f"no verdict yet ({len(st.attempts)} attempt(s) interrupted)" if st.attempts
                    else "not tried yet")
            reason = f"{what} (explored before ranking); worker {worker.value}/{lang}: {why}"
        elif cfg.gpu_available:
            reason = (f"priority {prio:.4f} = headroom {m['headroom']} x (explore {m['explore']} + "
                  f"{cfg.yield_weight} x yield {m['yield_per_gpu_s']}/GPU-s); worker {worker.value}/"
                  f"{lang}: {why}")
        else:
            reason = (f"priority {prio:.4f} = explore {m['explore']} (no GPU: nothing is timed, "
                      f"attempts spread evenly); worker {worker.value}/{lang}: {why}")
        ranked.append((prio, Decision(Action.RUN, st.name, worker, lang, 0, prio, reason, m)))
    if not ranked:
        return out + [Decision(Action.STOP, None, None, None, 0, 0.0,
                               "no problem can make progress (each is at SOL, stuck, without a worker, or compiled and waiting for a GPU)",
                               _spent_metrics(budget, spent))]
    cost = {st.name: st.cost_ms for st in states}
    ranked.sort(key=lambda t: (-t[0], math.inf if cost.get(t[1].problem) is None
                               else cost[t[1].problem], t[1].problem))
    left = None if budget.attempts is None else budget.attempts - spent.attempts
    for i, (_, d) in enumerate(ranked):
        if i < max_runs and (left is None or left > 0):
            n = d.metrics.get("owed") or cfg.attempts_per_round   # a cut-off session: what it owes
            d.attempts = n if left is None else min(n, left)
            if left is not None:
                left -= d.attempts
            out.append(d)
        else:
            out.append(Decision(Action.SKIP, d.problem, None, None, 0, d.priority,
                                f"ranked {i + 1}/{len(ranked)}: lower priority this round "
                                f"({d.priority:.4f})", d.metrics))
    return out


def _owed_decision(st: ProblemState, cfg: PlannerConfig, budget: Budget, spent: Spent,
                   m: dict) -> Optional[Decision]:
    """The rest of a session an earlier run of this job cut off, before any ranking and past the
    skips (at SOL, compiled without a GPU) that its first attempts may now trigger: the
    uninterrupted job would have made them. None when its worker is not available any more."""
    o = st.owed
    if o is None or o.attempts <= 0:
        return None
    try:
        w = Worker(o.worker)
    except ValueError:
        return None
    if (w is Worker.OFFLINE and not st.has_offline_family) or \
            (w is Worker.LLM and not _llm_ok(cfg, budget, spent)):
        return None
    return Decision(Action.RUN, st.name, w, o.language, 0, OWED_PRIORITY,
                    f"resumes a session its run left unfinished: {o.attempts} attempt(s) owed; "
                    f"worker {w.value}/{o.language}", dict(m, owed=o.attempts))


def _spent_metrics(budget: Budget, spent: Spent) -> dict:
    return {"spent": asdict(spent), "budget": asdict(budget)}
