"""benchmarks/compare_sol_execbench.py without a GPU: which problems a spec selects, which workloads
NVIDIA's CLI cannot run (safetensors blobs missing), and the report it writes from recorded results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit import bench_module

REPO = Path(__file__).resolve().parents[2]
RECORDED = REPO / "data" / "results" / "sol_execbench_compare" / "sol_execbench_compare_h200.json"


@pytest.fixture(scope="module")
def cmp():
    return bench_module.load("compare_sol_execbench")


def _problem(root: Path, subset: str, name: str) -> Path:
    d = root / subset / name
    d.mkdir(parents=True)
    (d / "definition.json").write_text("{}")
    return d


def test_select_problems_globs_names_files_and_dirs(cmp, tmp_path):
    root = tmp_path / "ds"
    a, b = _problem(root, "L1", "001_a"), _problem(root, "L1", "002_b")
    c = _problem(root, "FI", "003_c")
    (root / "L1" / "not_a_problem").mkdir()
    assert cmp.select_problems(["L1/*"], root) == [a.resolve(), b.resolve()]
    lst = tmp_path / "list.txt"
    lst.write_text("# the GEMM first\nFI/003_c\nL1/00[12]_*   # both\nL1/001_a\n")
    assert cmp.select_problems([f"@{lst}"], root) == [c.resolve(), a.resolve(), b.resolve()]
    assert cmp.select_problems([str(b)], root) == [b.resolve()]
    with pytest.raises(ValueError, match="L2/"):
        cmp.select_problems(["L1/*", "L2/*"], root)


def test_missing_blobs_are_named_not_skipped(cmp, tmp_path):
    w = {"uuid": "u", "inputs": {
        "q": {"type": "random"},
        "kv_indptr": {"type": "safetensors", "path": "./blob/workloads/x/kv.safetensors",
                      "tensor_key": "kv_indptr"},
        "kv_indices": {"type": "safetensors", "path": "./blob/workloads/x/kv.safetensors",
                       "tensor_key": "kv_indices"}}}
    assert cmp.blob_inputs(w) == {"kv_indptr": "./blob/workloads/x/kv.safetensors",
                                  "kv_indices": "./blob/workloads/x/kv.safetensors"}
    assert cmp.missing_blobs(w, [tmp_path]) == ["./blob/workloads/x/kv.safetensors"]
    f = tmp_path / "blob" / "workloads" / "x" / "kv.safetensors"
    f.parent.mkdir(parents=True)
    f.write_bytes(b"")
    assert cmp.missing_blobs(w, [tmp_path]) == []
    assert cmp.missing_blobs({"inputs": {"x": {"type": "random"}}}, [tmp_path]) == []


def test_spread_keeps_smallest_and_largest(cmp):
    assert cmp.spread(list(range(10)), 3) == [0, 4, 9] or cmp.spread(list(range(10)), 3) == [0, 5, 9]
    assert cmp.spread([1, 2], 6) == [1, 2]
    assert cmp.spread(list(range(7)), 0) == list(range(7))


@pytest.mark.skipif(not RECORDED.exists(), reason="no recorded comparison")
def test_report_from_recorded_run(cmp):
    """The committed H200 run (both sides, 23 problems + one refused export) recomputed from its raw
    records gives the findings its notes state."""
    doc = json.loads(RECORDED.read_text())
    res = cmp.compare(doc["index"], {c["case"]: c["raw"] for c in doc["cases"]})
    by = {c["case"]: c for c in res["cases"]}
    assert res["summary"]["verdict_disagreements"] == []            # every workload both ran
    assert by["004_gemm_n128_k2048"]["verdicts_agree"] == "6/6"
    k = by["069_rms_norm"]
    assert k["geomean_kernel_ratio_sf_over_nv"] == pytest.approx(0.996, abs=0.002)
    assert k["kernel_within_tol"] is True and by["004_gemm_n128_k2048"]["kernel_within_tol"] is False
    # the eager reference was timed live on the box, beside NVIDIA's reference_latency_ms
    assert k["rows"][0]["eager_source"] == "live"
    assert k["geomean_ref_ratio_ours_over_nv"] == pytest.approx(0.974, abs=0.002)
    assert by["001_fp8_attention_output_projection"]["kind"] == "cannot_run"
    md = cmp.render({**doc, **res})
    assert "## Summary" in md and "| 069_rms_norm | kernel | rmsnorm:v2 | 6 |" in md


def test_report_names_problems_and_workloads_nvidia_cannot_run(cmp):
    index = [{"case": "012_paged", "problem": "012_paged", "subset": "FI", "kind": "cannot_run",
              "reason": "all 2 workloads need safetensors blobs that the dataset copy lacks",
              "workloads": [], "blob_missing": [{"uuid": "aaaaaaaa-1", "axes": {"b": 1},
                                                 "paths": ["./blob/x.safetensors"]}]},
             {"case": "011_ref", "problem": "011_ref", "subset": "L1", "kind": "reference",
              "variant": "reference", "workloads": [{"uuid": "w1", "axes": {"n": 4}}],
              "blob_missing": []}]
    results = {"011_ref": {"solforge": {"workloads": {"w1": {"eager": {"median_ms": 0.0104,
                                                                        "status": "passed"}}}},
                           "nvidia": {"rc": 0, "workloads": {"w1": {
                               "status": "passed", "latency_ms": 0.0101,
                               "reference_latency_ms": 0.0100}}}}}
    res = cmp.compare(index, results)
    ref = res["cases"][1]
    assert ref["verdicts_agree"] == "-" and ref["geomean_kernel_ratio_sf_over_nv"] is None
    assert ref["geomean_ref_ratio_ours_over_nv"] == pytest.approx(1.04)
    assert ref["ref_within_tol"] is True
    assert res["summary"]["cannot_run"] == ["012_paged"]
    assert res["summary"]["workloads_blob_missing"] == 1
    md = cmp.render({**res, "meta": {}})
    assert "cannot run" in md and "safetensors blobs missing" in md and "./blob/x.safetensors" in md


def _run_doc(scale: dict) -> dict:
    """A recorded run of two workloads of one problem, each timing scaled per field."""
    rows = [{"uuid": u, "solforge_ms": 1.0 * scale.get("solforge_ms", 1), "nvidia_ms": 1.02,
             "our_eager_ms": 10.0 * scale.get("our_eager_ms", 1), "nvidia_reference_ms": 10.0 * m}
            for u, m in (("a", 1.0), ("b", 1.2))]
    return {"cases": [{"case": "p", "rows": rows}], "meta": {"command": "run"}}


def test_repeat_reports_each_sides_own_scatter_beside_the_cross_ratio(cmp):
    doc = cmp.repeatability([_run_doc({}), _run_doc({"our_eager_ms": 1.10})])
    (p,) = doc["problems"]
    assert p["repeat_solforge_ms"] == pytest.approx(1.0)
    assert p["repeat_our_eager_ms"] == pytest.approx(1.10)         # solforge's eager side moved 10%
    assert p["repeat_nvidia_reference_ms"] == pytest.approx(1.0)
    assert p["kernel_sf_over_nv"] == pytest.approx(1 / 1.02)
    # per workload the median of the two runs (10 and 11 ms) against NVIDIA's 10 and 12 ms
    assert p["ref_sf_over_nv"] == pytest.approx(((10.5 / 10.0) * (10.5 / 12.0)) ** 0.5)
    sm = doc["summary"]
    assert sm["repeat_our_eager_ms"]["within_tol"] == 0 and sm["repeat_solforge_ms"]["within_tol"] == 1
    md = cmp.render_repeat(doc)
    assert "| p | 2 |" in md and "solforge eager reference: run k / run 1" in md


def test_repeat_of_a_recorded_run_with_itself_is_exact(cmp):
    rec = json.loads((RECORDED.parent / "sol_execbench_compare_h200_one_call.json").read_text())
    doc = cmp.repeatability([rec, rec])
    assert doc["summary"]["problems"] >= 20
    assert all(r["repeat_solforge_ms"] in (None, pytest.approx(1.0)) for r in doc["problems"])


def test_repeat_counts_only_this_runs_eager_readings_and_every_nvidia_reading(cmp):
    """A case cut at the deadline carries the CSV's eager time (eager_source), no reading of that
    run: it is no repeat. In a reference-only case NVIDIA's time of the solution (which calls the
    reference) is a reading of the reference too, pooled into the workload's median."""
    def doc(eager, src, nv_sol, nv_ref):
        rows = [{"uuid": "a", "our_eager_ms": eager, "eager_source": src, "nvidia_ms": nv_sol,
                 "nvidia_reference_ms": nv_ref}]
        return {"cases": [{"case": "p", "kind": "reference", "rows": rows}], "meta": {"command": "run"}}

    d = cmp.repeatability([doc(0.5, "live", 0.4, 0.6), doc(0.9, "baselines_h200.csv", None, None),
                           doc(0.5, "live", 0.5, 0.9)], host_bound_below_ms=2.0)
    (p,) = d["problems"]
    assert p["repeat_our_eager_ms"] == pytest.approx(1.0)          # the CSV row is not a repeat
    # NVIDIA's four readings 0.4, 0.6, 0.5, 0.9: median 0.55; solforge's two live ones: 0.5
    assert p["ref_sf_over_nv"] == pytest.approx(0.5 / 0.55)
    assert p["ref_sf_over_nv_host_bound"] == pytest.approx(0.5 / 0.55)
    assert p["ref_sf_over_nv_gpu_bound"] is None and p["host_bound_workloads"] == 1
    # where the run recorded the GPU's busy time, that decides: a 0.5 ms call busy 0.45 ms is
    # GPU-bound (a short GEMM), whatever the 2 ms rule says
    g = cmp.repeatability([{"cases": [{"case": "p", "kind": "kernel", "rows": [
        {"uuid": "a", "our_eager_ms": 0.5, "our_eager_busy_ms": 0.45, "nvidia_reference_ms": 0.5},
        {"uuid": "b", "our_eager_ms": 0.5, "our_eager_busy_ms": 0.1, "nvidia_reference_ms": 0.4}]}]}],
        host_bound_below_ms=2.0)["problems"][0]
    assert g["ref_sf_over_nv_gpu_bound"] == pytest.approx(1.0)
    assert g["ref_sf_over_nv_host_bound"] == pytest.approx(1.25) and g["host_bound_workloads"] == 1
    # a case with a kernel: its solution time is the kernel's, not a reading of the reference
    k = cmp.repeatability([{"cases": [{"case": "q", "kind": "kernel", "rows": [
        {"uuid": "a", "our_eager_ms": 3.0, "nvidia_ms": 1.0, "nvidia_reference_ms": 3.3}]}]}])
    assert k["problems"][0]["ref_sf_over_nv_gpu_bound"] == pytest.approx(3.0 / 3.3)


