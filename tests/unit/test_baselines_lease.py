"""The baselines scheduler's GPU lease (solforge.baselines): a task that ran out of memory (earlier, or in this run: its
".oom" retry) or whose memory estimate is too big runs with no other task on its GPU, while the
others share it; the plan marks and orders those tasks and prints what a re-run has left, and why."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from pathlib import Path

from tests.unit.adv_problem import write_problem

REPO = Path(__file__).resolve().parents[2]
from solforge.baselines import plan as bp  # noqa: E402
from solforge.baselines import scheduler as rb  # noqa: E402


def _problem(root: Path, name: str, reference: str, sizes=(4096, 8192, 16384)) -> Path:
    return write_problem(root, "S", name, reference, [(f"{name}-{n}", n) for n in sizes])


def _overlap(a, b) -> bool:
    return a[0] < b[1] and b[0] < a[1]


HOLD = """
import sys, time
sys.path.insert(0, sys.argv[1])
from solforge.baselines.plan import gpu_lease
time.sleep(float(sys.argv[4]))
t0 = time.time()
with gpu_lease(sys.argv[2], sys.argv[3] == "alone"):
    t1 = time.time()
    time.sleep(float(sys.argv[5]))
    t2 = time.time()
print(t0, t1, t2)
"""


def test_an_alone_lease_waits_for_the_shared_holders_and_new_ones_wait_for_it(tmp_path):
    lease = str(tmp_path / "gpu0.lease")
    # (mode, start after s, hold s): two shared from the start, an alone one asking while they run,
    # a shared one asking while the alone one waits: it must not slip in ahead (no starvation)
    spec = {"s1": ("shared", 0.0, 2.0), "s2": ("shared", 0.0, 2.0), "x": ("alone", 0.6, 1.0),
            "late": ("shared", 1.2, 0.5)}
    procs = {k: subprocess.Popen([sys.executable, "-c", HOLD, str(REPO), lease, m,
                                  str(d), str(h)], stdout=subprocess.PIPE, text=True)
             for k, (m, d, h) in spec.items()}
    got = {}
    for k, p in procs.items():
        out, _ = p.communicate(timeout=60)
        asked, start, end = map(float, out.split())
        got[k] = (asked, start, end)
    held = {k: (v[1], v[2]) for k, v in got.items()}
    assert _overlap(held["s1"], held["s2"])  # shared holders share
    assert held["x"][0] >= max(held["s1"][1], held["s2"][1]) - 0.01  # the alone one waited for both
    assert not any(_overlap(held["x"], held[k]) for k in ("s1", "s2", "late"))
    assert got["late"][0] < held["x"][0]  # "late" asked before "x" got the lease ...
    assert held["late"][0] >= held["x"][1] - 0.01  # ... and still came after it


def test_plan_marks_oom_and_big_tasks_alone_puts_them_first_and_prints_why(tmp_path):
    ref = "import torch\n\n\ndef run(x, y):\n    return torch.sin(x) + y\n"
    _problem(tmp_path, "a_small", ref, sizes=(1024, 2048))
    _problem(tmp_path, "b_big", ref, sizes=(1024, 1 << 22))
    _problem(tmp_path, "c_oom", ref, sizes=(1024, 2048))
    _problem(tmp_path, "d_err", ref, sizes=(1024, 2048))
    probs = rb.discover(tmp_path)
    big = next(p for p in probs if p["name"] == "b_big")
    assert big["mem"][1] == (2 * 2 + 1) * 4 * (1 << 22)  # two sets of x and y (fp32), one output
    existing = {("c_oom", "c_oom-1024"): {"compile_status": "oom", "compile_message": "CUDA out of "
                                          "memory"},
                ("c_oom", "c_oom-2048"): {"compile_ms": "0.1", "compile_status": "passed"},
                ("d_err", "d_err-1024"): {"compile_status": "runtime_error",
                                          "compile_message": "InductorError: x"}}
    tasks = rb.plan(probs, existing, ["compile"], chunk=4, alone_bytes=1e6,
                    skip_reasons=("runtime_error:",))["compile"]
    assert [(t["problem"], t["alone"]) for t in tasks][:2] == [("b_big", True), ("c_oom", True)]
    assert {t["problem"]: t["alone"] for t in tasks}["a_small"] is False
    assert next(t for t in tasks if t["problem"] == "c_oom")["uuids"] == ["c_oom-1024"]
    assert next(t for t in tasks if t["problem"] == "d_err")["uuids"] == ["d_err-2048"]  # skipped 1024
    default = rb.plan(probs, existing, ["compile"], 4)["compile"]  # no size limit: the OOM one only
    assert [t["problem"] for t in default if t["alone"]] == ["c_oom"] and default[0]["problem"] == "c_oom"
    lines = bp.plan_lines(probs, existing, {"compile": tasks})
    oom = next(x for x in lines if "c_oom" in x)
    assert "compile 1/1 (oom x1) [alone: ran out of memory before]" in oom
    assert "compile 1/2 (runtime_error x1, absent x1)" in next(x for x in lines if "d_err" in x)
    assert "plan: compile: 6 workloads queued (3 alone on a GPU) of 7 missing" in lines


def test_compile_rate_from_an_earlier_log(tmp_path):
    log = tmp_path / "log.txt"
    log.write_text("[   20 s] eager 10, compile 5, neither 0 of 10\n"
                   "[  100 s] GPU 0: eager done, compile starts\n"
                   "[  100 s] eager 10, compile 5, neither 0 of 10\n"
                   "[  300 s] eager 10, compile 105, neither 0 of 10\n")
    assert bp.compile_rate(log) == 0.5
    assert bp.compile_rate(tmp_path / "none.txt") is None


def test_oom_tasks_run_with_no_other_task_on_their_gpu(tmp_path):
    """A dry run on the CPU: three compile workers on one GPU. "big" ran out of memory before (the
    earlier CSV says so), "flaky" runs out of memory on its first call in this run: its retry
    (".oom") and "big" must each have the GPU to themselves; the slow ones share it."""
    data = tmp_path / "data"
    slow = "import time\nimport torch\n\n\ndef run(x, y):\n    time.sleep(0.08)\n    return torch.sin(x) + y\n"
    for i in range(4):
        _problem(data, f"slow{i}", slow + "#" * (i + 1))
    _problem(data, "big", slow)
    mark = tmp_path / "flaky_failed_once"
    _problem(data, "flaky", "import os\nimport torch\n\n\ndef run(x, y):\n"
                            f"    if not os.path.exists({str(mark)!r}):\n"
                            f"        open({str(mark)!r}, 'w').close()\n"
                            "        raise RuntimeError('CUDA out of memory. Tried to allocate 8 GiB')\n"
                            "    return torch.sin(x) + y\n", sizes=(4096, 8192))
    old = tmp_path / "old.csv"
    with open(old, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["problem", "workload_uuid", "eager_ms", "compile_ms",
                                          "compile_status", "compile_message"])
        w.writeheader()
        for n in (4096, 8192, 16384):
            w.writerow({"problem": "big", "workload_uuid": f"big-{n}", "eager_ms": "1.0",
                        "compile_status": "oom", "compile_message": "CUDA out of memory"})
    out = tmp_path / "out"
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "solforge.baselines.scheduler", "--dataset", str(data),
                        "--out", str(out), "--existing", str(old), "--device", "cpu", "--gpus", "1",
                        "--variants", "compile", "--compile-workers", "3", "--compile-backend", "eager",
                        "--deadline-s", "90", "--reps", "2", "--min-reps", "1",
                        "--workload-budget-s", "0.1", "--explain", "", "--rate-log", ""],
                       capture_output=True, text=True, timeout=150)
    assert r.returncode == 0, r.stderr[-2000:]
    assert time.monotonic() - t0 < 100
    assert "big: compile 3/3 (oom x3) [alone: ran out of memory before]" in r.stdout
    rows = [json.loads(x) for x in (out / "baselines_rows.jsonl").read_text().splitlines()]
    spans: dict = {}
    for x in rows:
        s = spans.setdefault(x["task"], [x["task_start"], x["row_end"], x["alone"]])
        s[1] = max(s[1], x["row_end"])
    assert spans["compile-big-0"][2] and spans["compile-flaky-0.oom"][2]
    assert not spans["compile-flaky-0"][2] and not spans["compile-slow0-0"][2]
    for task in ("compile-big-0", "compile-flaky-0.oom"):
        others = [k for k in spans if k != task]
        assert not [k for k in others if _overlap(spans[task][:2], spans[k][:2])], (task, spans)
    # the others did share the GPU (so the check above could fail)
    shared = [k for k in spans if not spans[k][2]]
    assert any(_overlap(spans[a][:2], spans[b][:2]) for a in shared for b in shared if a < b), spans
    flaky = {(x["task"], x["workload_uuid"]): x["status"] for x in rows if x["problem"] == "flaky"}
    assert flaky[("compile-flaky-0", "flaky-4096")] == "oom"
    assert flaky[("compile-flaky-0.oom", "flaky-4096")] == "passed"
    table = {(x["problem"], x["workload_uuid"]): x for x in csv.DictReader(open(out / "baselines_h200.csv"))}
    assert all(table[(p, u)]["compile_ms"] for p, u in table if p in ("big", "flaky"))
