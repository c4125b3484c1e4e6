"""scripts/k8_report.py (the k8 GPU check's table) on a synthetic run: % of copy bandwidth per large
workload, the target verdict, persistent/classic labels, and the probe's same-size copy ratio."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))


def _fake_run(tmp: Path, sol_execbench_dir: Path) -> tuple[Path, Path]:
    from k6_compare import workload_bytes
    from solforge.problem.loader import load_problem_dir

    plan_dir, run = tmp / "plan", tmp / "run"
    key = "FlashInfer-Bench__022_rmsnorm_h512__rmsnorm"
    pd = plan_dir / key / "problem"
    pd.mkdir(parents=True)
    for f in ("definition.json", "workload.jsonl", "reference.py"):
        shutil.copy(sol_execbench_dir / "FlashInfer-Bench/022_rmsnorm_h512" / f, pd / f)
    variants = [{"id": "rmsnorm:v0", "params": {"VEC": 8, "TPR": 32, "ROWS": 8, "WPRE": 1}},
                {"id": "rmsnorm:v1", "params": {"VEC": 8, "TPR": 64, "ROWS": 4, "PERSIST": 1, "PF": 4, "BPS": 4}}]
    (plan_dir / "plan.json").write_text(json.dumps({"commit": "abc", "problems": [
        {"key": key, "problem": "022_rmsnorm_h512", "subset": "FlashInfer-Bench", "family": "rmsnorm",
         "variants": variants}]}))
    nb = workload_bytes(pd)
    run.mkdir()
    rows = []
    for i, w in enumerate(load_problem_dir(pd).workloads):
        for v, frac in zip(variants, (0.72, 0.90)):   # v1: 90% of copy on every workload
            rows.append({"problem": "022_rmsnorm_h512", "variant": v["id"], "params": v["params"],
                         "workload": i, "uuid": w.uuid, "t_eager_ms": 0.15, "t_compile_ms": None, "ok": True,
                         "t_kernel_ms": nb[w.uuid] / (frac * 4.0e12) * 1e3})
    (run / "rows.jsonl").write_text("\n".join(map(json.dumps, rows)) + "\n")
    (run / "env.json").write_text(json.dumps({"gpu": "test", "copy_tb_s": 4.0, "commit": "abc"}))
    big = max(nb.values())
    (run / "probe.json").write_text(json.dumps({"copy_tb_s": 4.0, "sizes": [
        {"bytes": int(big), "copy_ms": big / (0.75 * 4.0e12) * 1e3, "read_ms": 1, "write_ms": 1}]}))
    return plan_dir, run


def test_k8_report_verdict_and_cells(tmp_path, sol_execbench_dir):
    plan_dir, run = _fake_run(tmp_path, sol_execbench_dir)
    out = subprocess.run([sys.executable, str(REPO / "scripts/k8_report.py"), str(run), "--plan-dir", str(plan_dir),
                          "--baselines", str(tmp_path / "none.csv")], capture_output=True, text=True, check=True).stdout
    assert "large: wl6:24.5MB wl5:29.7MB" in out
    v0 = next(l for l in out.splitlines() if l.startswith("v0 "))
    v1 = next(l for l in out.splitlines() if l.startswith("v1 "))
    assert "c V8,T32,R8,W1" in v0 and "72.0" in v0
    assert "p V8,T64,R4,PF4,B4" in v1 and "90.0" in v1
    assert v1.rstrip().endswith("1.20")   # T_copy / T_k: a copy of the same bytes at 75% of copy bandwidth
    assert "022 MET    best min-large 90.0% by rmsnorm:v1" in out
    assert "# 1/1 problems meet the target" in out
    full = (run / "report.txt").read_text()
    assert "wl5=90%" in full and "wl1=72%" in full
