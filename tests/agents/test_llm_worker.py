"""The LLM worker end to end: LiteLLM over real HTTP to a scripted OpenAI-compatible server on
127.0.0.1, real NVRTC compiles, a real DuckDB store. No GPU needed (attempts end 'compiled')."""

from __future__ import annotations

import json

import pytest

from solforge.agents.llm import LlmWorker
from solforge.agents.llm_client import LlmConfig
from solforge.agents.planner import Budget, PlannerConfig
from solforge.orchestrate.loop import LoopConfig, OptimizeLoop

from .conftest import RMSNORM_H128, RMSNORM_H128_BROKEN, candidate_json, reply_with, write_unservable_problem
from .llm_server import ScriptedLLM

SECRET = "sk-test-0123456789abcdefSECRETKEY"


def make_loop(store, lab, problems, server, *, attempts=6, sleeps=None, **llm_kw):
    cfg = LoopConfig(budget=Budget(attempts=attempts),
                     planner=PlannerConfig(attempts_per_round=3), model="openai/scripted")
    loop = OptimizeLoop(store, problems, lab, {}, cfg, progress=lambda m: None)
    llm_cfg = LlmConfig(model="openai/scripted", api_base=server.api_base, api_key=SECRET,
                        backoff_s=0.01, backoff_max_s=0.05, timeout_s=20, **llm_kw)
    recorder = (lambda s: sleeps.append(s)) if sleeps is not None else (lambda s: None)
    worker = LlmWorker(llm_cfg, lab, on_call=loop.on_llm_call, sleep=recorder)
    loop.workers["llm"] = worker
    loop.cfg.planner.llm_available = True
    return loop, worker


def attempts_of(store, run_id):
    return store.query("SELECT * FROM attempts WHERE run_id = ? ORDER BY created_at", [run_id])


def test_repair_loop_fixes_a_compile_error(store, cpu_lab, rmsnorm_problem):
    script = [{"content": reply_with(candidate_json(RMSNORM_H128_BROKEN), "First try.")},
              {"content": reply_with(candidate_json(RMSNORM_H128), "Fixed the typo.")}]
    with ScriptedLLM(script) as server:
        loop, worker = make_loop(store, cpu_lab, [rmsnorm_problem], server)
        report = loop.run()
    rows = attempts_of(store, report.run_id)
    assert [r["outcome"] for r in rows] == ["compile_error", "compiled"]
    assert rows[0]["status"] == "failed" and rows[1]["status"] == "compiled"
    assert rows[1]["parent_id"] == rows[0]["id"]  # the repair refines the broken attempt
    # the model was shown NVRTC's own error for its second turn
    second = server.requests[1]["messages"][-1]["content"]
    assert 'identifier "sum_sq" is undefined' in second and "failed to compile" in second
    # the first prompt is built from the protocol and the problem
    first = server.requests[0]["messages"]
    assert "Output format" in first[0]["content"] and "Language guide: CUDA" in first[0]["content"]
    assert "021_rmsnorm_h128" in first[1]["content"] and "torch.rsqrt" in first[1]["content"]
    calls = store.query("SELECT * FROM llm_calls WHERE run_id = ? ORDER BY created_at", [report.run_id])
    assert len(calls) == 2 and all(c["status"] == "ok" for c in calls)
    assert [c["attempt_id"] for c in calls] == [rows[0]["id"], rows[1]["id"]]
    assert all(c["prompt_tokens"] > 0 and c["completion_tokens"] > 0 for c in calls)
    assert all(c["latency_s"] > 0 for c in calls)
    comp = store.query("SELECT status, log FROM compile_results WHERE attempt_id = ?", [rows[0]["id"]])
    assert comp[0]["status"] == "error" and "sum_sq" in comp[0]["log"]
    assert report.spent.attempts == 2
    # without a GPU one compiled candidate is all the run can earn: the planner stops there
    skips = store.query("SELECT reason FROM planner_decisions WHERE run_id = ? AND action = 'skip'",
                        [report.run_id])
    assert any("need a GPU" in r["reason"] for r in skips)


