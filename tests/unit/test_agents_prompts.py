"""Prompt building from protocol.md, reply parsing and secret scrubbing (no network, no GPU)."""

from __future__ import annotations

import json

import pytest

from solforge.agents.outcome import AttemptOutcome, Outcome, WorkloadOutcome
from solforge.roofline.score import sol_score
from solforge.agents.parse import ParseError, parse_reply
from solforge.agents.prompts import (GpuInfo, WorkloadSol, format_feedback, problem_prompt,
                                     protocol_sections, repair_message, scrub, secret_values,
                                     system_prompt)

CAND = {"problem": "whatever", "sources": {"k.cu": "extern \"C\" __global__ void k(){}"},
        "launches": [{"kernel": "k", "grid": ["1"], "block": ["32"], "args": []}]}


def test_protocol_has_every_section_prompts_use():
    s = protocol_sections()
    for name in ("intro", "format", "rules", "tests", "tools", "guide-cuda", "guide-cute"):
        assert s.get(name), name
    cuda, cute = system_prompt("cuda"), system_prompt("cute")
    assert "Language guide: CUDA C++" in cuda and "CuTe DSL (Python)" not in cuda
    assert "Language guide: CuTe DSL" in cute
    assert "Benchmark tools" in cuda and "Benchmark tools" not in system_prompt("cuda", with_tools=False)
    assert "No PyTorch" in cuda and "No caching" in cuda and "No side streams" in cuda


def test_protocol_example_is_a_valid_candidate():
    block = protocol_sections()["format"].split("```json\n", 1)[1].split("```", 1)[0]
    cand = parse_reply(f"```json\n{block}```", "p")
    assert cand.launches[0].kernel == "my_kernel"


def test_problem_prompt_carries_problem_gpu_feedback(sol_execbench_dir):
    from solforge.problem import load_problem_dir

    p = load_problem_dir(sol_execbench_dir / "FlashInfer-Bench" / "021_rmsnorm_h128")
    sols = [WorkloadSol(w.uuid, {}, t_sol_ms=0.001 * (i + 1), t_base_ms=0.01, bound="memory")
            for i, w in enumerate(p.workloads)]
    fb = [("attempt 1", Outcome(AttemptOutcome.COMPILE_ERROR, "compile error",
                                compile_log="kernel.cu(3): error: expected a \";\"")),
          ("attempt 2", Outcome(AttemptOutcome.INCORRECT, "incorrect on 1/1", workloads=[
              WorkloadOutcome(p.workloads[0].uuid, "incorrect", False, max_abs_err=0.5)]))]
    text = problem_prompt(p, "cuda", GpuInfo("NVIDIA H200", "sm_90a", 4.8e12, {"bf16_tc": 989e12}, 132),
                          sols, best_source=CAND, best_score=0.61, feedback=fb)
    assert "021_rmsnorm_h128" in text and "torch.rsqrt" in text  # definition + reference
    assert "batch_size" in text and p.workloads[0].uuid[:8] in text  # workload shapes
    assert "4.80 TB/s" in text and "sm_90a" in text and "989.0 TFLOP/s" in text  # roofline numbers
    assert "0.001" in text and "memory" in text  # T_sol and bound per workload
    assert "SOL score 0.610" in text and '"k.cu"' in text  # best so far
    assert 'expected a ";"' in text and "0.5" in text  # compile log, correctness diff
    assert "more workloads not shown" in text  # 14 workloads, 12 shown


def test_parse_reply_variants():
    c = parse_reply("text\n```json\n" + json.dumps(CAND) + "\n```\nmore", "real_name", "cuda")
    assert c.problem == "real_name"  # the model cannot retarget another problem
    c = parse_reply("plain " + json.dumps(CAND), "p")
    assert c.sources
    c = parse_reply("```json\n" + json.dumps({"candidate": CAND}) + "\n```", "p")
    assert c.launches[0].kernel == "k"
    two = "```json\n{\"sources\": 1}\n```\n```json\n" + json.dumps(CAND) + "\n```"
    assert parse_reply(two, "p").launches  # the last valid block wins


@pytest.mark.parametrize("text,needle", [
    ("", "empty"),
    ("no json here", "no JSON object"),
    ("```json\n{\"sources\": {\"a\": \"b\"}, \"launches\": []}\n```", "launches"),
    ("```json\n" + json.dumps({**CAND, "launches": [{"kernel": "k", "grid": ["import os"],
                                                     "block": ["1"]}]}) + "\n```", "grid"),
])
def test_parse_errors_say_why(text, needle):
    with pytest.raises(ParseError) as e:
        parse_reply(text, "p")
    assert needle in str(e.value)


def test_repair_message_and_feedback():
    o = Outcome(AttemptOutcome.COMPILE_ERROR, "boom", compile_log="line 1: error: x")
    m = repair_message(o)
    assert "failed to compile" in m and "line 1: error: x" in m and "whole corrected" in m
    ok = Outcome(AttemptOutcome.OK, workloads=[WorkloadOutcome("u" * 10, "passed", True, median_ms=0.02,
                                                              sol_score=0.7)])
    assert "Mean SOL score 0.700" in format_feedback("a", ok)


def test_scrub_removes_keys(monkeypatch):
    monkeypatch.setenv("SOME_SERVICE_TOKEN", "tok-value-123456")
    secrets = secret_values(["passed-in-key-999"])
    text = ("passed-in-key-999 tok-value-123456 sk-abcdefghijklmnop1234 hf_abcdefghijklmnopqrstuvwx "
            "fine")
    out = scrub(text, secrets)
    assert "passed-in-key-999" not in out and "tok-value-123456" not in out
    assert "sk-abc" not in out and "hf_abc" not in out and out.endswith("fine")


def test_sol_score_formula():
    assert sol_score(10.0, 10.0, 1.0) == pytest.approx(0.5)  # baseline speed -> 0.5
    assert sol_score(1.0, 10.0, 1.0) == pytest.approx(1.0)  # at SOL -> 1
    assert sol_score(5.0, 1.0, 1.0) == 0.0  # T_b <= T_sol: SOL-ExecBench's edge case
    o = Outcome(AttemptOutcome.OK, workloads=[WorkloadOutcome("a", "passed", True, sol_score=0.4),
                                             WorkloadOutcome("b", "passed", True, sol_score=0.8)])
    assert o.sol_score == pytest.approx((0.4 * 0.8) ** 0.5)  # per problem: geomean over workloads
    o.workloads[1].sol_score = None
    assert o.sol_score is None  # one unscored workload: no problem score


def test_resolve_api_key(monkeypatch):
    from solforge.agents.llm_client import resolve_api_key

    monkeypatch.setenv("MY_KEY_VAR", "k-123")
    assert resolve_api_key("MY_KEY_VAR") == "k-123"
    assert resolve_api_key(secret_block="llm-key", load_secret=lambda n: f"from-{n}") == "from-llm-key"
    assert resolve_api_key() is None
    with pytest.raises(ValueError, match="NOPE_VAR"):
        resolve_api_key("NOPE_VAR")
    with pytest.raises(ValueError, match="loader"):
        resolve_api_key(secret_block="x")
