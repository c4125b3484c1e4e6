"""Solution and Trace models (SOL-ExecBench formats) and the constraint grammar's tensor forms."""

from __future__ import annotations

import json
import math

import pytest
import torch
from pydantic import ValidationError

from solforge.problem import axis_expr
from solforge.problem.definition import Definition
from solforge.problem.solution import Hardware, Solution
from solforge.problem.trace import EvaluationStatus, Trace


def solution(**over) -> dict:
    s = {"name": "add_cuda_v1", "definition": "tiny_add", "author": "solforge",
         "spec": {"languages": ["cuda_cpp"], "target_hardware": ["B200", "local"],
                  "entry_point": "kernel.cu::run", "compile_options": {"cuda_cflags": ["-O3"]}},
         "sources": [{"path": "kernel.cu", "content": "void run() {}"},
                     {"path": "include/util.cuh", "content": "#pragma once"}]}
    for k, v in over.items():
        if k == "spec":
            s["spec"] = {**s["spec"], **v}
        else:
            s[k] = v
    return s


def test_solution_parses_documented_example():
    s = Solution.model_validate(solution())
    assert s.spec.entry_file == "kernel.cu" and s.spec.entry_symbol == "run"
    assert s.spec.is_cpp and s.spec.destination_passing_style is True
    assert s.spec.target_hardware == [Hardware.B200, Hardware.LOCAL]
    assert s.spec.compile_options.ld_flags == ["-lcuda"]  # documented default
    assert s.entry_source().content == "void run() {}"
    py = Solution.model_validate(solution(spec={"languages": ["triton", "pytorch"],
                                                "entry_point": "k.py::run"},
                                          sources=[{"path": "k.py", "content": "def run(): pass"}]))
    assert not py.spec.is_cpp


@pytest.mark.parametrize("over, fragment", [
    ({"spec": {"languages": ["cuda_cpp", "triton"]}}, "cannot be mixed"),
    ({"spec": {"languages": ["fortran"]}}, "Input should be"),
    ({"spec": {"entry_point": "kernel.cu"}}, "file_path::function_name"),
    ({"spec": {"entry_point": "a::b::c"}}, "file_path::function_name"),
    ({"spec": {"languages": ["pytorch"]}}, ".py file"),
    ({"spec": {"target_hardware": []}}, "at least 1"),
    ({"spec": {"binding": "pybind"}}, "not supported"),
    ({"sources": [{"path": "../kernel.cu", "content": "x"}]}, "'..'"),
    ({"sources": [{"path": "/abs/kernel.cu", "content": "x"}]}, "relative"),
    ({"sources": [{"path": "kernel.cu", "content": "x"}, {"path": "kernel.cu", "content": "y"}]},
     "duplicate path"),
    ({"sources": [{"path": "other.cu", "content": "x"}]}, "not in sources"),
    ({"sources": []}, "at least 1"),
    ({"author": ""}, "at least 1"),
])
def test_solution_rejects(over, fragment):
    with pytest.raises(ValidationError) as e:
        Solution.model_validate(solution(**over))
    assert fragment in str(e.value)


def test_solution_hash_tracks_behaviour_not_author():
    a = Solution.model_validate(solution())
    assert a.content_hash == Solution.model_validate(solution()).content_hash
    assert a.content_hash == Solution.model_validate(solution(author="someone else")).content_hash
    changed = solution()
    changed["sources"][0]["content"] = "void run() { }"
    assert a.content_hash != Solution.model_validate(changed).content_hash
    assert a.content_hash != Solution.model_validate(
        solution(spec={"compile_options": {"cuda_cflags": ["-O2"]}})).content_hash


WL = {"uuid": "u1", "axes": {"n": 4}, "inputs": {"x": {"type": "random"}}}
ENV = {"hardware": "NVIDIA_H200", "libs": {"torch": "2.11"}}


def trace(**evaluation):
    ev = {"status": "PASSED", "environment": ENV, "timestamp": "2026-01-01T00:00:00Z", **evaluation}
    return {"definition": "d", "solution": "s", "workload": WL, "evaluation": ev}


def test_workload_trace():
    t = Trace.model_validate({"definition": "d", "solution": None, "workload": WL, "evaluation": None})
    assert t.is_workload_trace and not t.passed


def test_trace_status_table():
    c = {"max_relative_error": 1e-5, "max_absolute_error": 1e-6}
    p = {"latency_ms": 0.01, "reference_latency_ms": 0.02, "speedup_factor": 2.0}
    t = Trace.model_validate(trace(correctness=c, performance=p))
    assert t.passed and t.evaluation.status is EvaluationStatus.PASSED
    Trace.model_validate(trace(status="INCORRECT_NUMERICAL", correctness=c))
    Trace.model_validate(trace(status="COMPILE_ERROR", log="nvrtc: error"))
    bad = [trace(correctness=c),                                        # PASSED needs performance
           trace(status="INCORRECT_NUMERICAL", correctness=c, performance=p),
           trace(status="RUNTIME_ERROR", correctness=c),
           trace(status="SEGFAULT"),
           trace(correctness=c, performance={**p, "latency_ms": -1.0}),
           trace(status="TIMEOUT", environment={"hardware": ""})]
    for b in bad:
        with pytest.raises(ValidationError):
            Trace.model_validate(b)


