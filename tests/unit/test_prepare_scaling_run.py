"""scripts/prepare_scaling_run.py leaves out workloads without an H200 T_b (014's 9fb16120: a
reference call of minutes; the run would otherwise time it itself, in the optimize process)."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
import prepare_scaling_run as psr  # noqa: E402


def test_drop_untimed_removes_only_workloads_without_t_b(tmp_path):
    d = tmp_path / "problems" / "FlashInfer-Bench" / "014_gqa_x"
    d.mkdir(parents=True)
    (d / "workload.jsonl").write_text("".join(json.dumps({"uuid": u, "axes": {}}) + "\n"
                                              for u in ("a", "b", "c")))
    other = tmp_path / "problems" / "L1" / "069_rms_norm"
    other.mkdir(parents=True)
    (other / "workload.jsonl").write_text(json.dumps({"uuid": "z"}) + "\n")
    with open(tmp_path / "b.csv", "w", newline="") as f:
        w = csv.DictWriter(f, ["problem", "workload_uuid", "T_b_ms"])
        w.writeheader()
        w.writerows([{"problem": "014_gqa_x", "workload_uuid": "a", "T_b_ms": "1.0"},
                     {"problem": "014_gqa_x", "workload_uuid": "b", "T_b_ms": ""},
                     {"problem": "069_rms_norm", "workload_uuid": "z", "T_b_ms": "0.1"}])
    out = psr.drop_untimed(tmp_path / "problems", tmp_path / "b.csv")
    assert out == {"014_gqa_x": ["b"]}
    assert [json.loads(ln)["uuid"] for ln in (d / "workload.jsonl").read_text().splitlines()] == ["a", "c"]
    # a T_b over the limit (a reference call the run would not make) is left out too
    out = psr.drop_untimed(tmp_path / "problems", tmp_path / "b.csv", max_tb_ms=0.5)
    assert out == {"014_gqa_x": ["a"]}
    assert [json.loads(ln)["uuid"] for ln in (d / "workload.jsonl").read_text().splitlines()] == ["c"]
    assert (other / "workload.jsonl").read_text().count("\n") == 1


def test_the_real_csv_leaves_out_only_014s_workload_whose_reference_runs_over_30_s(tmp_path):
    src = Path(__file__).resolve().parents[3] / "shared" / "sol_execbench" / "FlashInfer-Bench"
    names = ["014_gqa_paged_prefill_causal_h32_kv4_d128_ps1", "015_gqa_paged_prefill_causal_h32_kv8_d128_ps1"]
    if not all((src / n).is_dir() for n in names):
        pytest.skip("needs ../shared/sol_execbench")
    for n in names:
        dst = tmp_path / "FlashInfer-Bench" / n
        dst.mkdir(parents=True)
        (dst / "workload.jsonl").write_text((src / n / "workload.jsonl").read_text())
    # since session 6 every workload has a T_b; 9fb16120's is torch.compile's 76 s a call
    assert psr.drop_untimed(tmp_path, REPO / "data" / "results" / "baselines_h200.csv") == {}
    out = psr.drop_untimed(tmp_path, REPO / "data" / "results" / "baselines_h200.csv", max_tb_ms=30e3)
    assert out == {names[0]: ["9fb16120-0ab1-4769-95c9-1961e27b546a"]}