def test_reference_only_case_exports_the_reference_even_where_a_kernel_is_saved(cmp, tmp_path):
    from tests.unit.adv_problem import ADV, write_problem

    ref = (ADV / "definition.json").read_text()
    src = write_problem(tmp_path / "ds", "L1", "001_add", json.loads(ref)["reference"],
                        [("w1", 64), ("w2", 4096)])
    kernels = tmp_path / "kernels"
    (kernels / "fam" / "best").mkdir(parents=True)
    (kernels / "fam" / "best" / "001_add.json").write_text("{}")   # never read: reference-only
    e = cmp.prepare_case(src, tmp_path / "cases", tmp_path, 6, {}, kernels_root=kernels,
                         check=None, reference_only=True)
    assert e["kind"] == "reference" and len(e["workloads"]) == 2
    sol = json.loads((tmp_path / "cases" / e["solution"]).read_text())
    assert sol["spec"]["languages"] == ["pytorch"]
    assert "def run" in sol["sources"][0]["content"]
    assert not (tmp_path / "cases" / "001_add" / "candidate.json").exists()
    # without the flag the saved best file is what is exported (and this empty one is refused)
    with pytest.raises(KeyError):
        cmp.prepare_case(src, tmp_path / "cases2", tmp_path, 6, {}, kernels_root=kernels, check=None)