def test_every_flashinfer_trace_line_is_a_trace(flashinfer_trace_dir):
    n = 0
    for f in (flashinfer_trace_dir / "workloads").rglob("*.jsonl"):
        for line in f.read_text().splitlines():
            if line.strip():
                Trace.model_validate(json.loads(line))
                n += 1
    assert n == 663


@pytest.mark.parametrize("expr", ["n.__class__", "__import__('os')", "x.shape", "x.shape[n]",
                                  "x[0].item(1)", "x[n].item()", "f()[0]", "x.T.shape[0]",
                                  "x.shape[0].bit_length()", "(lambda: 1)()", "'a' == 'a'",
                                  "x[0:2].item()"])
def test_constraint_grammar_rejects(expr):
    with pytest.raises(axis_expr.ExprError):
        axis_expr.parse_constraint(expr)


def test_axis_expressions_stay_strict():
    axis_expr.parse_constraint("x.shape[-1] == n")
    with pytest.raises(axis_expr.ExprError):
        axis_expr.parse("x.shape[-1]")  # axis expressions never read tensors


def test_tensor_constraints_with_shapes_and_data():
    c = "x.shape[-1] == n and n_idx == ptr[-1].item()"
    assert axis_expr.constraint_names(c) == ({"n", "n_idx"}, {"x", "ptr"})
    assert axis_expr.tensor_dims(c) == [("x", -1)]
    env = {"n": 4, "n_idx": 7}
    with pytest.raises(axis_expr.NeedsData):
        axis_expr.evaluate_constraint(c, env, {"x": (2, 4), "ptr": (3,)})
    ptr = torch.tensor([0, 3, 7])
    assert axis_expr.evaluate_constraint(c, env, {"x": torch.empty(2, 4), "ptr": ptr}) is True
    assert axis_expr.evaluate_constraint(c, {**env, "n_idx": 6}, {"x": torch.empty(2, 4), "ptr": ptr}) is False


def test_definition_checks_tensor_constraints_at_both_stages(flashinfer_trace_dir):
    path = next((flashinfer_trace_dir / "definitions" / "gqa_paged").glob("gqa_paged_decode_*.json"))
    d = Definition.model_validate(json.loads(path.read_text()))
    c = next(c for c in d.constraints if ".item()" in c)  # num_kv_indices == kv_indptr[-1].item()
    assert "kv_indptr" in c
    env = d.resolve_axes({"batch_size": 4, "len_indptr": 5, "num_pages": 16, "num_kv_indices": 10})
    d.check_constraints(env)  # without data the element read waits; other constraints are checked
    with pytest.raises(ValueError, match="len_indptr"):
        d.check_constraints({**env, "len_indptr": 4})
    shapes = {**d.input_shapes(env), **d.output_shapes(env)}
    kv_indptr = torch.zeros(shapes["kv_indptr"], dtype=torch.int32)
    kv_indptr[-1] = 10
    d.check_constraints(env, tensors={"kv_indptr": kv_indptr})
    kv_indptr[-1] = 11
    with pytest.raises(ValueError, match="does not hold"):
        d.check_constraints(env, tensors={"kv_indptr": kv_indptr})


def test_nan_tolerance_never_slips_through():
    from solforge.problem.workload import Tolerance

    for bad in (math.nan, math.inf, -0.5):
        with pytest.raises(ValidationError):
            Tolerance(max_atol=bad)


@pytest.mark.parametrize("expr", ["+".join(["n"] * 990), "-" * 1999 + "n", "n" * 3000,
                                  "(" * 300 + "n" + ")" * 300])
def test_pathological_expressions_fail_cleanly(expr):
    try:
        axis_expr.evaluate(expr, {"n": 1, "n" * 3000: 1})
    except axis_expr.ExprError:
        pass  # a clean refusal is fine; a RecursionError or a hang is not


def test_pathological_json_and_reference(tmp_path):
    from solforge.errors import InputError
    from solforge.problem.loader import parse_json_text

    with pytest.raises(InputError, match="nested too deeply"):
        parse_json_text("[" * 100000, "f.json")
    d = {"name": "deep", "axes": {}, "inputs": {}, "outputs": {"z": {"shape": [], "dtype": "float32"}},
         "reference": "x = " + "(" * 5000 + ")" * 5000 + "\ndef run():\n    pass\n"}
    with pytest.raises(ValidationError, match="reference"):
        Definition.model_validate(d)
