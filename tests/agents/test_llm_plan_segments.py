"""Segments of a CUDA candidate and the plan's prompt section: spans found through comments,
strings, `#define`s, `extern "C" {}` blocks and templates; one kernel replaced with the rest byte
for byte the same; replies that do not fit refused with one line; the prompt kept to its budget.
Hand-written candidates: no compiler, no network, fast."""

from __future__ import annotations

import json

import pytest

from solforge.agents.parse import ParseError, SegmentReply, parse_answer
from solforge.agents.plan_context import make_plan, render, segment_kind
from solforge.agents.segments import (SegmentError, device_functions, kernel_definitions,
                                      replace_segment, segments_of, shared_text)
from solforge.candidate import Candidate

SRC = r'''
#include <cuda_fp16.h>
#define OPEN {   // a brace in a directive
__device__ __forceinline__ float sq(float x) { return x * x; }
// a } in a comment, and "a { in a string" below
__device__ const char* tag() { return "a { in a string"; }

extern "C" __global__ void __launch_bounds__(256) k0_sum(long long n, const float* __restrict__ x,
                                                        float* __restrict__ s) {
    /* } */
    if (threadIdx.x == 0) { float a = 0; for (long long i = 0; i < n; ++i) a += sq(x[i]); s[0] = a; }
}

extern "C" {
__global__ void k1_out(long long n, const float* x, const float* s, float* y) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] / (s[0] + 1.0f);
}
}

template <int B>
__global__ void tscale(float* y, long long n) { long long i = threadIdx.x; if (i < n) y[i] *= B; }
'''

K1_NEW = r'''__device__ __forceinline__ float inv1p(float v) { return 1.0f / (v + 1.0f); }
extern "C" __global__ void k1_out(long long n, const float* x, const float* s, float* y) {
    const float r = inv1p(s[0]);
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        y[i] = x[i] * r;
}'''


def cand() -> Candidate:
    return Candidate(problem="p", language="cuda", sources={"kernel.cu": SRC}, launches=[
        {"kernel": "k0_sum", "grid": ["1"], "block": ["256"], "args": ["int64:N", "x", "workspace"]},
        {"kernel": "k1_out", "grid": ["ceil_div(N, 256)"], "block": ["256"],
         "args": ["int64:N", "x", "workspace", "y"]},
        {"kernel": "tscale<2>", "grid": ["1"], "block": ["256"], "args": ["y", "int64:N"]}],
        workspace="256")


def test_definitions_are_found_through_comments_strings_directives_and_blocks():
    defs = kernel_definitions(SRC)
    assert set(defs) == {"k0_sum", "k1_out", "tscale"}  # __device__ helpers are not kernels
    assert [len(defs[k][2]) for k in ("k0_sum", "k1_out", "tscale")] == [3, 4, 2]
    assert defs["k0_sum"][2] == ["long long n", "const float* __restrict__ x", "float* __restrict__ s"]
    segs = segments_of(cand())
    assert [s.kernel for s in segs] == ["k0_sum", "k1_out", "tscale"]
    k0 = segs[0].text(cand())
    assert k0.startswith('extern "C" __global__ void __launch_bounds__(256) k0_sum(')
    assert k0.rstrip().endswith("s[0] = a; }\n}")
    assert segs[1].text(cand()).startswith("__global__ void k1_out(")
    assert segs[2].text(cand()).startswith("template <int B>")
    shared = shared_text(cand(), segs)
    assert "__device__ __forceinline__ float sq" in shared and "k0_sum" not in shared
    assert device_functions(SRC) == ["sq", "tag"]


def test_replacing_one_segment_keeps_everything_else():
    c = cand()
    segs = segments_of(c)
    new = replace_segment(c, segs, "k1_out", K1_NEW, {"grid": ["min(ceil_div(N, 256), 1024)"]},
                          notes="grid-stride")
    nsegs = segments_of(new)
    # the kernel is the segment; its helper now sits just before it, outside the segment
    assert nsegs[1].text(new).strip() == K1_NEW.split("\n", 1)[1].strip()
    assert nsegs[0].text(new) == segs[0].text(c) and nsegs[2].text(new) == segs[2].text(c)
    assert "float inv1p(float v)" in shared_text(new, nsegs)
    assert new.launches[1].grid == ["min(ceil_div(N, 256), 1024)"]
    assert new.launches[1].args == c.launches[1].args and new.launches[0] == c.launches[0]
    assert new.launches[2] == c.launches[2] and new.workspace == c.workspace
    assert new.notes == "grid-stride"
    # outside the replaced span the file is byte for byte the same
    src, nsrc = c.sources["kernel.cu"], new.sources["kernel.cu"]
    assert nsrc.startswith(src[:segs[1].start]) and nsrc.endswith(src[segs[1].end:].lstrip("\n"))


