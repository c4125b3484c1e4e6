"""Problem selection (solforge.problem.select) and problems read back from the store
(solforge.store.problems.load_problems; orchestrate.setup.select_problems puts the two together):
a problem written by ingest comes back with the same content hash, and a selector names problems by
name, SUBSET/name or glob."""

from __future__ import annotations

import json

import pytest

from solforge.problem.select import matches, select, unmatched

KNOWN = [("021_rmsnorm_h128", "FlashInfer-Bench"), ("069_rms_norm", "L1"), ("004_gemm_n128", "L1"),
         ("001_attention", "L2")]


def test_names_subset_names_and_globs():
    assert matches("069_rms_norm", "069_rms_norm", "L1")
    assert matches("L1/069_rms_norm", "069_rms_norm", "L1")
    assert not matches("L2/069_rms_norm", "069_rms_norm", "L1")
    assert not matches("069_rms", "069_rms_norm", "L1")  # a bare name is exact, not a prefix
    assert matches("*rms*", "021_rmsnorm_h128", "FlashInfer-Bench")
    assert matches("FlashInfer-Bench/*rmsnorm*", "021_rmsnorm_h128", "FlashInfer-Bench")
    assert [n for n, _ in select(KNOWN, "*rms*")] == ["021_rmsnorm_h128", "069_rms_norm"]
    assert [n for n, _ in select(KNOWN, "L1/*")] == ["004_gemm_n128", "069_rms_norm"]
    assert [n for n, _ in select(KNOWN, "001_attention,L1/004_gemm_n128")] == \
        ["004_gemm_n128", "001_attention"]  # sorted by (subset, name)
    assert [n for n, _ in select(KNOWN, None, subset="L1", limit=1)] == ["004_gemm_n128"]
    assert len(select(KNOWN, None)) == 4
    assert unmatched(KNOWN, "*rms*,nope,L3/*") == ["nope", "L3/*"]


def _write_problem(root, subset="S", name="p_scale"):
    d = root / subset / name
    d.mkdir(parents=True)
    (d / "definition.json").write_text(json.dumps({
        "name": name, "op_type": "scale", "axes": {"n": {"type": "var"}},
        "inputs": {"x": {"shape": ["n"], "dtype": "float32"}},
        "outputs": {"y": {"shape": ["n"], "dtype": "float32"}},
        "reference": "import torch\ndef run(x):\n    return x * 2\n"}))
    (d / "workload.jsonl").write_text("\n".join(json.dumps(
        {"uuid": f"w{n}", "axes": {"n": n}, "inputs": {"x": {"type": "random"}}}) for n in (16, 1024)))
    return d


def test_a_stored_problem_comes_back_the_same_and_selection_reads_the_store(tmp_path):
    from solforge.orchestrate.setup import select_problems
    from solforge.problem import load_problem_dir
    from solforge.store import Store
    from solforge.store.problems import load_problems, problem_index

    d = _write_problem(tmp_path / "tree")
    on_disk = load_problem_dir(d, subset="S")
    s = Store(tmp_path / "sel.duckdb")
    # a path is ingested into the store, then read back from it
    got = select_problems(s, str(tmp_path / "tree"))
    assert [p.name for p in got] == ["p_scale"] and problem_index(s) == [("p_scale", "S")]
    back = load_problems(s, ["p_scale", "not_there"])[0]
    assert back.content_hash == on_disk.content_hash
    assert [w.uuid for w in back.workloads] == ["w16", "w1024"]
    assert back.workloads[1].input_shapes == on_disk.workloads[1].input_shapes
    assert back.subset == "S" and back.source == on_disk.source
    # names, SUBSET/name and globs over the store; nothing matching is one clear error
    assert [p.name for p in select_problems(s, "S/p_*")] == ["p_scale"]
    assert select_problems(s, "p_scale")[0].content_hash == on_disk.content_hash
    from solforge.errors import InputError
    from solforge.store.problems import find_problem

    assert find_problem(s, "S/p_scale").content_hash == on_disk.content_hash  # `solforge evaluate S/p_scale`
    with pytest.raises(LookupError, match="not in the store"):
        find_problem(s, "p_other")
    with pytest.raises(InputError, match="no problem matches"):
        select_problems(s, "T/*", shared_dir=tmp_path / "no-shared-tree")


def test_a_problem_list_file_and_a_long_comma_list_select_from_the_store(tmp_path):
    from solforge.errors import InputError
    from solforge.orchestrate.setup import select_problems
    from solforge.store import Store

    _write_problem(tmp_path / "tree")
    s = Store(tmp_path / "sel.duckdb")
    select_problems(s, str(tmp_path / "tree"))
    # a list longer than a file name may be: a selector, never a path to look up
    long_list = ",".join(["S/p_scale"] + [f"S/not_{i:04d}_{'x' * 40}" for i in range(40)])
    assert [p.name for p in select_problems(s, long_list, shared_dir=tmp_path / "none")] == ["p_scale"]
    lst = tmp_path / "problems.txt"
    lst.write_text("# the one problem\nS/p_scale   # trailing comment\n\n")
    assert [p.name for p in select_problems(s, f"@{lst}")] == ["p_scale"]
    with pytest.raises(InputError, match="cannot read the problem list"):
        select_problems(s, f"@{tmp_path / 'missing.txt'}")
