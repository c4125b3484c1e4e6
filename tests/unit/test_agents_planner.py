"""The planner's decisions on synthetic histories (pure logic: no store, no GPU)."""

from __future__ import annotations

from solforge.agents.planner import (Action, AttemptSummary, Budget, PlannerConfig, ProblemState,
                                     Spent, Worker, attempts_since_improvement, improvements,
                                     plan_round)


def ok(score, worker="offline", secs=2.0, lang="cuda"):
    return AttemptSummary(worker, lang, "ok", score, secs)


def fail(status="compile_error", worker="offline", lang="cuda"):
    return AttemptSummary(worker, lang, status, None, 0.0)


def runs(decisions):
    return [d for d in decisions if d.action is Action.RUN]


def by_problem(decisions):
    return {d.problem: d for d in decisions if d.problem}


def simulate(curves: dict, rounds: int, cfg: PlannerConfig) -> dict[str, int]:
    """Run the planner against problems whose n-th attempt scores curves[name](n); count attempts."""
    states = {n: ProblemState(n, has_offline_family=True) for n in curves}
    spent = Spent()
    for _ in range(rounds):
        ds = runs(plan_round(list(states.values()), Budget(), spent, cfg))
        if not ds:
            break
        for d in ds:
            st = states[d.problem]
            for _ in range(d.attempts):
                st.attempts.append(ok(curves[d.problem](len(st.attempts)), secs=1.0))
                spent.add(attempts=1, gpu_seconds=1.0)
    return {n: len(s.attempts) for n, s in states.items()}


def test_budget_shifts_to_the_problem_that_improves():
    cfg = PlannerConfig(attempts_per_round=1, stuck_after=50)
    counts = simulate({"improving": lambda n: min(0.9, 0.2 + 0.015 * n),
                       "flat": lambda n: 0.2}, rounds=40, cfg=cfg)
    assert counts["improving"] + counts["flat"] == 40
    assert counts["improving"] >= 3 * counts["flat"], counts
    assert counts["flat"] >= 1  # it was tried before the planner concentrated


def test_headroom_beats_a_problem_near_sol():
    cfg = PlannerConfig(attempts_per_round=1, stuck_after=50)
    counts = simulate({"far": lambda n: 0.3 + 0.01 * n, "near": lambda n: 0.9 + 0.001 * n},
                      rounds=30, cfg=cfg)
    assert counts["far"] > counts["near"], counts


def test_unattempted_problems_are_explored_first():
    states = [ProblemState("done_some", [ok(0.4), ok(0.41), ok(0.41)], has_offline_family=True),
              ProblemState("fresh", [], has_offline_family=True)]
    d = runs(plan_round(states, Budget(), Spent(), PlannerConfig()))
    assert [x.problem for x in d] == ["fresh"]
    skipped = by_problem(plan_round(states, Budget(), Spent(), PlannerConfig()))["done_some"]
    assert skipped.action is Action.SKIP and "lower priority" in skipped.reason


def test_stops_at_speed_of_light():
    states = [ProblemState("at_sol", [ok(0.5), ok(0.96)], has_offline_family=True),
              ProblemState("other", [ok(0.5)], has_offline_family=True)]
    ds = by_problem(plan_round(states, Budget(), Spent(), PlannerConfig(sol_target=0.95)))
    assert ds["at_sol"].action is Action.SKIP and "speed of light" in ds["at_sol"].reason
    assert ds["other"].action is Action.RUN


def test_stuck_problem_gets_nothing():
    hist = [ok(0.5)] + [ok(0.5)] * 8
    states = [ProblemState("stuck", hist, has_offline_family=True)]
    ds = plan_round(states, Budget(), Spent(), PlannerConfig(stuck_after=8))
    assert ds[0].action is Action.SKIP and ds[0].reason.startswith("stuck")
    assert ds[-1].action is Action.STOP  # nothing else to do


def test_an_earlier_runs_stall_does_not_bar_a_new_run():
    from dataclasses import replace

    earlier = [replace(a, this_run=False) for a in [ok(0.5)] + [ok(0.5)] * 12]
    fresh = [ProblemState("p", earlier, has_offline_family=True)]
    ds = plan_round(fresh, Budget(), Spent(), PlannerConfig(stuck_after=8))
    assert ds[0].action is Action.RUN  # a new run (new family space, new code) looks again
    stalled = [ProblemState("p", earlier + [ok(0.5)] * 8, has_offline_family=True)]
    ds = plan_round(stalled, Budget(), Spent(), PlannerConfig(stuck_after=8))
    assert ds[0].action is Action.SKIP and ds[0].reason.startswith("stuck")  # 8 of its own: stuck
    # and the earlier best still sets the bar: repeating it is no gain
    assert attempts_since_improvement(earlier + [ok(0.5)] * 3, PlannerConfig()) == 3


