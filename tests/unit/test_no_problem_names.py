"""No kernel family knows a problem by its name: matching and gating follow the traced structure.

The family code (solforge/kernels/**) and the family gates (kernels_cuda/*/family.json) may not
hold a problem's directory name (any under data/problems or the shared SOL-ExecBench set) nor a
problem number such as `059_`: a family that recognises "its" problems by name serves nothing a
user ingests, and the same problem renamed would lose its kernel.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
KERNELS = REPO / "solforge" / "kernels"
# a SOL-ExecBench problem number: three digits then "_" and a word ("059_moe...", "032_nvfp4")
_NUMBER = re.compile(r"(?<![\w.])\d{3}_[A-Za-z]")
# a problem cited by subset and number ("Quant/032", "L1/059")
_CITED = re.compile(r"\b(?:L1|L2|Quant|FlashInfer-Bench)/\d{3}\b")
# in a family.json every zero-led three-digit number ("014 and 015") is a problem number
_BARE = re.compile(r"(?<![\w.])0\d\d(?![\w.])")


def _scanned() -> dict[Path, str]:
    files = sorted(KERNELS.rglob("*.py")) + sorted((REPO / "kernels_cuda").glob("*/family.json"))
    assert len(files) > 10, "the kernel families moved: update this test"
    return {f: f.read_text() for f in files}


def _hits(names: set[str]) -> list[str]:
    found = []
    for f, text in _scanned().items():
        low = text.lower()
        found += [f"{f.relative_to(REPO)}: {n}" for n in sorted(names) if n.lower() in low]
    return found


def test_no_problem_number_in_family_code_or_gates():
    found = [f"{f.relative_to(REPO)}:{text[:m.start()].count(chr(10)) + 1}: {m.group(0)}"
             for f, text in _scanned().items()
             for pat in ((_NUMBER, _CITED, _BARE) if f.suffix == ".json" else (_NUMBER, _CITED))
             for m in pat.finditer(text)]
    assert not found, "problem numbers in family code or gates:\n" + "\n".join(found)


def test_no_repository_problem_name_in_family_code_or_gates():
    names = {d.name for d in (REPO / "data" / "problems").glob("*/*") if d.is_dir()}
    assert names, "data/problems has no problems: update this test"
    found = _hits(names)
    assert not found, "problem names in family code or gates:\n" + "\n".join(found)


def test_no_shared_problem_name_in_family_code_or_gates(sol_execbench_dir):
    names = {d.name for d in sol_execbench_dir.glob("*/*") if d.is_dir()}
    if not names:
        pytest.skip("no shared problems")
    # the name without its number too ("rms_norm" of 069_rms_norm), where it is specific enough
    # (two words at least) not to be an ordinary word of kernel code
    bare = {n.split("_", 1)[1] for n in names if re.match(r"\d{3}_", n)}
    found = _hits(names | {b for b in bare if b.count("_") >= 2})
    assert not found, "shared problem names in family code or gates:\n" + "\n".join(found)


def test_the_number_pattern_catches_a_name():
    # the scan above must be able to fail: a problem number in a docstring is caught
    assert _NUMBER.search('"""Serves 059_moe_group_score_aggregation."""')
    assert not _NUMBER.search("x = 1e-12 + 0.5; BLOCK_128_K = 4; ws_128_x")
    assert _CITED.search("(Quant/032)") and _BARE.search("workloads of 014 and 015")
    assert not _BARE.search("driver 580.159.04, commit 0aca595882e4, 0.996, L1/L2 cache")
