"""SOL-ExecBench's correctness rule, poisoning, FP4 dequantizing reference, result rows."""

from __future__ import annotations

import math

import torch

from solforge.evaluate.correctness import compare, compare_all, poison_
from solforge.evaluate.results import EvalResult, EvalStatus, RunReport
from solforge.problem.workload import Tolerance


def test_matched_ratio_rule():
    ref = torch.ones(1000)
    out = ref.clone()
    out[:5] += 1.0  # 0.5% of elements off
    assert compare(out, ref, Tolerance()).ok  # 99.5% >= 99%
    out[:20] += 1.0
    c = compare(out, ref, Tolerance())
    assert not c.ok and abs(c.matched_ratio - 0.98) < 1e-9 and c.max_abs_err == 2.0
    assert not compare(out, ref, Tolerance(required_matched_ratio=0.5, max_error_cap=1.0)).ok


def test_nan_inf_and_zeros_fail():
    ref = torch.randn(100)
    out = ref.clone()
    out[3] = float("nan")
    assert not compare(out, ref, Tolerance(required_matched_ratio=0.0)).ok
    out = ref.clone()
    out[3] = float("inf")
    assert not compare(out, ref, Tolerance(required_matched_ratio=0.0)).ok
    assert not compare(torch.zeros(100), ref, Tolerance(required_matched_ratio=0.0)).ok


def test_negative_inf_allowed_only_when_asked():
    ref = torch.tensor([float("-inf"), 1.0, 2.0])
    out = ref.clone()
    assert not compare(out, ref, Tolerance()).ok
    assert compare(out, ref, Tolerance(allow_negative_inf=True)).ok


def test_chunked_comparison_gives_the_whole_tensors_numbers(monkeypatch):
    """Outputs are compared a chunk at a time (bounded memory for multi-GiB masks): the verdict,
    matched ratio and errors are those of the whole tensor, wherever the bad elements fall."""
    import solforge.evaluate.correctness as corr

    g = torch.Generator().manual_seed(0)
    ref = torch.randn(1003, generator=g)
    out = ref + 1e-4 * torch.randn(1003, generator=g)
    out[[7, 500, 1002]] += 3.0                          # three elements off, in three chunks
    whole = compare(out, ref, Tolerance())
    nan_out = out.clone()
    nan_out[999] = float("nan")
    ninf_ref, ninf_out = ref.clone(), out.clone()
    ninf_ref[:600] = ninf_out[:600] = float("-inf")     # whole chunks dropped, and part of one
    zeros = torch.zeros_like(ref)
    before = [compare(nan_out, ref, Tolerance()), compare(zeros, ref, Tolerance()),
              compare(ninf_out, ninf_ref, Tolerance(allow_negative_inf=True))]
    monkeypatch.setattr(corr, "CHUNK_ELEMENTS", 64)
    chunked = compare(out, ref, Tolerance())
    assert chunked.ok == whole.ok and chunked.matched_ratio == whole.matched_ratio
    assert math.isclose(chunked.max_abs_err, whole.max_abs_err) and chunked.max_abs_err > 2.9
    assert math.isclose(chunked.max_rel_err, whole.max_rel_err)
    after = [compare(nan_out, ref, Tolerance()), compare(zeros, ref, Tolerance()),
             compare(ninf_out, ninf_ref, Tolerance(allow_negative_inf=True))]
    for a, b in zip(before, after):
        assert (a.ok, a.reason, a.matched_ratio) == (b.ok, b.reason, b.matched_ratio)
    assert not after[0].ok and "1 NaN" in after[0].reason and "all zeros" in after[1].reason
    assert after[2].matched_ratio == 1.0 - 1 / 403      # element 1002 of the 403 kept
    mask = torch.rand(10_000, generator=g) > 0.5
    assert compare(mask, mask.clone(), Tolerance()).ok
    flipped = mask.clone()
    flipped[:200] = ~flipped[:200]
    assert compare(flipped, mask, Tolerance()).matched_ratio == 0.98


def test_shape_dtype_and_missing_outputs():
    assert not compare(torch.ones(3), torch.ones(4), Tolerance()).ok
    assert not compare(torch.ones(3, dtype=torch.float16), torch.ones(3), Tolerance()).ok
    assert not compare_all({}, {"out": torch.ones(2)}, Tolerance()).ok


def test_poison_makes_unwritten_elements_fail():
    for dt in (torch.float32, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2, torch.int32,
               torch.uint8, torch.bool):
        x = torch.empty(8, dtype=dt)
        # in place, and the buffer itself comes back: a uint8 view returned for an fp8 output (the
        # bug this test first caught) would be allocated as the kernel's output with the wrong dtype
        assert poison_(x) is x and x.dtype == dt
    for dt in (torch.float32, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):
        t = poison_(torch.empty(8, dtype=dt))
        assert torch.isnan(t.float()).all()
    a = poison_(torch.empty(8, dtype=torch.int32), 0)
    b = poison_(torch.empty(8, dtype=torch.int32), 1)
    assert not torch.equal(a, b)  # an unwritten integer matches the reference in at most one round
    assert poison_(torch.empty(4, dtype=torch.bool), 0).all() and not poison_(
        torch.empty(4, dtype=torch.bool), 1).any()


def test_fp4_dequant_matches_reference_quantizer(sol_execbench_dir, tmp_path):
    """Quantize with the NVFP4 problems' own scaler, multiply through the dequantizing shim, compare
    with the float product: the shim must be a faithful FP4 matmul."""
    from solforge.evaluate.reference import dequant_scaled_mm, load_reference
    from solforge.problem import load_problem_dir

    p = load_problem_dir(sol_execbench_dir / "Quant/020_nvfp4_linear_layer")
    mod = load_reference(p.definition, tmp_path, "ref_fp4")
    sc = mod.BlockWiseScalerNVFP4()
    torch.manual_seed(0)
    a = torch.randn(1, 128, 256)
    w = torch.randn(1, 128, 256)
    aq, asf, ag = sc.quantize(a)
    wq, wsf, wg = sc.quantize(w)
    out = dequant_scaled_mm(aq[0], wq[0].t(), sc.convert_to_blocked_format_for_pytorch_scaled_mm(asf[0]),
                            sc.convert_to_blocked_format_for_pytorch_scaled_mm(wsf[0]),
                            out_dtype=torch.float32) * ag * wg
    ref = a[0] @ w[0].t()
    rel = (out - ref).norm() / ref.norm()
    assert rel < 0.2  # FP4 quantization error, not a layout bug (a wrong layout gives ~1.4)


def test_result_rows_and_json_round_trip():
    r = EvalResult("u1", "rejected", problem="p", guard="caching", message="too fast",
                   median_ms=float("nan"))
    assert r.median_ms is None and r.status == EvalStatus.REJECTED
    row = r.to_row("a1", "hw")
    assert row["status"] == "rejected" and row["message"].startswith("[caching]")
    rep = RunReport("p", [r])
    assert RunReport.from_json(rep.to_json()).results[0] == r
    assert not math.isnan(EvalResult("u", "passed", spread=0.1).spread)