@pytest.mark.parametrize("kernel,source,launch,why", [
    ("k9_nope", K1_NEW, None, "unknown segment 'k9_nope'; the segments are k0_sum, k1_out, tscale"),
    ("k1_out", K1_NEW.replace("k1_out", "other"), None, "does not define `__global__ void k1_out"),
    ("k1_out", K1_NEW + "\n" + K1_NEW.split("\n", 1)[1].replace("k1_out", "k2"), None,
     "defines 2 kernels"),
    ("k1_out", K1_NEW.replace("float* y)", "float* y, long long m)"), None,
     "the new kernel takes 5 parameters but its launch passes 4 args"),
    ("k1_out", K1_NEW, {"args": ["int64:N", "x", "workspace"]},
     "the new kernel takes 4 parameters but its launch passes 3 args"),
    ("k1_out", K1_NEW, {"stream": 1}, "launch changes may set"),
    ("k1_out", K1_NEW, {"args": ["x", "x", "workspace", "y"]},
     "parameter 1 `long long n` is a scalar but its launch passes the buffer 'x'"),
    ("k1_out", K1_NEW, {"args": ["int64:N", "int64:N", "workspace", "y"]},
     "parameter 2 `const float* x` is a pointer but its launch passes the scalar 'int64:N'"),
    ("k1_out", K1_NEW[:-1], None, "unbalanced {} in the source"),
    ("k1_out", "namespace a {" * 5000 + K1_NEW + "}" * 5000, None, "does not define"),
    ("k1_out", K1_NEW, {"grid": ["N +* 2"]}, "the spliced candidate is not valid: launches.1.grid"),
])
def test_a_replacement_that_does_not_fit_is_refused_with_one_line(kernel, source, launch, why):
    with pytest.raises(SegmentError) as e:
        replace_segment(cand(), segments_of(cand()), kernel, source, launch)
    assert why in str(e.value) and "\n" not in str(e.value)


def test_parse_answer_tells_a_segment_reply_from_a_candidate():
    seg = {"segment": "k1_out", "source": K1_NEW, "launch": {"block": ["128"]}, "notes": "n"}
    got = parse_answer("Replacing the output kernel.\n```json\n" + json.dumps(seg) + "\n```", "p",
                       "cuda")
    assert isinstance(got, SegmentReply) and got.segment == "k1_out" and got.launch == {"block": ["128"]}
    whole = cand().model_dump()
    got = parse_answer("```json\n" + json.dumps(whole) + "\n```", "p", "cuda")
    assert isinstance(got, Candidate)
    with pytest.raises(ParseError, match="source"):
        parse_answer('```json\n{"segment": "k1_out"}\n```', "p", "cuda")
    # the source in its own ```cuda block, unescaped
    got = parse_answer('```json\n{"segment": "k1_out", "notes": "n"}\n```\nThe kernel:\n```cuda\n'
                       + K1_NEW + "\n```\n", "p", "cuda")
    assert isinstance(got, SegmentReply) and got.source.strip() == K1_NEW.strip()


def test_plan_section_lists_segments_and_keeps_to_its_budget():
    plan = make_plan(cand(), {"aten.sum.default": 1, "aten.div.Tensor": 1})
    text = render(plan)
    for k in ("k0_sum", "k1_out", "tscale"):
        assert f"`{k}`" in text
    assert "Segment 1/3: `k0_sum` (reduction, 3 parameters)" in text
    assert "Segment 2/3: `k1_out` (pointwise" in text
    assert '"args": ["int64:N", "x", "workspace", "y"]' in text
    assert "s[0] = a;" in text and "Shared source" in text and "sum x1" in text
    assert "Time per segment: not measured" in text and "Headers" not in text
    # headers the units include are named, not shown
    with_hdr = cand().model_copy(deep=True)
    with_hdr.sources["lib.cuh"] = "// a big library\n" * 500
    text = render(make_plan(with_hdr, {}))
    assert "`lib.cuh` (8500 characters)" in text and "a big library" not in text
    # a big plan is cut to the budget, each segment still listed with its launch
    big = cand().model_copy(deep=True)
    filler = "\n".join(f"    y[i] += {j}.0f;" for j in range(3000))
    big.sources["kernel.cu"] = SRC.replace("if (i < n) y[i] = x[i] / (s[0] + 1.0f);",
                                           "if (i < n) {\n" + filler + "\n}")
    small = render(make_plan(big, {}), budget_chars=6000)
    assert len(small) < 7500 and "characters cut" in small
    assert all(f"`{k}`" in small for k in ("k0_sum", "k1_out", "tscale"))
    # measured times, when a source gives them, are shown per segment
    plan.launch_ms = {"k0_sum": 0.03, "k1_out": 0.01}
    assert "k0_sum 0.03 (75%)" in render(plan) and "measured 0.01 ms" in render(plan)


def test_plan_base_is_the_best_candidate_when_it_refines_the_plan():
    c = cand()
    better = replace_segment(c, segments_of(c), "k1_out", K1_NEW)
    plan = make_plan(c, {}, better, 0.7)
    assert plan.candidate is better and plan.covers_best and plan.score == 0.7
    other = Candidate(problem="p", language="cuda", sources={"kernel.cu": SRC},
                      launches=[c.launches[1]], workspace="256")
    plan = make_plan(c, {}, other, 0.9)
    assert plan.candidate is c and not plan.covers_best
    assert make_plan(c, {}, c, 0.5).covers_best


