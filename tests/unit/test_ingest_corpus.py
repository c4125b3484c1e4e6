"""Every broken input in tests/corpus/broken gives ONE InputError naming the file, line and field that
its expect.json states; a folder mixing good and broken problems reports each broken one and still
returns every good one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from solforge.problem.sources import ingest_path

CORPUS = Path(__file__).resolve().parent.parent / "corpus" / "broken"
CASES = sorted(p for p in CORPUS.iterdir() if p.is_dir() and (p / "expect.json").is_file())


def _expect(case: Path) -> dict:
    return json.loads((case / "expect.json").read_text())


def test_corpus_is_large_enough():
    assert len(CASES) >= 30


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_broken_input_gives_one_clear_error(case: Path):
    ex = _expect(case)
    report = ingest_path(case / ex["input"])
    assert len(report.errors) == 1, [e.describe() for e in report.errors]
    err = report.errors[0]
    assert Path(err.file).resolve() == (case / ex["file"]).resolve()
    assert err.line == ex["line"]
    assert err.field == ex["field"]
    assert ex["message"] in err.message
    # the description a user sees carries all three
    assert ex["file"].split("/")[-1] in err.describe()
    if ex["line"] is not None:
        assert f":{ex['line']}" in err.describe()
    if ex["field"] is not None:
        assert f"[{ex['field']}]" in err.describe()
    assert len(report.problems) == ex["good_problems"]


def test_mixed_good_and_bad(tmp_path: Path, sol_execbench_dir: Path):
    mixed = tmp_path / "mixed"
    good = sorted((sol_execbench_dir / "L1").iterdir())[:3] + sorted((sol_execbench_dir / "L2").iterdir())[:2]
    for g in good:
        shutil.copytree(g, mixed / "good" / g.name)
    bad_cases = [c for c in CASES if _expect(c)["input"] == "."]
    for c in bad_cases:
        shutil.copytree(c, mixed / "broken" / c.name)
    report = ingest_path(mixed)
    # one error per broken case, each pointing inside its own case folder
    owners = sorted(Path(e.file).resolve().relative_to((mixed / "broken").resolve()).parts[0]
                    for e in report.errors)
    assert owners == sorted(c.name for c in bad_cases)
    expected_good = {json.loads((g / "definition.json").read_text())["name"] for g in good}
    expected_good |= {p.name for c in bad_cases for p in ingest_path(c).problems}
    assert {p.name for p in report.problems} == expected_good
    assert all(p.subset == "good" for p in report.problems if p.name in
               {json.loads((g / "definition.json").read_text())["name"] for g in good})
