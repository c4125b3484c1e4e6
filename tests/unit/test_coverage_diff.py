"""`solforge coverage-diff OLD NEW` on coverage rows written here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _row(name, compiler=True, variants=None, gemm_first=None, subset="L1"):
    r = {"problem": name, "subset": subset, "served": compiler, "compiler": compiler,
         "segments": ({"variants": variants} if variants else {"pointwise": 1})}
    if gemm_first:
        r["gemm_first"] = gemm_first
    return r


def _write(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "not json\n")
    return path


def test_served_variants_and_first_lowering_side_by_side(tmp_path):
    old = _write(tmp_path / "old.jsonl", [
        _row("a", variants=2, gemm_first="generic"), _row("b", variants=3), _row("c", variants=2),
        _row("d", compiler=False), _row("e"), _row("only_old")])
    new = _write(tmp_path / "new.jsonl", [
        _row("a", gemm_first="template"), _row("b", variants=2), _row("c", variants=2),
        _row("d", variants=2), _row("e", compiler=False), _row("only_new")])
    # a rerun appended to the run: its last row counts
    rerun = _write(tmp_path / "rerun.jsonl", [_row("c", variants=4)])
    r = subprocess.run([sys.executable, "-m", "solforge.cli", "coverage-diff", str(old), str(new),
                        str(rerun), "--json"], capture_output=True, text=True, timeout=120,
                       cwd=ROOT)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["problems"] == 5
    assert d["served"] == [4, 4] and d["gained"] == ["L1/d"] and d["lost"] == ["L1/e"]
    # old: a, b, c with variants; new: b, c, d
    assert d["with_variants"] == [3, 3]
    assert d["fewer_variants"] == 2 and d["no_variant_left"] == 1
    assert d["more_variants"] == ["L1/c"]
    assert d["gemm_template_first"] == [0, 1, 1]