def test_segment_kinds_follow_the_compiler_names():
    assert segment_kind("k3_mm") == "matmul" and segment_kind("k0_cumsum") == "scan"
    assert segment_kind("k2_amax") == "reduction" and segment_kind("my_kernel") == "kernel"


def test_worker_plan_and_splice_refusals():
    from solforge.agents.llm import Context, LlmWorker
    from solforge.agents.llm_client import LlmConfig

    calls = []

    def source(problem):
        calls.append(problem)
        return cand(), {"aten.sum.default": 1}

    w = LlmWorker(LlmConfig(model="openai/none", api_base="http://127.0.0.1:9/v1"), lab=None,
                  plan_source=source, launch_times=lambda p, c: {"k0_sum": 0.5})
    plan = w.plan("p", "cuda", Context())
    assert plan is not None and [s.kernel for s in plan.segments] == ["k0_sum", "k1_out", "tscale"]
    assert plan.launch_ms == {"k0_sum": 0.5}
    assert w.plan("p", "cute", Context()) is None and len(calls) == 1  # CUDA sessions only

    def broken(problem):
        raise RuntimeError("trace crashed")
    assert LlmWorker(w.cfg, None, plan_source=broken).plan("p", "cuda", Context()) is None
    assert LlmWorker(w.cfg, None, plan_source=lambda p: None).plan("p", "cuda", Context()) is None

    with pytest.raises(SegmentError, match="needs a plan"):
        LlmWorker._splice(None, SegmentReply("k1_out", K1_NEW))
    with pytest.raises(SegmentError, match="cannot change the language"):
        LlmWorker._splice(plan, SegmentReply("k1_out", K1_NEW, language="cute"))
    with pytest.raises(SegmentError, match="cannot change the language"):
        LlmWorker._splice(plan, SegmentReply("k1_out", "import cutlass\n@cute.kernel\ndef k1_out(): pass"))
    got = LlmWorker._splice(plan, SegmentReply("k1_out", K1_NEW, notes="n"))
    assert got.launches == cand().launches and "inv1p" in got.sources["kernel.cu"]


def test_a_plan_of_many_segments_keeps_to_its_budget():
    """Many kernels: sources that do not fit show their signature, and when even the launch lines
    do not fit, the least important segments shrink to one title line; every segment is named."""
    kernels, launches = [], []
    for i in range(60):
        kernels.append(f'extern "C" __global__ void k{i}_out(const float* x, float* y, long long n) '
                       "{\n" + "\n".join(f"    y[{j}] = x[{j}] * {i}.0f;" for j in range(40)) + "\n}")
        launches.append({"kernel": f"k{i}_out", "grid": ["ceil_div(N, 256)"], "block": ["256"],
                         "args": ["x", "y", "int64:N"]})
    big = Candidate(problem="p", language="cuda", sources={"kernel.cu": "\n".join(kernels)},
                    launches=launches)
    for budget in (12000, 30000):
        text = render(make_plan(big, {}), budget_chars=budget)
        assert len(text) <= budget * 1.03
        assert all(f"`k{i}_out`" in text for i in range(60))
        assert "`k59_out` (pointwise; not shown: prompt budget)" in text
        assert 'extern "C" __global__ void k0_out(const float* x, float* y, long long n) {\n' in text
    assert "its signature:" in text


def test_launch_times_come_from_the_store(store):
    """The LLM worker's per-segment times: eval_results.kernel_ms of the newest evaluation of the
    same source, averaged over its workloads, the profiler's names brought back to the plan's
    kernel names (demangled C++ names carry return type, template arguments and parameters); none
    for a source never timed so. The plan prompt then shows each segment's share."""
    from types import SimpleNamespace

    from solforge.agents import history
    from solforge.agents.outcome import AttemptOutcome, Outcome
    from solforge.orchestrate import attempts

    c = cand()
    aid = attempts.open_attempt(store, "p", c, run_id=None, agent="offline")
    rows = [{"workload_uuid": "w1", "status": "passed", "correct": True, "median_ms": 0.04,
             "kernel_ms": {"k0_sum": 0.02, "k1_out": 0.01, "void tscale<2>(float*, long long)": 0.004}},
            {"workload_uuid": "w2", "status": "passed", "correct": True, "median_ms": 0.08,
             "kernel_ms": {"k0_sum": 0.06, "k1_out": 0.01}}]
    attempts.finish(store, aid, Outcome(AttemptOutcome.OK, "ok", eval_rows=rows))
    times = history.launch_times(store)
    got = times(SimpleNamespace(name="p"), c)
    assert got == pytest.approx({"k0_sum": 0.04, "k1_out": 0.01, "tscale": 0.002})
    other = Candidate(**{**c.model_dump(), "sources": {"kernel.cu": SRC + "\n// another source\n"}})
    assert times(SimpleNamespace(name="p"), other) == {}
    plan = make_plan(c, {})
    plan.launch_ms = got
    text = render(plan)
    assert "Measured time per segment" in text and "k0_sum 0.04 (77%)" in text
