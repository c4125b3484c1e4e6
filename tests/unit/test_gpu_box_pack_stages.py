"""scripts/gpu_box.sh pack-stages: a verdict sweep's stages for a device call, packed from the
staged.json as read once (a prepare still running may have begun a stage it has not listed yet)."""

from __future__ import annotations

import json
import subprocess
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_packs_the_listed_stages_and_the_list(tmp_path):
    sweep = tmp_path / "sweep"
    (sweep / "L9__x__compiler").mkdir(parents=True)
    (sweep / "L9__x__compiler" / "job.json").write_text("{}")
    (sweep / "L9__z__compiler").mkdir()          # begun, not listed yet: left out
    (sweep / "L9__z__compiler" / "job.json").write_text("{}")
    rows = [{"problem": "L9/x", "worker": "compiler", "staged": True, "stage": "L9__x__compiler"},
            {"problem": "L9/y", "worker": None, "staged": False, "reason": "compiler: stopped"}]
    (sweep / "staged.json").write_text(json.dumps(rows))
    out = tmp_path / "carry" / "sweep.txz"
    r = subprocess.run(["bash", str(REPO / "scripts" / "gpu_box.sh"), "pack-stages", str(sweep), str(out)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "1 stages of 2 problems" in r.stdout
    with tarfile.open(out) as tar:
        names = set(tar.getnames())
        listed = json.loads(tar.extractfile("sweep/staged.json").read())
    assert "sweep/L9__x__compiler/job.json" in names
    assert not any("L9__z" in n for n in names)
    assert listed == rows


def test_bundle_puts_the_files_of_subfolders_into_one(tmp_path):
    """A device call brings back at most 8 files of $OUT: `bundle` leaves the top-level files and
    puts those of subfolders (a run's JSON and md, a baseline's rows) into bundle.tgz."""
    (tmp_path / "tp").mkdir()
    (tmp_path / "bl" / "w").mkdir(parents=True)
    (tmp_path / "call.log").write_text("log")
    (tmp_path / "tp" / "eval_throughput.json").write_text("{}")
    (tmp_path / "bl" / "w" / "rows.jsonl").write_text("{}\n")
    r = subprocess.run(["bash", str(REPO / "scripts" / "gpu_box.sh"), "bundle", str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle.tgz", "call.log"]
    with tarfile.open(tmp_path / "bundle.tgz") as tar:
        assert sorted(tar.getnames()) == ["./bl/w/rows.jsonl", "./tp/eval_throughput.json"]


def test_compare_without_cases_says_so_in_one_line(tmp_path):
    """`compare` runs on a box from carried cases: without CASES it stops before installing or
    starting anything, naming what is missing."""
    import os

    env = {**os.environ, "OUT": str(tmp_path / "out")}
    env.pop("CASES", None)
    r = subprocess.run(["bash", str(REPO / "scripts" / "gpu_box.sh"), "compare"], capture_output=True,
                       text=True, timeout=60, env=env)
    assert r.returncode != 0
    assert "CASES" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