def test_cpus_parsed_or_refused_in_one_line(cmp):
    import os

    mine = sorted(os.sched_getaffinity(0))
    assert cmp.parse_cpus(None) is None
    assert cmp.parse_cpus(f"{mine[0]}, {mine[-1]}") == {mine[0], mine[-1]}
    with pytest.raises(ValueError, match="comma list"):
        cmp.parse_cpus("4-5")
    with pytest.raises(ValueError, match="not among"):
        cmp.parse_cpus(str(max(mine) + 1000))


def test_reference_only_cases_report_nvidia_against_itself(cmp):
    index = [{"case": "p", "problem": "p", "subset": "L1", "kind": "reference",
              "workloads": [{"uuid": "a", "axes": {}}, {"uuid": "b", "axes": {}}]}]
    nv = {"a": {"status": "passed", "latency_ms": 0.2, "reference_latency_ms": 0.1},
          "b": {"status": "passed", "latency_ms": 0.05, "reference_latency_ms": 0.1}}
    sf = {"a": {"eager": {"status": "passed", "median_ms": 0.1}},
          "b": {"eager": {"status": "passed", "median_ms": 0.1}}}
    doc = cmp.compare(index, {"p": {"nvidia": {"rc": 0, "workloads": nv},
                                    "solforge": {"workloads": sf}}})
    c = doc["cases"][0]
    assert c["geomean_nvidia_self_ratio"] == pytest.approx(1.0)   # 2x and 0.5x
    assert c["nvidia_self_within_tol"] and c["nvidia_self_range"] == [0.5, 2.0]
    sm = doc["summary"]
    assert (sm["nvidia_self_within_tol"], sm["nvidia_self_compared"]) == (1, 1)
    assert "within 5% on 1 of 1; single workloads 0.50x to 2.00x" in cmp.render(doc)


