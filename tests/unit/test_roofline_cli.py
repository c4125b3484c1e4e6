"""`solforge sol` end to end on a synthetic problem: counts, CSV, store rows, cache reuse."""

import csv
import json

import pytest

from solforge.cli import main


def test_sol_cli_csv_store_and_cache(tmp_path, monkeypatch):
    d = tmp_path / "probs" / "L1" / "001_scale"
    d.mkdir(parents=True)
    (d / "definition.json").write_text(json.dumps({
        "name": "001_scale", "axes": {"N": {"type": "var"}},
        "inputs": {"x": {"shape": ["N"], "dtype": "float32"}},
        "outputs": {"y": {"shape": ["N"], "dtype": "float32"}},
        "reference": "import torch\ndef run(x):\n    return torch.exp(x) * 2.0\n"}))
    (d / "workload.jsonl").write_text(
        json.dumps({"uuid": "a", "axes": {"N": 1 << 20}, "inputs": {"x": {"type": "random"}}}) + "\n")
    monkeypatch.setenv("SOLFORGE_CACHE_DIR", str(tmp_path / "cache"))
    out_csv, db = tmp_path / "r.csv", tmp_path / "s.duckdb"
    args = ["sol", "--gpu", "h100", "--root", str(tmp_path / "probs"), "--jobs", "1", "--csv", str(out_csv),
            "--db", str(db)]
    assert main(args) == 0
    (row,) = list(csv.DictReader(out_csv.open()))
    n = 1 << 20
    assert float(row["dram_bytes"]) == pytest.approx(8 * n)       # read x once, write y once
    assert float(row["total_flops"]) == pytest.approx(2 * n)      # exp + mul, one each per element
    assert row["limiter"] == "memory" and row["gpu"] == "h100"
    t = 0.4e-6 + 8 * n / 3.35e12
    assert float(row["t_sol_ms"]) == pytest.approx(t * 1e3)
    assert list((tmp_path / "cache" / "roofline").glob("*.json"))  # counts cached by content hash
    from solforge.store import Store

    rows = Store(db).query("SELECT problem, workload_uuid, gpu_profile, t_sol_ms, details FROM roofline")
    assert len(rows) == 1 and rows[0]["gpu_profile"] == "h100"
    assert rows[0]["details"]["flops_by_unit"] == {"fp32_simt": pytest.approx(2 * n)}
    # a second run is served from the cache and upserts (still one row)
    assert main(args) == 0
    assert Store(db).scalar("SELECT count(*) FROM roofline") == 1
