"""Downloaded datasets as an attacker would shape them: names that become paths, files that never
end, folders that loop, expressions that explode, a store file that is not a store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from solforge.candidate import eval_expr
from solforge.problem import axis_expr
from solforge.problem.sources import ingest_path

from .conftest import MARK
from .problems import write_problem

BOMBS = ["((2**64)**64)**64", "2**64**64", "((((n**64)**64)**64)**64)", "(2**63)*(2**63)*(2**63)*(2**63)*(2**63)",
         "max(9**60, 1)**60"]


def names_ingested(report) -> set[str]:
    return {p.name for p in report.problems}


# ---- the Hub -----------------------------------------------------------------------------------
def _snapshot(tmp_path: Path, configs: list[tuple[str, str]]) -> Path:
    """A fake Hub snapshot: parquet files and a card whose configs name them."""
    import polars as pl

    snap = tmp_path / "snap"
    (snap / "data").mkdir(parents=True)
    adv = json.loads((Path(__file__).parents[1] / "adversarial" / "problem" / "definition.json").read_text())
    wl = json.loads((Path(__file__).parents[1] / "adversarial" / "problem" / "workload.jsonl")
                    .read_text().splitlines()[0])
    card = ["---", "configs:"]
    for i, (config, name) in enumerate(configs):
        row = {"name": name, "hf_id": None, "description": "d", "reference": adv["reference"],
               "custom_inputs_entrypoint": None, "axes": json.dumps(adv["axes"]),
               "inputs": json.dumps(adv["inputs"]), "outputs": json.dumps(adv["outputs"]),
               "workloads": json.dumps([wl])}
        pl.DataFrame([row]).write_parquet(snap / "data" / f"c{i}.parquet")
        card += [f"- config_name: {json.dumps(config)}", f"  data_files: data/c{i}.parquet"]
    (snap / "README.md").write_text("\n".join(card + ["---", ""]))
    return snap


def test_hub_config_name_cannot_reach_outside_the_cache(tmp_path, monkeypatch):
    from solforge.problem import hf

    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    cache = tmp_path / "cache"
    depth = len((cache / "unpacked" / "o__d" / "c0ffee").relative_to(tmp_path).parts)
    evil = "/".join([".."] * depth) + "/victim"
    snap = _snapshot(tmp_path, [(evil, "evil_problem"), ("good", "good_problem")])
    monkeypatch.setattr(hf, "download", lambda repo, rev, cdir: (snap, "c0ffee"))
    report = hf.ingest_hf("hf://o/d", cache_dir=cache)
    assert (victim / "precious.txt").read_text() == "keep me"
    assert names_ingested(report) == {"good_problem"}  # the run goes on
    assert any("config name" in str(e) for e in report.errors)


def test_hub_uri_parts_with_dot_dot_are_refused(tmp_path):
    from solforge.problem import hf

    report = hf.ingest_hf("hf://../../etc/L1", cache_dir=tmp_path)
    assert not report.problems and report.errors and len(str(report.errors[0]).splitlines()) == 1


# ---- files that never end, folders that loop ---------------------------------------------------
def test_fifo_definition_does_not_hang_and_the_neighbour_is_ingested(tmp_path):
    write_problem(tmp_path, "good_one")
    bad = tmp_path / "S" / "fifo_problem"
    bad.mkdir()
    os.mkfifo(bad / "definition.json")
    (bad / "workload.jsonl").write_text("{}\n")
    t0 = time.monotonic()
    report = ingest_path(tmp_path)
    assert time.monotonic() - t0 < 10
    assert names_ingested(report) == {"good_one"}
    assert any("not a regular file" in str(e) for e in report.errors)


@pytest.mark.parametrize("target", ["/dev/zero", "/dev/urandom"])
def test_workload_file_pointing_at_an_endless_device(tmp_path, target):
    write_problem(tmp_path, "good_one")
    d = write_problem(tmp_path, "endless")
    (d / "workload.jsonl").unlink()
    (d / "workload.jsonl").symlink_to(target)
    t0 = time.monotonic()
    report = ingest_path(tmp_path)
    assert time.monotonic() - t0 < 10
    assert names_ingested(report) == {"good_one"} and report.errors


def test_oversized_file_is_refused_unread(tmp_path):
    write_problem(tmp_path, "good_one")
    d = write_problem(tmp_path, "huge")
    with open(d / "workload.jsonl", "ab") as f:
        f.truncate(200 << 20)  # sparse: 200 MB on paper
    report = ingest_path(tmp_path)
    assert names_ingested(report) == {"good_one"}
    assert any("limit" in str(e) for e in report.errors)


def test_symlink_loops_end_and_the_good_problem_is_ingested(tmp_path):
    write_problem(tmp_path, "good_one")
    (tmp_path / "S" / "self").symlink_to(tmp_path / "S" / "self")      # ELOOP
    (tmp_path / "S" / "up").symlink_to(tmp_path)                         # a cycle back to the root
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    t0 = time.monotonic()
    report = ingest_path(tmp_path)
    assert time.monotonic() - t0 < 20
    assert names_ingested(report) == {"good_one"}
    assert all(len(str(e).splitlines()) == 1 for e in report.errors)


# ---- names and paths ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["../../escape", "a/b", ".hidden", "x\ny", "a" * 300, "-rf"])
def test_problem_names_that_would_be_paths_are_refused(tmp_path, name):
    write_problem(tmp_path, "good_one")
    d = write_problem(tmp_path, "renamed")
    defn = json.loads((d / "definition.json").read_text())
    defn["name"] = name
    (d / "definition.json").write_text(json.dumps(defn))
    report = ingest_path(tmp_path)
    assert names_ingested(report) == {"good_one"}
    assert any(e.field == "name" for e in report.errors)


@pytest.mark.parametrize("path", ["/dev/zero", "/etc/passwd", "../../../../etc/passwd", "~/.ssh/id_rsa"])
def test_blob_paths_outside_the_dataset_are_refused(tmp_path, path):
    write_problem(tmp_path, "good_one")
    d = write_problem(tmp_path, "blobby")
    lines = [json.loads(x) for x in (d / "workload.jsonl").read_text().splitlines()]
    for w in lines:
        w["inputs"]["x"] = {"type": "safetensors", "path": path, "tensor_key": "x"}
    (d / "workload.jsonl").write_text("".join(json.dumps(w) + "\n" for w in lines))
    t0 = time.monotonic()
    report = ingest_path(tmp_path)
    assert time.monotonic() - t0 < 10
    assert names_ingested(report) == {"good_one"}
    assert any("inputs.x.path" in (e.field or "") for e in report.errors)


# ---- expressions -------------------------------------------------------------------------------
@pytest.mark.parametrize("bomb", BOMBS)
def test_power_bombs_are_refused_before_they_are_computed(bomb):
    t0 = time.monotonic()
    with pytest.raises(axis_expr.ExprError):
        axis_expr.evaluate(bomb, {"n": 2})
    with pytest.raises((ValueError, ArithmeticError)):
        eval_expr(bomb, {"n": 2})  # the launch-spec path
    assert time.monotonic() - t0 < 1


def test_power_bomb_in_an_axis_expression_at_ingest(tmp_path):
    write_problem(tmp_path, "good_one")
    d = write_problem(tmp_path, "bomb")
    defn = json.loads((d / "definition.json").read_text())
    defn["axes"]["m"] = {"type": "expr", "expression": "((n**64)**64)**64"}
    defn["outputs"]["out"]["shape"] = ["m"]
    (d / "definition.json").write_text(json.dumps(defn))
    t0 = time.monotonic()
    report = ingest_path(tmp_path)
    assert time.monotonic() - t0 < 10
    assert "good_one" in names_ingested(report) and "bomb" not in names_ingested(report)


def test_power_bomb_in_a_candidates_launch_is_one_message(tmp_path):
    from solforge.agents.lab import static_check
    from solforge.candidate import Candidate
    from solforge.compile.samples import SCALE_CU, candidate
    from solforge.problem.loader import load_problem_dir

    problem = load_problem_dir(write_problem(tmp_path, "p"))
    cand = candidate(SCALE_CU, "scale", args=["x", "out", "float32:1.0", "int32:n"],
                     grid=["((n**64)**64)**64"])
    cand["problem"] = "p"
    t0 = time.monotonic()
    msg = static_check(problem, Candidate.model_validate(cand))
    assert msg and "\n" not in msg and time.monotonic() - t0 < 1


# ---- the store ---------------------------------------------------------------------------------
@pytest.mark.parametrize("content", [b"not a database at all", b"\x00" * 4096, b"SQLite format 3\x00" * 64])
def test_a_store_file_that_is_not_duckdb_is_one_line(tmp_path, content):
    bad = tmp_path / "bad.duckdb"
    bad.write_bytes(content)
    r = subprocess.run([sys.executable, "-m", "solforge.cli", "--db", str(bad), "problems"],
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=str(Path.cwd())))
    assert r.returncode != 0
    lines = [x for x in r.stderr.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and str(bad) in lines[0] and "DuckDB" in lines[0], r.stderr
    assert MARK not in r.stderr + r.stdout


def test_a_fifo_as_the_store_file_does_not_hang(tmp_path):
    from solforge.store import Store
    from solforge.store.store import StoreError

    fifo = tmp_path / "fifo.duckdb"
    os.mkfifo(fifo)
    with pytest.raises(StoreError, match="not a regular file"):
        Store(fifo)
