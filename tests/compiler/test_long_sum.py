"""A long fp32 sum (262,144 random-sign products per output) accumulates in double: emulated on the
CPU it matches the reference at a tolerance the fp32 accumulator misses (each of a block's threads
adds R / 256 terms in turn). Written here; the tolerance sits between the two errors."""

from __future__ import annotations

import json
import shutil

import pytest

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")]


def test_long_fp32_sum_accumulates_in_double(tmp_path, monkeypatch):
    from solforge.compiler import api, generic
    from solforge.compiler.check import check_problem
    from solforge.problem.loader import load_problem_dir

    d = tmp_path / "long_dot"
    d.mkdir()
    (d / "definition.json").write_text(json.dumps({
        "name": "long_dot", "axes": {"C": {"type": "var"}, "R": {"type": "const", "value": 262144}},
        "inputs": {"x": {"shape": ["C", "R"], "dtype": "float32"}, "y": {"shape": ["C", "R"], "dtype": "float32"}},
        "outputs": {"s": {"shape": ["C"], "dtype": "float32"}},
        "reference": "import torch\ndef run(x, y):\n    return (x * y).sum(dim=1)\n"}))
    (d / "workload.jsonl").write_text(json.dumps(
        {"uuid": "w0", "axes": {"C": 3}, "inputs": {"x": {"type": "random"}, "y": {"type": "random"}},
         "tolerance": {"max_atol": 1.5e-4, "max_rtol": 1e-7}}) + "\n")
    p = load_problem_dir(d)
    verdicts, shipped = {}, generic.LONG_SUM
    for long_sum in (shipped, 10 ** 9):   # as shipped; an fp32 accumulator for comparison
        monkeypatch.setattr(generic, "LONG_SUM", long_sum)
        monkeypatch.setenv("SOLFORGE_CACHE_DIR", str(tmp_path / f"cache{long_sum}"))
        api._CACHE.clear()
        out = api.compile_problem(p)
        assert out.ok, out.reason
        src = out.candidate.sources["kernel.cu"]
        verdicts[long_sum] = ("double acc_" in src, check_problem(p, cap=8, candidate=out.candidate)["ok"])
    assert verdicts == {shipped: (True, True), 10 ** 9: (False, False)}, verdicts
