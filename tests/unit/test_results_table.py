"""`solforge table`: one row per problem of the store (or of a dataset folder), unserved problems
counted as 1.0x / SOL 0.5, and the summary per subset and overall, on a real DuckDB file."""

from __future__ import annotations

import json
import math

from test_report_views import make_store

from solforge.cli import main
from solforge.results.table import build, dataset_names, markdown


def _p_three(s):
    s.insert_rows("problems", [{"name": "p_three", "subset": "L2", "content_hash": "h3",
                                "definition": {"name": "p_three"}, "n_workloads": 1}])


def test_every_problem_counted_unserved_as_baseline(tmp_path):
    s = make_store(tmp_path / "r.duckdb")
    _p_three(s)  # never attempted
    t = build(s)
    rows = {r.problem: r for r in t.rows}
    assert set(rows) == {"p_one", "p_two", "p_three"}
    assert rows["p_one"].served and math.isclose(rows["p_one"].speedup, 4.0)
    assert math.isclose(rows["p_one"].sol_score, 0.7)
    assert rows["p_two"].served and math.isclose(rows["p_two"].speedup, 0.5)  # served but slower: as measured
    assert not rows["p_three"].served and rows["p_three"].counted_speedup == 1.0
    assert rows["p_three"].counted_sol == 0.5
    allr = next(x for x in t.summaries if x.subset == "all")
    assert allr.problems == 3 and allr.served == 2
    assert math.isclose(allr.geomean_speedup, (4.0 * 0.5 * 1.0) ** (1 / 3))
    assert math.isclose(allr.share_faster, 1 / 3) and math.isclose(allr.share_over_2x, 1 / 3)
    assert math.isclose(allr.mean_sol, (0.7 + 0.35 + 0.5) / 3) and math.isclose(allr.median_sol, 0.5)
    l2 = next(x for x in t.summaries if x.subset == "L2")
    assert l2.problems == 2 and l2.served == 1


def test_dataset_folder_adds_problems_the_store_never_saw(tmp_path):
    s = make_store(tmp_path / "r.duckdb")
    for sub, name in (("L1", "p_one"), ("L1", "p_new")):
        d = tmp_path / "ds" / sub / name
        d.mkdir(parents=True)
        (d / "definition.json").write_text(json.dumps({"name": name}))
    assert dataset_names(tmp_path / "ds") == {"p_one": "L1", "p_new": "L1"}
    t = build(s, dataset=dataset_names(tmp_path / "ds"))
    assert [(r.problem, r.served) for r in t.rows] == [("p_new", False), ("p_one", True)]


def test_cli_markdown_and_json(tmp_path, capsys):
    s = make_store(tmp_path / "r.duckdb")
    assert main(["table", "--db", str(s.path), "--markdown"]) == 0
    md = capsys.readouterr().out
    assert md.startswith("| subset | problems | timed | geomean speedup |")
    assert "| all | 2 | 2 | 1.41x | 50% | 50% | 0.525 | 0.525 |" in md
    assert "| p_one | L1 | 4.00x | 0.700 |" in md
    assert main(["--json", "table", "--db", str(s.path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {p["problem"] for p in out["problems"]} == {"p_one", "p_two"}
    assert markdown(build(s), with_problems=False).count("\n|") == 4  # header rule + 3 subset rows


def test_cli_table_on_an_empty_store_says_so(tmp_path, capsys):
    assert main(["table", "--db", str(tmp_path / "e.duckdb")]) == 2
    assert "no problems" in capsys.readouterr().err


def test_tried_without_a_timed_kernel_is_told_apart_from_unserved():
    from solforge.results.table import ProblemResult, problem_cells

    tried = ProblemResult(problem="p", subset="L2", served=False, attempts=2)
    never = ProblemResult(problem="q", subset="L2", served=False, attempts=0)
    assert problem_cells(tried)[2] == "no timed kernel (1.00x)"
    assert problem_cells(never)[2] == "unserved (1.00x)"
    assert problem_cells(tried)[3] == problem_cells(never)[3] == "(0.500)"
    assert tried.counted_speedup == never.counted_speedup == 1.0
