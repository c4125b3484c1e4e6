"""Report analysis (polars), the self-contained HTML, the CLI, and the results importer."""

from __future__ import annotations

import json
import math
import re

import pytest
from test_report_views import make_store

from solforge.cli import main as cli_main
from solforge.report import analysis, html
from solforge.store import Store


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    s = make_store(tmp_path_factory.mktemp("rep") / "r.duckdb")
    return s, analysis.load(s)


def test_subset_summary_matches_hand_numbers(data):
    _, d = data
    sub = {r["subset"]: r for r in d.subsets.to_dicts()}
    assert sub["L1"]["problems"] == 1 and sub["L1"]["share_beat_baseline"] == 1.0
    assert sub["L1"]["share_over_2x"] == 1.0 and math.isclose(sub["L1"]["geomean_speedup"], 4.0)
    assert sub["L2"]["share_beat_baseline"] == 0.0 and math.isclose(sub["L2"]["median_sol_score"], 0.35)
    allr = sub["all"]
    assert allr["problems"] == 2 and allr["share_beat_baseline"] == 0.5
    assert math.isclose(allr["geomean_speedup"], math.sqrt(4.0 * 0.5))
    assert math.isclose(allr["cost_usd"], 1.75)


def test_polars_best_agrees_with_view(data):
    s, d = data
    view = {r["problem"]: r["attempt_id"] for r in s.query("SELECT * FROM v_best_per_problem")}
    mine = dict(zip(d.problems["problem"].to_list(), d.problems["best_attempt_id"].to_list()))
    assert mine == view


def test_histograms_and_spend(data):
    _, d = data
    labels, counts = analysis.sol_histogram(d.problems)
    assert counts["L1"][labels.index("0.7")] == 1 and counts["L2"][labels.index("0.3")] == 1
    _, sp = analysis.speedup_histogram(d.problems)
    assert sum(sp["L1"]) == 1 and sp["L1"][-1] == 1  # 4x: the ">=4.0x" bin
    assert sp["L2"][1] == 1  # 0.5x: the "0.5-0.8x" bin
    spend = {r["problem"]: r for r in d.llm.to_dicts()}
    assert math.isclose(spend["p_one"]["usd_per_speedup_gain"], 0.75 / 3.0)
    assert spend["p_two"]["usd_per_speedup_gain"] is None  # never beat the baseline
    assert d.planner["spent_attempts"].to_list() == [0.0, 3.0]
    assert d.planner["t_s"].to_list() == [0.0, 13.0]


def test_html_is_self_contained_and_has_its_plots(data):
    _, d = data
    page = html.render(d, source_label="synthetic test history")
    assert "<script" not in page.lower()
    # the SVG namespace is an identifier, not a fetch; nothing else may point outside the file
    assert not re.findall(r"(?:src|href)\s*=", page)
    assert re.sub(r'xmlns="http://www.w3.org/2000/svg"', "", page).count("http") == 0
    for plot in ("sol-histogram", "speedup-histogram", "improvement:p_one", "planner:attempts",
                 "llm-spend"):
        assert f'data-plot="{plot}"' in page
    bars = re.findall(r'<rect class="bar"[^>]*data-series="L1"[^>]*data-category="0.7"[^>]*'
                      r'data-value="([0-9.]+)"', page)
    assert bars == ["1"]
    assert "synthetic test history" in page


def test_cli_report_json_and_html(tmp_path, capsys, data):
    s, _ = data
    out = tmp_path / "r.html"
    assert cli_main(["--db", str(s.path), "--json", "report", "--html", str(out)]) == 0
    res = json.loads(capsys.readouterr().out)
    assert {r["subset"] for r in res["subsets"]} == {"L1", "L2", "all"}
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert cli_main(["--db", str(s.path), "--json", "report", "--run", "nope"]) == 0
    assert json.loads(capsys.readouterr().out)["problems"] == []


