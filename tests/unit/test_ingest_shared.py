"""Ingest of the shared datasets: counts, subsets, stable content hashes, FlashInfer-Trace workloads
attached to their definitions, and the L2 `required_match_ratio` spelling handled like the official
evaluator does (ignored with a warning; 0.99 applies)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from solforge.problem.sources import ingest_path

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sol_report(sol_execbench_dir):
    return ingest_path(sol_execbench_dir)


def test_sol_execbench_tree(sol_report, sol_execbench_dir):
    r = sol_report
    assert r.errors == []
    assert len(r.problems) == 201
    assert sum(len(p.workloads) for p in r.problems) == 3427
    on_disk = {s.name: len([p for p in s.iterdir() if p.is_dir()]) for s in sol_execbench_dir.iterdir()}
    assert {k: v["problems"] for k, v in r.counts_by_subset().items()} == on_disk
    assert all(p.format == "sol-execbench" and Path(p.source).is_dir() for p in r.problems)
    assert all(p.extra["provenance"]["path"] == p.source for p in r.problems)
    assert len({p.content_hash for p in r.problems}) == 201
    assert [(p.subset, p.name) for p in r.problems] == sorted((p.subset, p.name) for p in r.problems)


def test_reingest_gives_identical_hashes(sol_report, sol_execbench_dir):
    again = ingest_path(str(sol_execbench_dir / "L1"))
    first = {p.name: p.content_hash for p in sol_report.problems if p.subset == "L1"}
    assert {p.name: p.content_hash for p in again.problems} == first


def test_single_problem_dir_and_definition_file(sol_execbench_dir, sol_report):
    pdir = sorted((sol_execbench_dir / "Quant").iterdir())[0]
    want = next(p for p in sol_report.problems if p.source == str(pdir))
    for target in (pdir, pdir / "definition.json"):
        r = ingest_path(target)
        assert r.errors == [] and len(r.problems) == 1
        assert r.problems[0].subset == "Quant"
        assert r.problems[0].content_hash == want.content_hash


def test_hash_follows_content_not_location(tmp_path, sol_execbench_dir, sol_report):
    src = sorted((sol_execbench_dir / "L1").iterdir())[1]
    want = next(p for p in sol_report.problems if p.source == str(src))
    copy = tmp_path / "elsewhere" / src.name
    shutil.copytree(src, copy)
    assert ingest_path(copy).problems[0].content_hash == want.content_hash
    lines = (copy / "workload.jsonl").read_text().splitlines()
    w = json.loads(lines[0])
    w.setdefault("tolerance", {})["max_atol"] = 0.5
    (copy / "workload.jsonl").write_text("\n".join([json.dumps(w)] + lines[1:]) + "\n")
    assert ingest_path(copy).problems[0].content_hash != want.content_hash


def test_l2_required_match_ratio_is_ignored_with_warning(sol_report, sol_execbench_dir):
    l2 = [p for p in sol_report.problems if p.subset == "L2"]
    checked = 0
    for p in l2:
        raw = [json.loads(x) for x in (Path(p.source) / "workload.jsonl").read_text().splitlines()
               if x.strip()]
        for w, rw in zip(raw, p.workloads):
            tol = w.get("tolerance") or {}
            if "required_match_ratio" not in tol:
                continue
            checked += 1
            assert rw.workload.tolerance.ignored_match_ratio == tol["required_match_ratio"]
            # the official evaluator's model does not know the key: the default (or the correctly
            # spelled key, if also present) applies
            assert rw.workload.tolerance.required_matched_ratio == tol.get("required_matched_ratio", 0.99)
            assert any("required_match_ratio" in m for m in rw.warnings)
        if checked:
            assert any("required_match_ratio" in m and "ignored" in m for m in p.warnings)
    assert checked > 100  # the whole L2 subset spells it this way
    assert any(tol_val != 0.99 for p in l2 for rw in p.workloads
               if (tol_val := rw.workload.tolerance.ignored_match_ratio) is not None)


def test_flashinfer_trace_tree(flashinfer_trace_dir):
    r = ingest_path(flashinfer_trace_dir)
    assert r.errors == []
    n_defs = len(list((flashinfer_trace_dir / "definitions").rglob("*.json")))
    assert len(r.problems) == n_defs == 156
    assert {p.subset for p in r.problems} == {"FlashInfer-Trace"}
    assert all(p.format == "flashinfer-trace" for p in r.problems)
    with_wl = {p.name: len(p.workloads) for p in r.problems if p.workloads}
    # every trace file's lines end up on the definition they name
    expected: dict[str, set] = {}
    for f in (flashinfer_trace_dir / "workloads").rglob("*.jsonl"):
        for line in f.read_text().splitlines():
            if line.strip():
                t = json.loads(line)
                expected.setdefault(t["definition"], set()).add(t["workload"]["uuid"])
    assert with_wl == {k: len(v) for k, v in expected.items()}
    assert len(with_wl) == 26 and sum(with_wl.values()) == 663
    empty = [p for p in r.problems if not p.workloads]
    assert empty and all(any("no workloads" in w for w in p.warnings) for p in empty)
    # safetensors blobs are not in the shared copy: said once per problem, not once per workload
    blob_users = [p for p in r.problems if any("safetensors" in w for w in p.warnings)]
    assert blob_users and all(sum("safetensors" in w for w in p.warnings) == 1 for p in blob_users)


def test_data_problems_dir_ingests():
    r = ingest_path(REPO / "data" / "problems")
    assert r.errors == []
    assert all(p.workloads for p in r.problems)


def test_missing_path_is_an_error(tmp_path):
    r = ingest_path(tmp_path / "nope")
    assert len(r.errors) == 1 and r.errors[0].file == str(tmp_path / "nope") and not r.problems


def test_duplicate_problem_names_are_reported(tmp_path, sol_execbench_dir):
    src = sorted((sol_execbench_dir / "L1").iterdir())[0]
    shutil.copytree(src, tmp_path / "a" / src.name)
    shutil.copytree(src, tmp_path / "b" / src.name)
    r = ingest_path(tmp_path)
    assert len(r.problems) == 1 and len(r.errors) == 1
    assert r.errors[0].field == "name" and "/b/" in r.errors[0].file


def test_lone_flashinfer_definition_file(flashinfer_trace_dir):
    f = sorted((flashinfer_trace_dir / "definitions" / "rmsnorm").glob("*.json"))[0]
    r = ingest_path(f)
    assert r.errors == [] and len(r.problems) == 1
    p = r.problems[0]
    assert p.workloads == [] and p.format == "definition" and p.source == str(f)


def test_ingest_report_summary(flashinfer_trace_dir):
    from solforge.problem.ingest import summarize

    text = summarize(ingest_path(flashinfer_trace_dir))
    assert "156 problems, 663 workloads, 0 errors" in text and "FlashInfer-Trace" in text