def test_stalled_offline_search_hands_over_to_the_llm():
    hist = [ok(0.5)] + [ok(0.5)] * 4
    st = ProblemState("p", hist, has_offline_family=True)
    cfg = PlannerConfig(stuck_after=8, llm_available=True)
    d = runs(plan_round([st], Budget(), Spent(), cfg))[0]
    assert d.worker is Worker.LLM and "offline search stalled" in d.reason
    cfg.llm_available = False
    d = runs(plan_round([st], Budget(), Spent(), cfg))[0]
    assert d.worker is Worker.OFFLINE


def test_failure_streak_switches_language_then_gives_up():
    cfg = PlannerConfig(failure_streak=3, llm_available=True)
    st = ProblemState("p", [fail(worker="llm", lang="cuda")] * 3)
    d = runs(plan_round([st], Budget(), Spent(), cfg))[0]
    assert (d.worker, d.language) == (Worker.LLM, "cute")
    st.attempts += [fail(worker="llm", lang="cute")] * 3
    ds = plan_round([st], Budget(), Spent(), cfg)
    assert ds[0].action is Action.SKIP and "failed 3 times" in ds[0].reason


def test_no_worker_without_family_or_model():
    ds = plan_round([ProblemState("p")], Budget(), Spent(), PlannerConfig(llm_available=False))
    assert ds[0].action is Action.SKIP and "no kernel family" in ds[0].reason
    assert "no LLM is configured" in ds[0].reason


def test_llm_dollar_budget_spent():
    cfg = PlannerConfig(llm_available=True)
    ds = plan_round([ProblemState("p")], Budget(dollars=1.0), Spent(dollars=1.0), cfg)
    assert ds[0].action is Action.SKIP and "dollar budget is spent" in ds[0].reason


def test_budget_exhaustion_stops_and_caps_the_last_round():
    st = [ProblemState("p", has_offline_family=True)]
    cfg = PlannerConfig(attempts_per_round=4)
    assert plan_round(st, Budget(attempts=10), Spent(attempts=10), cfg)[0].action is Action.STOP
    assert "attempt budget" in plan_round(st, Budget(attempts=10), Spent(attempts=10), cfg)[0].reason
    assert runs(plan_round(st, Budget(attempts=10), Spent(attempts=8), cfg))[0].attempts == 2
    ds = plan_round(st, Budget(gpu_seconds=60), Spent(gpu_seconds=61), cfg)
    assert ds[0].action is Action.STOP and "GPU-second" in ds[0].reason


def test_without_gpu_one_compiled_candidate_is_enough():
    cfg = PlannerConfig(gpu_available=False)
    states = [ProblemState("compiled", [AttemptSummary("offline", "cuda", "compiled")],
                           has_offline_family=True),
              ProblemState("failing", [fail()], has_offline_family=True)]
    ds = by_problem(plan_round(states, Budget(), Spent(), cfg, max_runs=2))
    assert ds["compiled"].action is Action.SKIP and "need a GPU" in ds["compiled"].reason
    assert ds["failing"].action is Action.RUN and "no GPU" in ds["failing"].reason


def test_improvements_and_since():
    cfg = PlannerConfig(min_gain=0.01)
    hist = [fail(), ok(0.3), ok(0.305), ok(0.5, worker="llm"), ok(0.4)]
    assert improvements(hist, 0.01) == [0.0, 0.3, 0.0, 0.2, 0.0]
    assert attempts_since_improvement(hist, cfg) == 1
    assert attempts_since_improvement(hist, cfg, "offline") == 2  # 0.305 and 0.4 beat nothing
    assert attempts_since_improvement(hist, cfg, "llm") == 0


def test_decisions_serialise_for_the_store():
    d = plan_round([ProblemState("p", has_offline_family=True)], Budget(attempts=3), Spent(),
                   PlannerConfig())[0]
    row = d.row()
    assert row["action"] == "run" and row["worker"] == "offline" and row["attempts"] == 3
    assert "not tried yet" in row["reason"] and row["metrics"]["attempts"] == 0
    st = ProblemState("p", [ok(0.3), ok(0.4)], has_offline_family=True)
    row = plan_round([st], Budget(), Spent(), PlannerConfig())[0].row()
    assert "priority" in row["reason"] and "headroom 0.6" in row["reason"] and row["priority"] > 0


