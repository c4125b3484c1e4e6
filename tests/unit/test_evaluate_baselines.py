"""The baselines scheduler (solforge baseline): the plan (skip measured rows, eager chunks, order), the merge into the
CSV, and one real dry run on the CPU (--device cpu): two workers sharing tasks through claim files, an
earlier CSV kept, a hung reference stopped by the hard deadline with every output still written."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from pathlib import Path

from tests.unit.adv_problem import write_problem

REPO = Path(__file__).resolve().parents[2]
from solforge.baselines import scheduler as rb  # noqa: E402


def _problem(root: Path, subset: str, name: str, reference: str | None = None,
             workloads: list | None = None) -> Path:
    return write_problem(root, subset, name,
                         reference or "import torch\n\n\ndef run(x, y):\n    return torch.sin(x) + y\n",
                         [(w["uuid"], w["n"]) for w in workloads or [{"uuid": "w4k", "n": 4096},
                                                                     {"uuid": "w64k", "n": 65536}]])


def test_plan_skips_measured_rows_chunks_eager_and_orders_compile(tmp_path):
    _problem(tmp_path, "A", "p_small")
    _problem(tmp_path, "A", "p_big", workloads=[{"uuid": f"u{i}", "n": 1024} for i in range(5)])
    _problem(tmp_path, "B", "p_loop", reference="def run(x, y):\n    for i in range(int(x[0].item())):"
                                                "\n        pass\n    return x + y\n")
    probs = rb.discover(tmp_path)
    assert [p["name"] for p in probs] == ["p_big", "p_small", "p_loop"]
    assert [p["loops"] for p in probs] == [False, False, True]
    existing = {("p_small", "w4k"): {"eager_ms": "0.5", "compile_ms": ""},
                ("p_loop", "w4k"): {"eager_ms": "", "compile_ms": "0.7"}}
    tasks = rb.plan(probs, existing, ["eager", "compile"], chunk=2)
    eager = {t["id"]: t["uuids"] for t in tasks["eager"]}
    assert eager["eager-p_small-0"] == ["w64k"]  # w4k was measured before
    assert [eager[f"eager-p_big-{k}"] for k in range(3)] == [["u0", "u1"], ["u2", "u3"], ["u4"]]
    costs = [t["cost"] for t in tasks["eager"]]
    assert costs == sorted(costs)  # cheapest first: coverage under a deadline
    comp = tasks["compile"]
    assert [t["problem"] for t in comp][-1] == "p_loop"  # loops over .item() compile last
    assert next(t for t in comp if t["problem"] == "p_loop")["uuids"] == ["w64k"]
    assert len([t for t in comp if t["problem"] == "p_big"]) == 1  # one compile task per problem


def test_dry_run_shares_tasks_keeps_existing_and_stops_at_the_deadline(tmp_path):
    data = tmp_path / "data"
    _problem(data, "S1", "fast_a")
    _problem(data, "S1", "fast_b")
    _problem(data, "S2", "hung", reference="import time\n\ndef run(x, y):\n    time.sleep(600)\n"
                                           "    return x + y\n", workloads=[{"uuid": "h1", "n": 8}])
    old = tmp_path / "old.csv"
    with open(old, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["problem", "workload_uuid", "eager_ms", "compile_ms",
                                          "eager_status"])
        w.writeheader()
        w.writerow({"problem": "fast_a", "workload_uuid": "w4k", "eager_ms": "1.234000",
                    "eager_status": "passed"})
        w.writerow({"problem": "gone", "workload_uuid": "x", "eager_ms": "9.000000"})
    out = tmp_path / "out"
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "solforge.baselines.scheduler", "--dataset", str(data),
                        "--out", str(out), "--existing", str(old), "--device", "cpu", "--gpus", "2",
                        "--deadline-s", "45", "--eager-share", "0.3", "--task-timeout-s", "600", "--compile-workers", "1",
                        "--compile-backend", "eager", "--chunk", "1", "--reps", "3"],
                       capture_output=True, text=True, timeout=120)
    wall = time.monotonic() - t0
    assert r.returncode == 0, r.stderr[-2000:]
    assert wall < 60  # the deadline holds although one reference never returns
    rows = [json.loads(x) for x in (out / "baselines_rows.jsonl").read_text().splitlines()]
    eager = sorted((x["problem"], x["workload_uuid"]) for x in rows if x["variant"] == "eager")
    assert eager == [("fast_a", "w64k"), ("fast_b", "w4k"), ("fast_b", "w64k")]  # each once, none re-run
    # torch.compile (backend "eager" here) after the eager pass, on the GPU that finished eager work
    comp = sorted((x["problem"], x["workload_uuid"]) for x in rows if x["variant"] == "compile")
    assert ("fast_a", "w4k") in comp or ("fast_b", "w4k") in comp, r.stdout
    assert all(x["status"] == "passed" and x["median_ms"] > 0 and x["n_reps"] >= 1 for x in rows)
    table = {(x["problem"], x["workload_uuid"]): x for x in csv.DictReader(open(out / "baselines_h200.csv"))}
    assert table[("fast_a", "w4k")]["eager_ms"] == "1.234000"  # kept from --existing
    a = table[("fast_a", "w4k")]
    assert a["T_b_ms"] == min((a["eager_ms"], a["compile_ms"]) if a["compile_ms"] else (a["eager_ms"],),
                              key=float)
    assert table[("gone", "x")]["eager_ms"] == "9.000000"  # rows of other problems are kept too
    assert table[("fast_b", "w64k")]["T_b_variant"] in ("eager", "compile")
    e = table[("fast_b", "w64k")]
    assert float(e["T_b_ms"]) == min(float(e[k]) for k in ("eager_ms", "compile_ms") if e[k])
    assert table[("fast_b", "w64k")]["subset"] == "S1"
    # every workload of the dataset has a row: the hung one with no time and the reason per variant
    h = table[("hung", "h1")]
    assert h["eager_ms"] == "" and h["T_b_ms"] == "" and h["subset"] == "S2"
    assert h["eager_status"] == "not_measured" and "stopped at the deadline" in h["eager_message"]
    assert h["compile_status"] == "not_measured" and h["compile_message"]
    # only the four results in --out; the scratch's many small files are cleaned up
    assert sorted(f.name for f in out.iterdir() if f.name != "work") == [
        "baselines_failures.md", "baselines_h200.csv", "baselines_rows.jsonl", "baselines_summary.md"]
    summary = (out / "baselines_summary.md").read_text()
    assert "| S2 | hung | 1 | 0 | 0 | 0 |" in summary and "stopped at the deadline" in summary
    assert not (out / "work/stage").exists() and not (out / "work/claims").exists()
    fails = (out / "baselines_failures.md").read_text()
    assert "hung [eager, task eager-hung-0]: 1 workload(s) unmeasured: stopped at the deadline" in fails
    assert "| S1 | 4 | 4 | " in fails and "| S2 | 1 | 0 | 0 | 0 | 0 | 1 |" in fails
    assert "| S2 | 1 | 0 | 0 | 0 | 0 | 1 |" in r.stdout  # the summary is printed at the end

    # the OUT folder lost (e.g. not brought back from the GPU box): the workers' own row files rebuild it
    again = tmp_path / "again"
    r2 = subprocess.run([sys.executable, "-m", "solforge.baselines.scheduler", "--dataset", str(data),
                         "--existing", str(old), "--out", str(again), "--merge-rows",
                         *map(str, sorted((out / "work/workers").glob("*.jsonl")))],
                        capture_output=True, text=True, timeout=120)
    assert r2.returncode == 0, r2.stderr[-2000:]
    rebuilt = {(x["problem"], x["workload_uuid"]): x
               for x in csv.DictReader(open(again / "baselines_h200.csv"))}
    assert {k: (v["eager_ms"], v["compile_ms"]) for k, v in rebuilt.items()} == \
        {k: (v["eager_ms"], v["compile_ms"]) for k, v in table.items()}
    # the OUT folder's own rows file (plain rows, no worker events) rebuilds the same table, its
    # hardware read from the table beside it
    r3 = subprocess.run([sys.executable, "-m", "solforge.baselines.scheduler", "--dataset", str(data),
                         "--existing", str(old), "--out", str(tmp_path / "from_out"), "--merge-rows",
                         str(out / "baselines_rows.jsonl")], capture_output=True, text=True, timeout=120)
    assert r3.returncode == 0, r3.stderr[-2000:]
    from_out = {(x["problem"], x["workload_uuid"]): x
                for x in csv.DictReader(open(tmp_path / "from_out" / "baselines_h200.csv"))}
    assert {k: (v["eager_ms"], v["compile_ms"], v["gpu"], v["driver"]) for k, v in from_out.items()} == \
        {k: (v["eager_ms"], v["compile_ms"], v["gpu"], v["driver"]) for k, v in table.items()}

def test_a_killed_task_requeues_the_workloads_after_the_one_in_flight(tmp_path):
    import argparse

    run = rb.Run(argparse.Namespace(out=tmp_path / "o", work=None, deadline_s=60.0, eager_share=0.6))
    t = {"id": "eager-p-0", "problem": "p", "uuids": ["a", "b", "c", "d"], "dir": "x"}
    run.tasks = {"eager": [t]}
    run.task_by_id = {t["id"]: t}
    run.task_file = {"eager": run.work / "tasks_eager.json"}
    (run.claims / "eager-p-0").touch()
    assert not run.has_unclaimed("eager")
    run.fail("eager-p-0", "eager", "no workload done in 60 s (killed)", {"a"}, requeue=True)
    # "b" was in flight when the worker was killed; "c" and "d" go to a new task for the restart
    assert run.failures[-1]["unmeasured"] == 1
    on_disk = json.loads(run.task_file["eager"].read_text())
    assert on_disk[-1]["id"] == "eager-p-0.r" and on_disk[-1]["uuids"] == ["c", "d"]
    assert run.has_unclaimed("eager")
    run.fail("eager-p-0.r", "eager", "stopped at the deadline", {"c"})  # no requeue at the deadline
    assert run.failures[-1]["unmeasured"] == 1 and len(run.tasks["eager"]) == 2


def test_an_earlier_failure_that_was_not_retried_keeps_its_status_and_message():
    import threading
    from types import SimpleNamespace

    from solforge.baselines.outputs import fill_reasons

    table = {("p", "u"): {"problem": "p", "workload_uuid": "u", "eager_ms": "1.0",
                          "compile_status": "runtime_error", "compile_message": "InductorError: x"}}
    run = SimpleNamespace(rows=[], failures=[], lock=threading.Lock(), args=None)
    fill_reasons(table, [{"name": "p", "subset": "S", "uuids": ["u", "v"]}], run, final=True)
    assert table[("p", "u")]["compile_status"] == "runtime_error"
    assert table[("p", "u")]["compile_message"] == "InductorError: x"
    assert table[("p", "v")]["compile_status"] == "not_measured"  # never tried: the run's end says why


def test_a_task_stopped_at_the_deadline_says_what_it_had_done_and_at_what_cost():
    from solforge.baselines.outputs import deadline_reason

    rows = [{"task": "compile-p-0", "variant": "compile", "seconds": 360.0, "median_ms": 4.8},
            {"task": "compile-p-0.r", "variant": "compile", "seconds": 150.0, "median_ms": 6.1},
            {"task": "compile-q-0", "variant": "compile", "seconds": 1.0, "median_ms": 0.1},
            {"task": "compile-p-0", "variant": "eager", "seconds": 2.0, "median_ms": 0.2}]
    why = deadline_reason(rows, "compile-p-0.r", "compile")
    assert why.startswith("stopped at the deadline: 2 workload(s)") and "255 s each" in why
    assert "first 360 s" in why and "6.1 ms" in why
    assert deadline_reason(rows, "compile-z-0", "compile") == \
        "stopped at the deadline before its first workload finished"


def test_compile_marks_the_dims_that_vary_between_workloads_so_one_compile_serves_all(tmp_path):
    import torch._dynamo as dynamo
    from torch._dynamo.utils import counters

    from solforge.evaluate.baseline import time_problem, varying_dims
    from solforge.problem import load_problem_dir

    d = _problem(tmp_path, "A", "p", workloads=[{"uuid": "a", "n": 4096}, {"uuid": "b", "n": 65536},
                                                {"uuid": "c", "n": 1000}])
    p = load_problem_dir(d)
    assert varying_dims(p.workloads) == {"x": (0,), "y": (0,)}
    graphs = {}
    for dyn in (False, True):
        dynamo.reset()
        counters.clear()
        rows = list(time_problem(p, "compile", tmp_path / f"st{dyn}", reps=2, device="cpu",
                                 timer=rb.WallTimer(), compile_backend="eager", dynamic_dims=dyn))
        assert [r.status for r in rows] == ["passed"] * 3
        graphs[dyn] = counters["stats"]["unique_graphs"]
    # automatic dynamic shapes: a static graph, then a dynamic recompile; marked: one graph
    assert graphs == {False: 2, True: 1}


def test_compile_order_puts_references_with_graph_breaks_last_and_notes_why(tmp_path):
    _problem(tmp_path, "A", "p_break")
    _problem(tmp_path, "A", "p_clean")
    explain = {"p_break": {"problem": "p_break", "graph_count": 3, "graph_break_count": 2,
                           "breaks_listed": 2, "break_reasons": ["Tensor.item()"]},
               "p_clean": {"problem": "p_clean", "graph_count": 1, "graph_break_count": 0,
                           "breaks_listed": 0, "break_reasons": []}}
    _problem(tmp_path, "A", "p_nograph")
    explain["p_nograph"] = {"problem": "p_nograph", "graph_count": 0, "graph_break_count": -1,
                            "breaks_listed": 0, "break_reasons": []}
    probs = rb.discover(tmp_path, explain=explain)
    tasks = rb.plan(probs, {}, ["eager", "compile"], chunk=2)
    # no graph captured: torch.compile would run it as eager; no compile task, eager as usual
    assert [t["problem"] for t in tasks["compile"]] == ["p_clean", "p_break"]
    assert "p_nograph" in {t["problem"] for t in tasks["eager"]}
    assert "p_nograph" in {t["problem"] for t in rb.plan(probs, {}, ["compile"], 2, True)["compile"]}
    note = next(p for p in probs if p["name"] == "p_break")["explain"]
    assert "3 graph(s), 2 graph break(s)" in note and "Tensor.item()" in note
    # every workload gets a row and a reason: the skipped compile and the ones not reached
    import threading
    from types import SimpleNamespace

    from solforge.baselines import outputs as bo

    run = SimpleNamespace(rows=[], failures=[], lock=threading.Lock(), clocks={}, hardware={},
                          args=SimpleNamespace(compile_no_graph=False))
    table = bo.merge(run, {})
    bo.fill_reasons(table, probs, run, final=True)
    assert len(table) == 6
    ng = table[("p_nograph", "w4k")]
    assert ng["compile_status"] == "skipped" and ng["compile_message"] == bo.NO_GRAPH
    assert ng["eager_status"] == "not_measured" and "deadline" in ng["eager_message"]
    assert "2 graph break(s)" in table[("p_break", "w4k")]["compile_message"]


def test_a_compile_that_overruns_is_killed_and_its_workloads_not_queued_again(tmp_path):
    import argparse
    import subprocess as sp

    args = argparse.Namespace(out=tmp_path / "o", work=None, deadline_s=60.0, eager_share=0.6,
                              task_timeout_s=60.0, compile_timeout_s=5.0)
    run = rb.Run(args)
    t = {"id": "compile-p-0", "problem": "p", "uuids": ["a", "b", "c"], "dir": "x"}
    run.tasks = {"compile": [t]}
    run.task_by_id = {t["id"]: t}
    run.task_file = {"compile": run.work / "tasks_compile.json"}
    (run.claims / t["id"]).touch()
    p = rb.Proc("compile_gpu0_0", "compile", "0", run)
    p.proc = sp.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    p.current, p.since = t["id"], time.monotonic() - 6.0  # compiling its first workload for 6 s
    p.poll()
    assert p.proc is None or p.proc.poll() is not None or p.finished
    f = run.failures[-1]
    assert "torch.compile of the first workload took over 5 s" in f["reason"]
    assert f["uuids"] == ["a", "b", "c"] and len(run.tasks["compile"]) == 1  # nothing queued again
    p.kill()


def test_explain_counts_graph_breaks_of_a_reference_on_the_cpu(tmp_path):
    from solforge.baselines import explain as ex

    clean = _problem(tmp_path, "A", "clean")
    # a graph break inside a Python loop: dynamo skips the whole frame, torch.compile runs eager
    loop = _problem(tmp_path, "A", "loop", reference="import torch\n\n\ndef run(x, y):\n"
                    "    out = y.clone()\n    for i in range(2):\n"
                    "        k = int((x[i] > 0).item())\n        out = out + k\n    return out\n")
    # a break outside any loop: two graphs
    brk = _problem(tmp_path, "A", "brk", reference="import torch\n\n\ndef run(x, y):\n"
                   "    a = torch.sin(x)\n    k = int((a[0] > 2).item())\n    return a + y + k\n")
    a, b, c = (ex.explain_one(d, tmp_path / "st") for d in (clean, loop, brk))
    assert (a["graph_count"], a["graph_break_count"], a["breaks_listed"]) == (1, 0, 0)
    assert b["graph_count"] == 0
    assert c["graph_count"] == 2 and c["breaks_listed"] >= 1 and \
        any("item" in r for r in c["break_reasons"])
    md = ex.summary_md([a, b, c])
    assert "| A | 3 | 1 | 1 | 1 | 0 |" in md and "A/loop" in md and "A/brk" in md


def test_the_table_loads_into_duckdb_with_a_reason_for_every_missing_time(tmp_path):
    import threading
    from types import SimpleNamespace

    from solforge.baselines import outputs as bo
    from solforge.report.import_results import import_baselines
    from solforge.store import Store

    _problem(tmp_path / "d", "A", "p")
    probs = rb.discover(tmp_path / "d")
    hw = {"gpu_name": "NVIDIA H200", "driver": "580.1", "torch_version": "2.11.0+cu130"}
    rows = [{"problem": "p", "workload_uuid": "w4k", "variant": v, "status": "passed", "median_ms": ms,
             "spread": 0.01, "n_reps": 20, "timing_method": "cupti", "label": "", "message": "",
             "gpu": "0", "busy_ms": busy} for v, ms, busy in (("eager", 0.5, 0.1),
                                                              ("compile", 0.25, None))]
    rows.append({"problem": "p", "workload_uuid": "w64k", "variant": "compile", "status": "oom",
                 "median_ms": None, "message": "CUDA out of memory", "gpu": "0"})
    run = SimpleNamespace(out=tmp_path / "o", rows=rows, failures=[], lock=threading.Lock(),
                          clocks={"0": {"sm_mhz": 1980, "mem_mhz": 3201, "sm_max_mhz": 1980}},
                          hardware={"0": hw}, t0=time.monotonic(),
                          args=SimpleNamespace(deadline_s=60.0, compile_no_graph=False))
    run.out.mkdir()
    bo.write_outputs(run, {}, probs)
    table = list(csv.DictReader(open(run.out / "baselines_h200.csv")))
    assert [(r["workload_uuid"], r["T_b_ms"], r["T_b_variant"]) for r in table] == \
        [("w4k", "0.250000", "compile"), ("w64k", "", "")]
    w64 = table[1]
    assert (w64["compile_status"], w64["compile_message"]) == ("oom", "CUDA out of memory")
    assert w64["eager_status"] == "not_measured"
    assert table[0]["gpu"] == "NVIDIA H200" and '"sm_mhz": 1980' in table[0]["clocks"]
    assert (table[0]["eager_busy_ms"], table[0]["compile_busy_ms"]) == ("0.100000", "")
    summary = (run.out / "baselines_summary.md").read_text()
    assert "NVIDIA H200, driver 580.1, torch 2.11.0+cu130" in summary
    assert "| A | p | 2 | 1 | 1 | 1 |" in summary and "oom: CUDA out of memory" in summary
    # T_b is compile's here, which recorded no busy time: nothing to call host time yet
    assert "0 of the 0 workloads whose T_b records the GPU's busy time (1 with a T_b)" in summary

    store = Store(tmp_path / "b.duckdb")
    assert import_baselines(store, run.out / "baselines_h200.csv", None) == 4
    got = store.query("SELECT workload_uuid, variant, status, median_ms FROM baselines "
                      "ORDER BY workload_uuid, variant")
    assert [(g["workload_uuid"], g["variant"], g["status"], g["median_ms"]) for g in got] == [
        ("w4k", "compile", "passed", 0.25), ("w4k", "eager", "passed", 0.5),
        ("w64k", "compile", "oom", None), ("w64k", "eager", "not_measured", None)]
    busy = store.query("SELECT variant, busy_ms FROM baselines WHERE workload_uuid = 'w4k' "
                       "ORDER BY variant")
    assert [(b["variant"], b["busy_ms"]) for b in busy] == [("compile", None), ("eager", 0.1)]
    # T_b as the scoring code reads it: passed rows only, the faster variant
    from solforge.store.attempt_queries import fastest_baselines

    assert fastest_baselines(store) == [{"problem": "p", "workload_uuid": "w4k", "t_b": 0.25,
                                         "variant": "compile"}]
    # the script's own loader: a hardware row with GPU, driver and clocks, the baselines linked to it
    db = tmp_path / "c.duckdb"
    r = subprocess.run([sys.executable, "-m", "solforge.baselines.scheduler", "--existing",
                        str(run.out / "baselines_h200.csv"), "--to-duckdb", str(db)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["baseline_rows"] == 4
    s2 = Store(db)
    hw_rows = s2.query("SELECT h.gpu_name, h.driver, h.clocks, count(*) AS n FROM baselines b "
                       "JOIN hardware h ON h.id = b.hardware_id GROUP BY ALL")
    assert len(hw_rows) == 1 and hw_rows[0]["gpu_name"] == "NVIDIA H200" and \
        hw_rows[0]["driver"] == "580.1" and hw_rows[0]["n"] == 4
    c = hw_rows[0]["clocks"]
    assert (json.loads(c) if isinstance(c, str) else c)["sm_mhz"] == 1980


def test_a_compile_that_fails_with_dynamic_dims_is_retried_static(tmp_path):
    import torch
    import torch._dynamo as dynamo

    from solforge.evaluate.baseline import time_problem
    from solforge.problem import load_problem_dir

    seen = []

    def no_symbolic_shapes(gm, example_inputs):  # a backend whose first dynamic compile fails
        vals = [n.meta.get("example_value") for n in gm.graph.nodes if n.op == "placeholder"]
        sym = any(isinstance(v, torch.SymInt) or any(isinstance(d, torch.SymInt)
                                                     for d in getattr(v, "shape", ())) for v in vals)
        seen.append(sym)
        if sym and seen.count(True) == 1:  # the first dynamic compile fails
            raise RuntimeError("symbolic shapes unsupported here")
        return gm.forward

    dynamo.register_backend(no_symbolic_shapes, name="test_no_symbolic_shapes")
    d = _problem(tmp_path, "A", "p", workloads=[{"uuid": "a", "n": 4096}, {"uuid": "b", "n": 8192}])
    dynamo.reset()
    rows = list(time_problem(load_problem_dir(d), "compile", tmp_path / "st", reps=2, device="cpu",
                             timer=rb.WallTimer(), compile_backend="test_no_symbolic_shapes"))
    assert [r.status for r in rows] == ["passed", "passed"], [r.message for r in rows]
    assert rows[0].message.startswith("compiled without dynamic dims (with them:")
    assert "symbolic shapes unsupported here" in rows[0].message
    # marked dims first (fails), then static; the next workload recompiles with automatic dynamic
    assert seen == [True, False, True]
    assert not rows[1].message


def test_a_worker_takes_tasks_the_parent_appends_while_it_runs(tmp_path):
    f, claims = tmp_path / "tasks.json", tmp_path / "claims"
    claims.mkdir()
    f.write_text(json.dumps([{"id": "t1"}, {"id": "t2"}]))
    (claims / "t2").touch()  # another worker has it
    gen = rb._tasks(f, claims)
    assert next(gen)[0]["id"] == "t1"
    f.write_text(json.dumps([{"id": "t1"}, {"id": "t2"}, {"id": "t1.oom"}]))  # a retry appended
    assert next(gen)[0]["id"] == "t1.oom"
    assert next(gen, None) is None and sorted(p.name for p in claims.iterdir()) == ["t1", "t1.oom", "t2"]


def test_a_dataset_path_without_problems_is_an_error_not_an_empty_run(tmp_path):
    r = subprocess.run([sys.executable, "-m", "solforge.baselines.scheduler", "--dataset",
                        str(tmp_path / "nothing"), "--out", str(tmp_path / "o"), "--device", "cpu"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "no problem (*/*/definition.json) under" in r.stderr


def test_the_summary_counts_the_t_b_that_is_host_time():
    """A workload's T_b is host time when its variant's GPU busy time is under
    settings.host_bound_busy_share of it; rows without a busy time are not counted either way."""
    from solforge.baselines.outputs import host_bound_line

    table = {("p", "a"): {"T_b_ms": "0.200000", "T_b_variant": "eager", "eager_busy_ms": "0.020000"},
             ("p", "b"): {"T_b_ms": "0.050000", "T_b_variant": "eager", "eager_busy_ms": "0.049000"},
             ("p", "c"): {"T_b_ms": "0.100000", "T_b_variant": "compile", "compile_busy_ms": "0.050000",
                          "eager_busy_ms": "0.300000"},
             ("p", "d"): {"T_b_ms": "0.300000", "T_b_variant": "eager"},
             ("p", "e"): {}}
    line = host_bound_line(table)
    assert "2 of the 3 workloads whose T_b records the GPU's busy time (4 with a T_b)" in line