def test_import_bench_rows(tmp_path, sol_execbench_dir):
    from solforge.report.import_results import import_bench_rows

    wl = [json.loads(x) for x in (sol_execbench_dir / "L1" / "069_rms_norm" / "workload.jsonl")
          .read_text().splitlines()[:2]]
    rows = []
    for variant, tks in (("rmsnorm:v0", (0.02, 0.04)), ("rmsnorm:v1", (0.01, 0.05))):
        for i, (w, tk) in enumerate(zip(wl, tks)):
            rows.append({"problem": "069_rms_norm", "subset": "L1", "family": "rmsnorm",
                         "variant": variant, "params": {}, "workload": i, "uuid": w["uuid"],
                         "axes": w["axes"], "t_eager_ms": 0.08, "t_compile_ms": 0.06 if i else None,
                         "ok": True, "max_abs_err": 0.0, "reason": "", "t_kernel_ms": tk,
                         "spread_ms": 0.001})
    rf = tmp_path / "rows.jsonl"
    rf.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    bl = tmp_path / "bl.csv"
    bl.write_text("problem,workload_uuid,eager_ms,compile_ms,T_b_ms,T_b_variant,label,eager_status,"
                  "compile_status,eager_spread,compile_spread,eager_message,compile_message\n"
                  f"069_rms_norm,{wl[0]['uuid']},0.002,,0.002,eager,,passed,skipped,0.01,,,time box\n")
    s = Store(tmp_path / "imp.duckdb")
    # T_sol given up front (as a previous `solforge sol` run would have): no counting in this test
    s.upsert_rows("roofline", [{"problem": "069_rms_norm", "workload_uuid": w["uuid"],
                                "gpu_profile": "h200", "t_sol_ms": 0.004} for w in wl],
                  key=("problem", "workload_uuid", "gpu_profile"))
    sm = import_bench_rows(s, [rf], baselines_csv=bl, problems_root=sol_execbench_dir,
                           rebuild_candidates=False)
    assert sm.attempts == 2 and sm.eval_rows == 4 and sm.baseline_rows == 2 and sm.roofline_rows == 0
    rows_db = s.query("SELECT workload_uuid, speedup, sol_score, t_kernel_ms, t_baseline_ms, "
                      "baseline_variant FROM scores ORDER BY t_kernel_ms")
    # T_b per workload: the fastest baseline seen for it in the imported rows (eager 0.08 on w0,
    # torch.compile 0.06 on w1), for every variant alike
    by = {(r["workload_uuid"], r["t_kernel_ms"]): r for r in rows_db}
    r = by[(wl[0]["uuid"], 0.01)]
    assert math.isclose(r["speedup"], 8.0) and r["baseline_variant"] == "eager"
    assert math.isclose(r["sol_score"], 1 / (1 + (0.01 - 0.004) / (0.08 - 0.004)))
    r = by[(wl[1]["uuid"], 0.05)]
    assert math.isclose(r["t_baseline_ms"], 0.06) and r["baseline_variant"] == "compile"
    lb = s.query("SELECT * FROM v_leaderboard")
    assert lb[0]["subset"] == "L1" and lb[0]["attempts"] == 2
    # importing the same file again changes nothing
    again = import_bench_rows(s, [rf], baselines_csv=bl, problems_root=sol_execbench_dir,
                              rebuild_candidates=False)
    assert again.attempts == 0 and again.skipped_files == [str(rf)] and again.baseline_rows == 0
    assert s.scalar("SELECT count(*) FROM attempts") == 2


def test_import_rejects_bad_line(tmp_path):
    from solforge.errors import InputError
    from solforge.report.import_results import read_rows

    f = tmp_path / "bad.jsonl"
    f.write_text('{"problem": "x", "variant": "v", "uuid": "u", "ok": true}\n{"problem": "x"}\n')
    with pytest.raises(InputError) as e:
        read_rows(f)
    assert e.value.line == 2 and e.value.field == "variant"
