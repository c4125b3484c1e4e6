"""A custom input handed over as a strided view (position ids expanded over the batch: strides (0, 1))
reaches the candidate's kernels as a dense copy: the compiler's plan for a problem written here is
correct on every workload instead of refused by the launcher."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu


def test_expanded_custom_input_is_read_densely(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from solforge.compiler.api import compile_problem
    from solforge.evaluate.api import evaluate_candidate
    from solforge.problem.loader import load_problem_dir

    d = tmp_path / "pos_scale"
    d.mkdir()
    ref = ("import torch\n"
           "def make_inputs(axes, device):\n"
           "    b, s = axes['B'], axes['S']\n"
           "    return {'position_ids': torch.arange(s, device=device).unsqueeze(0).expand(b, s)}\n"
           "def run(x, position_ids):\n"
           "    return x * position_ids.to(x.dtype).unsqueeze(-1)\n")
    (d / "definition.json").write_text(json.dumps({
        "name": "pos_scale", "axes": {"B": {"type": "var"}, "S": {"type": "var"},
                                      "D": {"type": "const", "value": 32}},
        "custom_inputs_entrypoint": "make_inputs",
        "inputs": {"x": {"shape": ["B", "S", "D"], "dtype": "float32"},
                   "position_ids": {"shape": ["B", "S"], "dtype": "int64"}},
        "outputs": {"y": {"shape": ["B", "S", "D"], "dtype": "float32"}}, "reference": ref}))
    (d / "workload.jsonl").write_text("".join(json.dumps(
        {"uuid": f"w{i}", "axes": {"B": b, "S": s},
         "inputs": {"x": {"type": "random"}, "position_ids": {"type": "custom"}}}) + "\n"
        for i, (b, s) in enumerate([(2, 7), (4, 129)])))
    p = load_problem_dir(d)
    out = compile_problem(p)
    assert out.ok, out.reason
    report, _ = evaluate_candidate(p, out.candidate.model_dump(), timing=False)
    assert report.all_passed, [(r.status.value, r.message) for r in report.results]