def test_a_plateau_releases_the_budget():
    """Once the improving problem stops improving, attempts flow back to the other one."""
    cfg = PlannerConfig(attempts_per_round=1, stuck_after=50)
    counts = simulate({"plateau": lambda n: min(0.6, 0.2 + 0.05 * n),
                       "slow": lambda n: 0.2 + 0.002 * n}, rounds=60, cfg=cfg)
    assert counts["slow"] >= 20, counts


def test_untried_problems_go_cheapest_first():
    """Among problems of equal priority (untried), the one whose workloads' T_b sum is smaller is
    planned first; one without a baseline goes after those with one."""
    states = [ProblemState("a_costly", has_offline_family=True, cost_ms=40.0),
              ProblemState("b_unknown", has_offline_family=True),
              ProblemState("c_cheap", has_offline_family=True, cost_ms=0.5)]
    order = [d.problem for d in runs(plan_round(states, Budget(), Spent(),
                                                PlannerConfig(gpu_available=True), max_runs=3))]
    assert order == ["c_cheap", "a_costly", "b_unknown"]
    tried = ProblemState("c_cheap", [ok(0.3)], has_offline_family=True, cost_ms=0.5)
    first = runs(plan_round([states[0], tried], Budget(), Spent(), PlannerConfig(gpu_available=True)))
    assert first[0].problem == "a_costly"  # untried before ranked, whatever the cost


def test_a_problem_whose_attempts_were_all_interrupted_ranks_with_the_untried():
    """An attempt whose run ended before its verdict says nothing about the problem: such a problem
    keeps its cheapest-first place among the untried instead of going behind every one of them."""
    cut = AttemptSummary("offline", "cuda", "compiled", None, 0.0, interrupted=True)
    states = [ProblemState("a_costly_untried", has_offline_family=True, cost_ms=40.0),
              ProblemState("b_cheap_cut", [cut], has_offline_family=True, cost_ms=0.5),
              ProblemState("c_ranked", [ok(0.3)], has_offline_family=True, cost_ms=0.1)]
    decisions = plan_round(states, Budget(), Spent(), PlannerConfig(gpu_available=True), max_runs=3)
    order = [d.problem for d in runs(decisions)]
    assert order == ["b_cheap_cut", "a_costly_untried", "c_ranked"]
    assert "no verdict yet (1 attempt(s) interrupted)" in by_problem(decisions)["b_cheap_cut"].reason
    # a verdict after the interruption ranks it like any tried problem again
    states[1].attempts.append(ok(0.2))
    order = [d.problem for d in runs(plan_round(states, Budget(), Spent(),
                                                PlannerConfig(gpu_available=True), max_runs=3))]
    assert order[0] == "a_costly_untried"


def test_a_session_cut_off_by_a_dead_run_is_paid_first_and_past_the_skips():
    """On resume, the attempts a killed session still owes go before any ranking, with its worker,
    even where the attempts it did make would now skip the problem (compiled without a GPU)."""
    from solforge.agents.planner import OwedSession

    done = AttemptSummary("offline", "cuda", "compiled", None, 0.0)
    states = [ProblemState("a_untried", has_offline_family=True, cost_ms=0.1),
              ProblemState("b_cut", [done], has_offline_family=True, cost_ms=50.0,
                           owed=OwedSession("offline", "cuda", 2))]
    cfg = PlannerConfig(gpu_available=False, attempts_per_round=4)
    decisions = plan_round(states, Budget(), Spent(), cfg, max_runs=1)
    (d,) = runs(decisions)
    assert (d.problem, d.attempts) == ("b_cut", 2) and "2 attempt(s) owed" in d.reason
    # without it, the problem is done (compiled, no GPU) and the untried one goes
    states[1].owed = None
    (d,) = runs(plan_round(states, Budget(), Spent(), cfg, max_runs=1))
    assert d.problem == "a_untried"
    # an owed LLM session with no LLM configured any more is planned like any other
    states[1].owed = OwedSession("llm", "cuda", 2)
    assert [d.problem for d in runs(plan_round(states, Budget(), Spent(), cfg, max_runs=2))] == ["a_untried"]
