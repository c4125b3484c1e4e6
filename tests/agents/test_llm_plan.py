"""The LLM worker starting from the compiler's plan, end to end: LiteLLM over real HTTP to the
scripted OpenAI-compatible server, the compiler's real plan for a problem written here, real NVRTC
compiles, a real DuckDB store. The scripted model replaces one segment; the spliced candidate
compiles and differs from the plan only in that kernel; replies that do not fit are refused with one
line in the next prompt."""

from __future__ import annotations

import json
import textwrap

import pytest

from solforge.agents.plan_context import compiler_plan
from solforge.agents.segments import segments_of, shared_text
from solforge.candidate import Candidate

from .llm_server import ScriptedLLM
from .test_llm_worker import attempts_of, make_loop

pytestmark = pytest.mark.slow  # the compiler traces the reference in a child process (seconds)

F32 = lambda *s: {"shape": list(s), "dtype": "float32"}  # noqa: E731
REFERENCE = """
import torch
def run(x):
    return torch.relu(x) / (x.abs().sum(dim=-1, keepdim=True) + 1.0)
"""


@pytest.fixture(scope="module")
def rownorm(tmp_path_factory):
    """A problem no dataset holds: a row reduction and an elementwise output (two segments)."""
    from solforge.problem import load_problem_dir

    d = tmp_path_factory.mktemp("plan") / "rownorm_relu"
    d.mkdir()
    defn = {"name": "rownorm_relu",
            "axes": {"M": {"type": "var"}, "N": {"type": "const", "value": 64}},
            "inputs": {"x": F32("M", "N")}, "outputs": {"y": F32("M", "N")},
            "reference": textwrap.dedent(REFERENCE)}
    (d / "definition.json").write_text(json.dumps(defn))
    (d / "workload.jsonl").write_text("\n".join(json.dumps(
        {"uuid": f"rownorm-{m}", "axes": {"M": m}, "inputs": {"x": {"type": "random"}}})
        for m in (5, 17)) + "\n")
    problem = load_problem_dir(d)
    got = compiler_plan(problem)
    assert got is not None, "the compiler does not serve the test problem"
    plan = got[0]
    assert len(segments_of(plan)) >= 2, [x.kernel for x in plan.launches]
    return problem, plan


def segment_reply(plan: Candidate, **extra) -> dict:
    """The last segment rewritten: a helper and an early exit added, its grid capped at 64 blocks
    (its loops stride over the grid, so any grid covers the work)."""
    seg = segments_of(plan)[-1]
    text = seg.text(plan)
    assert "gridDim.x" in text, "the test relies on a grid-stride segment"
    brace = text.index("{")
    new = ("__device__ __forceinline__ bool sf_block_idle() { return blockIdx.x >= gridDim.x; }\n"
           + text[:brace + 1] + "\n    if (sf_block_idle()) return;" + text[brace + 1:])
    grid = plan.launches[seg.launches[0]].grid
    return {"segment": seg.kernel, "source": new,
            "launch": {"grid": [f"max(1, min({grid[0]}, 64))"] + grid[1:]},
            "notes": "grid capped at 64 blocks", **extra}


def fenced(obj: dict, text: str = "Replacing one segment.") -> str:
    return f"{text}\n\n```json\n{json.dumps(obj, indent=1)}\n```\n"


def test_segment_reply_is_spliced_compiled_and_differs_only_in_that_kernel(store, cpu_lab, rownorm):
    problem, plan = rownorm
    reply = segment_reply(plan)
    script = [{"tool_calls": [{"name": "compile", "arguments": {"candidate": reply}}]},
              {"content": fenced(reply)}]
    with ScriptedLLM(script) as server:
        loop, _ = make_loop(store, cpu_lab, [problem], server)
        report = loop.run()

    # the first prompt carries the plan: every segment, its launch and its source
    system, user = (m["content"] for m in server.requests[0]["messages"][:2])
    assert "Segment replies" in system
    assert "## Plan: the compiler's plan" in user
    segs = segments_of(plan)
    for n, s in enumerate(segs, 1):
        assert f"### Segment {n}/{len(segs)}: `{s.kernel}`" in user
        assert s.text(plan).strip() in user
    assert "Time per segment: not measured" in user

    # the compile tool took the segment reply and spliced it: NVRTC compiled it
    tool = json.loads([m for m in server.requests[1]["messages"] if m["role"] == "tool"][0]["content"])
    assert tool["status"] == "ok", tool

    rows = attempts_of(store, report.run_id)
    assert [r["outcome"] for r in rows] == ["compiled"], [(r["outcome"], r["error"]) for r in rows]
    cand = rows[0]["candidate"]
    got = Candidate.model_validate(json.loads(cand) if isinstance(cand, str) else cand)
    gsegs = segments_of(got)
    last = segs[-1].kernel
    assert [s.kernel for s in gsegs] == [s.kernel for s in segs]
    for a, b in zip(segs[:-1], gsegs[:-1]):
        assert b.text(got) == a.text(plan)               # the other kernels, byte for byte
    assert "if (sf_block_idle()) return;" in gsegs[-1].text(got)
    assert gsegs[-1].text(got) != segs[-1].text(plan)
    # outside the segments only the new helper was added
    assert shared_text(got, gsegs).replace(
        "__device__ __forceinline__ bool sf_block_idle() { return blockIdx.x >= gridDim.x; }", ""
    ).split() == shared_text(plan, segs).split()
    for a, b in zip(plan.launches, got.launches):
        if a.kernel == last:
            assert b.grid[0].startswith("max(1, min(") and b.args == a.args and b.block == a.block
        else:
            assert a == b
    assert (got.workspace, got.params, got.options) == (plan.workspace, plan.params, plan.options)
    assert got.notes == "grid capped at 64 blocks"


def test_unknown_segment_and_language_change_are_refused_with_one_line(store, cpu_lab, rownorm):
    problem, plan = rownorm
    names = ", ".join(s.kernel for s in segments_of(plan))
    good = segment_reply(plan)
    unknown = dict(good, segment="k99_nowhere")
    cute = dict(good, language="cute")
    script = [{"content": fenced(unknown)}, {"content": fenced(cute)}, {"content": fenced(good)}]
    with ScriptedLLM(script) as server:
        loop, _ = make_loop(store, cpu_lab, [problem], server)
        report = loop.run()
    second = server.requests[1]["messages"][-1]["content"]
    assert second.splitlines()[0] == f"Refused: unknown segment 'k99_nowhere'; the segments are {names}."
    third = server.requests[2]["messages"][-1]["content"]
    assert third.splitlines()[0].startswith("Refused: a segment reply cannot change the language")
    # refusals are not attempts: only the reply that fits was tried
    assert [r["outcome"] for r in attempts_of(store, report.run_id)] == ["compiled"]


def test_a_whole_candidate_still_answers_a_plan_session(store, cpu_lab, rownorm):
    problem, plan = rownorm
    whole = plan.model_dump(exclude_defaults=True)
    whole["notes"] = "the plan as a whole candidate"
    with ScriptedLLM([{"content": fenced(whole, "The whole candidate.")}]) as server:
        loop, _ = make_loop(store, cpu_lab, [problem], server)
        report = loop.run()
    assert "## Plan: the compiler's plan" in server.requests[0]["messages"][1]["content"]
    rows = attempts_of(store, report.run_id)
    assert [r["outcome"] for r in rows] == ["compiled"]