def test_one_run_splits_the_reference_ratio_by_how_busy_the_gpu_was(cmp):
    """A workload whose eager span the GPU filled (busy_ms near median_ms) is GPU-bound whatever its
    length; one where the GPU sat idle most of the span is host-bound, even at 3 ms a call."""
    index = [{"case": "p", "problem": "p", "subset": "L1", "kind": "reference",
              "workloads": [{"uuid": u, "axes": {}} for u in "abc"]}]
    nv = {u: {"status": "passed", "latency_ms": t, "reference_latency_ms": t}
          for u, t in (("a", 0.05), ("b", 0.2), ("c", 3.0))}
    sf = {"a": {"eager": {"status": "passed", "median_ms": 0.05, "busy_ms": 0.05}},   # a short GEMM
          "b": {"eager": {"status": "passed", "median_ms": 0.3, "busy_ms": 0.02}},    # tiny kernels
          "c": {"eager": {"status": "passed", "median_ms": 3.3, "busy_ms": 0.9}}}     # a long chain
    doc = cmp.compare(index, {"p": {"nvidia": {"rc": 0, "workloads": nv},
                                    "solforge": {"workloads": sf}}})
    c = doc["cases"][0]
    assert c["geomean_ref_ratio_gpu_bound"] == pytest.approx(1.0)
    assert c["geomean_ref_ratio_host_bound"] == pytest.approx((1.5 * 1.1) ** 0.5)
    sm = doc["summary"]
    assert (sm["ref_gpu_bound_within_tol"], sm["ref_gpu_bound_compared"]) == (1, 1)
    assert (sm["ref_host_bound_within_tol"], sm["ref_host_bound_compared"]) == (0, 1)
    assert "GPU-bound workloads" in cmp.render(doc)


def test_building_the_command_line_imports_no_solforge():
    """`run` evaluates with the cases' committed snapshot of solforge (prepare's solforge_head), put
    first on sys.path when it starts: a solforge module imported before that (an argparse default
    computed from settings) would make every later import this tree's instead."""
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "compare_sol_execbench.py"
    code = ("import atexit, runpy, sys\n"
            "atexit.register(lambda: print('IMPORTED' if 'solforge' in sys.modules else 'CLEAN'))\n"
            f"sys.argv = ['compare_sol_execbench.py', '--help']\n"
            f"runpy.run_path({str(script)!r}, run_name='__main__')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip().splitlines()[-1] == "CLEAN", r.stdout[-500:] + r.stderr[-500:]


def test_combined_halves_repeat_as_each_half_does(cmp, tmp_path):
    """Two lists run in separate calls, combined run by run (`combine --stem`), then `repeat`: each
    problem's ratios are those of repeating its own list alone."""
    import argparse

    stem = "sol_execbench_compare_h100_2026-12-05_{}_busy_run{}.json"
    halves = ("first", "tail")
    if not all((RECORDED.parent / stem.format(h, k)).exists() for h in halves for k in (1, 2)):
        pytest.skip("the recorded busy-time runs are not in this checkout")
    combined = []
    for k in (1, 2):
        ns = argparse.Namespace(docs=[str(RECORDED.parent / stem.format(h, k)) for h in halves],
                                out=str(tmp_path), notes=None, stem=f"both_run{k}")
        assert cmp.cmd_combine(ns) == 0
        combined.append(json.loads((tmp_path / f"both_run{k}.json").read_text()))
    whole = {p["case"]: p for p in cmp.repeatability(combined)["problems"]}
    alone = {}
    for h in halves:
        docs = [json.loads((RECORDED.parent / stem.format(h, k)).read_text()) for k in (1, 2)]
        alone.update({p["case"]: p for p in cmp.repeatability(docs)["problems"]})
    assert len(whole) == len(alone) == 40
    for name, p in alone.items():
        assert whole[name]["ref_sf_over_nv"] == pytest.approx(p["ref_sf_over_nv"]), name
        assert whole[name]["repeat_our_eager_ms"] == pytest.approx(p["repeat_our_eager_ms"]), name