def test_tool_calls_compile_and_roofline_then_answer(store, cpu_lab, rmsnorm_problem):
    broken, good = candidate_json(RMSNORM_H128_BROKEN), candidate_json(RMSNORM_H128)
    script = [
        {"tool_calls": [{"name": "read_roofline", "arguments": {}},
                        {"name": "compile", "arguments": {"candidate": broken}}]},
        {"tool_calls": [{"name": "compile", "arguments": {"candidate": good}},
                        {"name": "latest_results", "arguments": {"n": 2}}]},
        {"content": reply_with(good)},
    ]
    with ScriptedLLM(script) as server:
        loop, _ = make_loop(store, cpu_lab, [rmsnorm_problem], server)
        report = loop.run()
    assert "tools" in server.requests[0] and {t["function"]["name"] for t in server.requests[0]["tools"]} \
        == {"compile", "evaluate", "read_roofline", "latest_results"}
    tool_msgs = [m for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert len(tool_msgs) == 2
    roof, comp = (json.loads(m["content"]) for m in tool_msgs)
    assert len(roof["workloads"]) == len(rmsnorm_problem.workloads)
    assert all(w["t_sol_ms"] and w["t_sol_ms"] > 0 for w in roof["workloads"])  # counted, no GPU
    assert comp["status"] == "compile_error" and "sum_sq" in comp["log"]
    tool_msgs = [json.loads(m["content"]) for m in server.requests[2]["messages"] if m["role"] == "tool"]
    assert tool_msgs[-2]["status"] == "ok"
    rows = attempts_of(store, report.run_id)
    assert [r["outcome"] for r in rows] == ["compiled"]  # tool compiles are not attempts


def test_evaluate_tool_without_gpu_is_an_attempt_and_says_so(store, cpu_lab, rmsnorm_problem):
    good = candidate_json(RMSNORM_H128)
    script = [{"tool_calls": [{"name": "evaluate", "arguments": {"candidate": good}}]},
              {"content": reply_with(good)}]
    with ScriptedLLM(script) as server:
        loop, _ = make_loop(store, cpu_lab, [rmsnorm_problem], server)
        report = loop.run()
    tool = [json.loads(m["content"]) for m in server.requests[1]["messages"] if m["role"] == "tool"][0]
    assert tool["status"] == "compiled" and "need a GPU" in tool["message"]
    rows = attempts_of(store, report.run_id)
    assert len(rows) == 1  # the final answer is the candidate it already benchmarked: not re-run


def test_provider_outage_then_recovery_retries_with_backoff(store, cpu_lab, rmsnorm_problem):
    sleeps: list[float] = []
    script = [{"status": 500}, {"status": 429}, {"status": 503},
              {"content": reply_with(candidate_json(RMSNORM_H128))}]
    with ScriptedLLM(script) as server:
        loop, _ = make_loop(store, cpu_lab, [rmsnorm_problem], server, sleeps=sleeps, retries=4)
        report = loop.run()
    assert len(server.requests) == 4
    assert len(sleeps) == 3 and sleeps == sorted(sleeps) and sleeps[0] < sleeps[-1]  # backoff grows
    calls = store.query("SELECT status FROM llm_calls WHERE run_id = ? ORDER BY created_at",
                        [report.run_id])
    assert [c["status"] for c in calls] == ["error", "rate_limited", "error", "ok"]
    assert [r["outcome"] for r in attempts_of(store, report.run_id)] == ["compiled"]


def test_persistent_outage_stops_cleanly_and_is_recorded(store, cpu_lab, rmsnorm_problem):
    sleeps: list[float] = []
    with ScriptedLLM([{"status": 500, "repeat": 50}]) as server:
        loop, _ = make_loop(store, cpu_lab, [rmsnorm_problem], server, sleeps=sleeps, retries=2)
        report = loop.run()
    assert len(server.requests) == 3  # first call + 2 retries, then the worker gives up
    run = store.query("SELECT status FROM runs WHERE id = ?", [report.run_id])[0]
    assert run["status"] == "finished"
    reasons = [r["reason"] for r in store.query(
        "SELECT reason FROM planner_decisions WHERE run_id = ? ORDER BY created_at", [report.run_id])]
    assert any("LLM worker stopped: provider outage" in r for r in reasons)
    assert "no worker" in reasons[-1] or "no problem can make progress" in reasons[-1]
    assert attempts_of(store, report.run_id) == []


@pytest.mark.parametrize("cap", ["calls", "tokens", "dollars"])
def test_budget_caps_stop_the_llm(store, cpu_lab, rmsnorm_problem, cap):
    broken = reply_with(candidate_json(RMSNORM_H128_BROKEN))
    kw = {"calls": {"max_calls": 2},
          "tokens": {"max_total_tokens": 1},  # the first reply already spends it
          "dollars": {"max_dollars": 0.001, "input_cost_per_token": 1e-6}}[cap]
    with ScriptedLLM([{"content": broken, "repeat": 20}]) as server:
        loop, worker = make_loop(store, cpu_lab, [rmsnorm_problem], server, attempts=20, **kw)
        report = loop.run()
    n = len(server.requests)
    assert n == {"calls": 2, "tokens": 1, "dollars": 1}[cap]
    reasons = " ".join(r["reason"] for r in store.query(
        "SELECT reason FROM planner_decisions WHERE run_id = ?", [report.run_id]))
    assert "LLM worker stopped: budget" in reasons
    if cap == "tokens":
        assert server.requests[0]["max_tokens"] == 1  # never asks for more than the cap has left
    if cap == "dollars":
        cost = store.query("SELECT sum(cost_usd) AS c FROM llm_calls WHERE run_id = ?",
                           [report.run_id])[0]["c"]
        assert cost >= 0.001 and report.spent.dollars == pytest.approx(cost)


def test_keys_never_reach_the_log(store, cpu_lab, rmsnorm_problem, monkeypatch):
    monkeypatch.setenv("MY_PROVIDER_API_KEY", "env-secret-value-42")
    leak = f"my key is {SECRET} and env-secret-value-42 " + reply_with(candidate_json(RMSNORM_H128))
    with ScriptedLLM([{"content": leak}]) as server:
        loop, _ = make_loop(store, cpu_lab, [rmsnorm_problem], server)
        report = loop.run()
    assert server.headers[0]["authorization"] == f"Bearer {SECRET}"  # the key was used ...
    dump = json.dumps(store.query("SELECT * FROM llm_calls"), default=str)
    dump += json.dumps(store.query("SELECT * FROM runs"), default=str)
    assert SECRET not in dump and "env-secret-value-42" not in dump  # ... and never stored
    assert "[REDACTED]" in dump
    assert [r["outcome"] for r in attempts_of(store, report.run_id)] == ["compiled"]


def test_reply_without_candidate_gets_a_parse_repair(store, cpu_lab, rmsnorm_problem):
    script = [{"content": "I think you should use shared memory."},
              {"content": reply_with(candidate_json(RMSNORM_H128))}]
    with ScriptedLLM(script) as server:
        loop, _ = make_loop(store, cpu_lab, [rmsnorm_problem], server)
        report = loop.run()
    assert "valid Candidate" in server.requests[1]["messages"][-1]["content"]
    assert [r["outcome"] for r in attempts_of(store, report.run_id)] == ["compiled"]


def test_model_benchmarks_with_the_evaluate_tool_and_repairs_correctness(store, rmsnorm_problem,
                                                                        tmp_path, monkeypatch):
    """The GPU branch with a stand-in evaluator (no GPU here): a kernel that forgets the weight is
    'incorrect' with its error, the fixed one is timed at 2x T_sol. The model benchmarks through the
    evaluate tool, sees the diff, fixes it, and answers with what it benchmarked."""
    from solforge.agents.lab import Lab
    from solforge.agents.outcome import AttemptOutcome, Outcome, WorkloadOutcome

    monkeypatch.setenv("SOLFORGE_CACHE_DIR", str(tmp_path / "cache"))

    def evaluate(problem, cand, compiled):
        src = cand.sources["kernel.cu"]
        sols = {s.uuid: s for s in lab.roofline(problem)}
        right = "__bfloat162float(w[c])" in src
        wls = [WorkloadOutcome(w.uuid, "passed" if right else "incorrect", right,
                               max_abs_err=1e-3 if right else 1.7, matched_ratio=1.0 if right else 0.2,
                               median_ms=2 * sols[w.uuid].t_sol_ms if right else None)
               for w in problem.workloads]
        lab.score(problem, wls)
        return Outcome(AttemptOutcome.OK if right else AttemptOutcome.INCORRECT,
                       "" if right else "incorrect on every workload", workloads=wls, gpu_seconds=0.5)

    lab = Lab(arch="sm_90a", gpu_profile="h200", has_gpu=True, evaluator=evaluate, store=store)
    lab.set_baselines(rmsnorm_problem, {s.uuid: 5 * s.t_sol_ms for s in lab.roofline(rmsnorm_problem)})
    no_weight = candidate_json(RMSNORM_H128.replace(" * __bfloat162float(w[c])", ""))
    good = candidate_json(RMSNORM_H128)
    script = [{"tool_calls": [{"name": "evaluate", "arguments": {"candidate": no_weight}}]},
              {"tool_calls": [{"name": "evaluate", "arguments": {"candidate": good}}]},
              {"content": reply_with(good)}]
    with ScriptedLLM(script) as server:
        loop, _ = make_loop(store, lab, [rmsnorm_problem], server, attempts=3, retries=0)
        report = loop.run()
    first = [json.loads(m["content"]) for m in server.requests[1]["messages"] if m["role"] == "tool"][0]
    assert first["status"] == "incorrect" and first["workloads"][0]["max_abs_err"] == 1.7
    second = [json.loads(m["content"]) for m in server.requests[2]["messages"] if m["role"] == "tool"][-1]
    assert second["status"] == "ok" and second["sol_score"] == pytest.approx(1 / (1 + 1 / 4))
    rows = attempts_of(store, report.run_id)
    assert [r["outcome"] for r in rows] == ["incorrect", "ok"] and rows[1]["parent_id"] == rows[0]["id"]
    assert rows[0]["status"] == "evaluated" and "incorrect" in rows[0]["error"]
    assert rows[1]["sol_score"] == pytest.approx(0.8) and report.spent.gpu_seconds == 1.0
    # the final answer was already benchmarked: no third attempt; the next session found the
    # scripted provider gone (HTTP 500) and the LLM worker stopped cleanly
    assert len(rows) == 2 and len(server.requests) == 4
    assert "provider outage" in report.stop_reason or "no worker" in report.stop_reason or \
        "no problem can make progress" in report.stop_reason


def test_optimize_cli_with_a_model(tmp_path, sol_execbench_dir, monkeypatch, capsys):
    """`solforge optimize --model ... --api-base ...`: the CLI wires the LLM worker to the loop."""
    from solforge.cli import main

    monkeypatch.setenv("SOLFORGE_SHARED_DIR", str(sol_execbench_dir.parent))
    monkeypatch.setenv("SOLFORGE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SCRIPTED_LLM_KEY", SECRET)
    monkeypatch.setattr("solforge.agents.lab.gpu_available", lambda: False)
    db = tmp_path / "cli.duckdb"
    # a problem no kernel family (and not the compiler: an eigensolver) serves, so the planner must hand it to the LLM; the scripted model answers with a
    # kernel for another problem, which the static check rejects (unknown tensors)
    pdir = write_unservable_problem(tmp_path / "problems" / "row_eigenvalues")
    with ScriptedLLM([{"content": reply_with(candidate_json(RMSNORM_H128)), "repeat": 3}]) as server:
        rc = main(["--json", "optimize", "--problems", str(pdir),
                   "--model", "openai/scripted", "--api-base", server.api_base,
                   "--api-key-env", "SCRIPTED_LLM_KEY", "--max-calls", "3", "--budget-attempts", "5",
                   "--db", str(db)])
    assert rc == 0
    cap = capsys.readouterr()
    rep = json.loads(cap.out)
    assert len(server.requests) == 3, (rep["stop_reason"], cap.err[-1500:])
    assert server.headers[0]["authorization"] == f"Bearer {SECRET}"
    # the CLI runs the orchestrated loop: the same source proposed three times is checked once and
    # answered from the store twice (content cache), but every LLM call is logged
    assert rep["spent"]["attempts"] == 1
    from solforge.store import Store

    s = Store(db)
    rows = s.query("SELECT agent, model, outcome, error FROM attempts")
    assert [(r["agent"], r["model"], r["outcome"]) for r in rows] == [("llm", "openai/scripted", "invalid")]
    assert "hidden_states" in rows[0]["error"]  # names the tensor the problem does not have
    assert s.scalar("SELECT count(*) FROM llm_calls") == 3
    reasons = " ".join(r["reason"] for r in s.query("SELECT reason FROM planner_decisions"))
    assert "LLM call cap reached" in reasons
    s.close()
