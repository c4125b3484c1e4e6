"""check.reference_conditioning: a reference that disagrees with its own float64 evaluation beyond its
tolerance is reported ill-conditioned (no kernel adding in another order passes it reliably); a
well-conditioned one is not. Problems written here; the reference runs in the sandbox."""

from __future__ import annotations

import pytest

from solforge.compiler.check import reference_conditioning

from .test_compiler import T, make_problem

pytestmark = pytest.mark.slow

AXES = {"N": {"type": "var"}, "D": {"type": "const", "value": 64}}


def test_cancellation_is_ill_conditioned_and_a_relu_is_not(tmp_path):
    # (x * 1e8 + 1) - x * 1e8 is exactly 1 in float64 and off by up to a few units in float32
    bad = make_problem(tmp_path, "cancel", AXES, {"x": T("N", "D")}, {"y": T("N", "D")},
                       "import torch\ndef run(x):\n    return (x * 1e8 + 1.0) - x * 1e8\n",
                       [{"N": 8}])
    r = reference_conditioning(bad, cap=8)
    assert r["stage"] == "float64" and r["well_conditioned"] is False, r
    assert "matched ratio" in r["reason"]
    good = make_problem(tmp_path, "relu", AXES, {"x": T("N", "D")}, {"y": T("N", "D")},
                        "import torch\ndef run(x):\n    return torch.relu(x) * 2.0\n", [{"N": 8}])
    r = reference_conditioning(good, cap=8)
    assert r["well_conditioned"] is True and r["max_abs_err"] == 0.0, r


def test_a_reference_that_fails_is_one_line(tmp_path):
    p = make_problem(tmp_path, "boom", AXES, {"x": T("N", "D")}, {"y": T("N", "D")},
                     "import torch\ndef run(x):\n    raise RuntimeError('no')\n", [{"N": 8}])
    r = reference_conditioning(p, cap=8)
    assert r["ok"] is False and r["stage"] == "reference" and "\n" not in r["reason"]


def test_a_reference_that_casts_to_a_named_low_precision_dtype_is_checked_wide(tmp_path):
    """x.to(torch.bfloat16) mixed with a float64 weight cannot run as it is: the check runs it with
    every floating dtype the reference names held in float64, and a bf16 round trip in the middle of
    a cancellation is then seen for what it is."""
    src = ("import torch\nimport torch.nn.functional as F\n"
           "def run(x, w):\n"
           "    h = (x.to(torch.float32) * 300.0).to(torch.bfloat16)\n"
           "    return (F.linear(h, w) - F.linear(h.to(torch.float32).to(x.dtype), w)) + x\n")
    axes = {"N": {"type": "var"}, "D": {"type": "const", "value": 64}}
    bf = lambda *s: {"shape": list(s), "dtype": "bfloat16"}  # noqa: E731
    p = make_problem(tmp_path, "cast", axes, {"x": bf("N", "D"), "w": bf("D", "D")},
                     {"y": bf("N", "D")}, src, [{"N": 8}])
    r = reference_conditioning(p, cap=8)
    assert r["stage"] == "float64" and r["widened"] is True, r
    assert r["well_conditioned"] is True, r  # held wide, the two products are the same: y == x


def test_a_named_workload_is_checked_at_full_size(tmp_path):
    """Conditioning can depend on size: quarters added to and taken from an offset that grows with
    N are exact in fp32 while the offset is small and rounded once it is large. The default check
    (the smallest workload, shrunk) passes; the large workload, named, fails at full size."""
    import json

    src = ("import torch\ndef run(x):\n"
           "    big = x.shape[0] * 1e5\n"
           "    return (torch.round(x * 4.0) / 4.0 + big) - big\n")
    axes = {"N": {"type": "var"}, "D": {"type": "const", "value": 4}}
    p = make_problem(tmp_path, "runsum", axes, {"x": T("N", "D")}, {"y": T("N", "D")}, src,
                     [{"N": 8}, {"N": 65536}])
    wl = tmp_path / "runsum" / "workload.jsonl"
    rows = [json.loads(line) for line in wl.read_text().splitlines()]
    for r in rows:
        r["tolerance"] = {"max_atol": 1e-6, "max_rtol": 1e-7}
    wl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    from solforge.problem.loader import load_problem_dir

    p = load_problem_dir(tmp_path / "runsum")
    assert reference_conditioning(p, cap=8)["well_conditioned"] is True
    big = reference_conditioning(p, None, uuid="runsum-1")
    assert big["well_conditioned"] is False and big["axes"]["N"] == 65536, big
    assert reference_conditioning(p, None, uuid="nope")["reason"] == "no workload 'nope' in runsum"
