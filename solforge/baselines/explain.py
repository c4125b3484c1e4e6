"""torch._dynamo.explain of every reference on the CPU: how many graphs and graph breaks torch.compile
makes of it, and why. It decides nothing by itself; the baselines scheduler reads the result to order
the torch.compile work (references that break into many graphs last) and to give the reason for a
workload left without a torch.compile time.

    python -m solforge.baselines.explain --dataset ../shared/sol_execbench \
        --out data/results/baselines/baselines_dynamo_explain.jsonl [--jobs 2] [--timeout-s 120]

One JSON line per problem: graph_count, graph_break_count, break_reasons (distinct, first few),
op_count, the workload explained (the one with the fewest input elements), seconds, or an error.
Each problem runs in a worker process with a time limit; a worker that hangs or dies is replaced and
the problem is recorded with that reason.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

from ..settings import REPO_ROOT as REPO
from ..settings import get as _settings


def _numel(shape) -> int:
    n = 1
    for d in shape or ():
        n *= int(d)
    return n


def explain_one(problem_dir: Path, stage: Path) -> dict:
    import torch
    import torch._dynamo as dynamo

    from solforge.evaluate.inputs import InputFactory
    from solforge.evaluate.reference import DEQUANT_LABEL, Fp4Shim, load_reference, needs_fp4_dequant
    from solforge.problem import load_problem_dir

    t0 = time.monotonic()
    problem = load_problem_dir(problem_dir)
    defn = problem.definition
    w = min(problem.workloads, key=lambda w: sum(_numel(s) for s in w.input_shapes.values()))
    rec = {"problem": defn.name, "subset": problem_dir.parent.name, "workload_uuid": w.uuid}
    mod = load_reference(defn, stage, name="ref_" + "".join(c if c.isalnum() else "_"
                                                             for c in defn.name))
    custom = getattr(mod, defn.custom_inputs_entrypoint) if defn.custom_inputs_entrypoint else None
    shim = Fp4Shim().install() if needs_fp4_dequant(defn) else None
    if shim is not None:
        rec["label"] = DEQUANT_LABEL
    try:
        inputs = InputFactory(w, torch.device("cpu"), custom_fn=custom).make(100)
        args = [inputs[k] for k in defn.inputs]
        dynamo.reset()
        with torch.no_grad():
            e = dynamo.explain(mod.run)(*args)
        reasons: list[str] = []
        for b in e.break_reasons:
            r = str(getattr(b, "reason", b)).strip().splitlines()[0][:240]
            if r not in reasons:
                reasons.append(r)
        # graph_break_count counts breaks that split a graph; break_reasons also lists the breaks
        # (e.g. a Tensor.item() inside a loop) whose side holds no ops
        rec.update(graph_count=e.graph_count, graph_break_count=e.graph_break_count,
                   breaks_listed=len(e.break_reasons),
                   op_count=e.op_count, break_reasons=reasons[:6],
                   distinct_break_reasons=len(reasons))
    finally:
        if shim is not None:
            shim.remove()
    rec["seconds"] = round(time.monotonic() - t0, 2)
    return rec


def worker(dirs: list[str], stage: Path) -> int:
    """Explain each problem folder named on stdin order; one JSON line per problem on stdout."""
    import torch

    torch.set_num_threads(1)
    for d in dirs:
        print(json.dumps({"event": "begin", "dir": d}), flush=True)
        try:
            rec = explain_one(Path(d), stage)
        except Exception as e:  # noqa: BLE001 - the reason is the result
            rec = {"problem": Path(d).name, "subset": Path(d).parent.name,
                   "error": f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"}
        print(json.dumps({"event": "done", **rec}), flush=True)
    return 0


def run_all(dirs: list[Path], out: Path, jobs: int, timeout_s: float, stage: Path,
            first: tuple = ()) -> list[dict]:
    done: dict[str, dict] = {}
    if out.exists():  # resume: problems already explained are kept
        for line in out.read_text().splitlines():
            r = json.loads(line)
            done[r["problem"]] = r
    todo = sorted((d for d in dirs if d.name not in done), key=lambda d: d.parent.name not in first)
    queues = [todo[i::jobs] for i in range(jobs)]
    procs: list[dict] = []

    def spawn(q):
        if not q:
            return None
        p = subprocess.Popen([sys.executable, "-m", "solforge.baselines.explain", "--worker", *map(str, q), "--stage",
                              str(stage)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [lines.put(x) for x in p.stdout], daemon=True).start()
        return {"p": p, "q": list(q), "cur": None, "since": time.monotonic(), "lines": lines}

    procs = [x for x in (spawn(q) for q in queues) if x]
    with open(out, "a") as fo:
        def record(rec):
            done[rec["problem"]] = rec
            fo.write(json.dumps(rec) + "\n")
            fo.flush()
            print(f"{rec['problem'][:60]:60s} " + (rec.get("error") or
                  f"graphs {rec['graph_count']} breaks {rec['graph_break_count']} "
                  f"({rec['seconds']} s)"), flush=True)

        while procs:
            time.sleep(0.2)
            for st in list(procs):
                p = st["p"]
                rc = p.poll()  # before draining: a finished worker's lines are all queued
                lines = []
                while not st["lines"].empty():
                    lines.append(st["lines"].get())
                for line in lines:
                    if not line.startswith("{"):
                        continue
                    ev = json.loads(line)
                    if ev.pop("event") == "begin":
                        st["cur"], st["since"] = Path(ev["dir"]), time.monotonic()
                    else:
                        record(ev)
                        st["q"] = [d for d in st["q"] if Path(d).name != ev["problem"]]
                        st["cur"] = None
                if rc is not None and not st["lines"].empty():
                    continue  # its reader thread is still queueing lines
                hung = st["cur"] is not None and time.monotonic() - st["since"] > timeout_s
                if rc is None and not hung:
                    continue
                if hung:
                    p.kill()
                    p.wait()
                if st["cur"] is not None:
                    cur = st["cur"]
                    record({"problem": cur.name, "subset": cur.parent.name,
                            "error": f"explain exceeded {timeout_s:.0f} s on the CPU (killed)" if hung
                            else f"worker died (exit {rc})"})
                    st["q"] = [d for d in st["q"] if Path(d) != cur]
                procs.remove(st)
                nxt = spawn(st["q"])
                if nxt:
                    procs.append(nxt)
    return [done[d.name] for d in dirs if d.name in done]


def summary_md(recs: list[dict]) -> str:
    lines = ["# torch._dynamo.explain of every reference (CPU, smallest workload)", "",
             "Produced by `python -m solforge.baselines.explain`; one graph and no break means torch.compile "
             "captures the whole reference.", "",
             "No graph captured (graph_count 0): dynamo skipped the whole frame (a graph break inside "
             "a Python loop, e.g. Tensor.item()), so torch.compile runs the reference as eager PyTorch.",
             "", "| subset | problems | one graph, no break | with graph breaks | no graph captured | "
             "explain failed |", "|---|---|---|---|---|---|"]
    subsets = sorted({r["subset"] for r in recs})
    for s in subsets + ["all"]:
        rs = [r for r in recs if s == "all" or r["subset"] == s]
        ok = [r for r in rs if "error" not in r]
        lines.append(f"| {s} | {len(rs)} | "
                     f"{sum(1 for r in ok if r['graph_count'] and not r['breaks_listed'])} | "
                     f"{sum(1 for r in ok if r['graph_count'] and r['breaks_listed'])} | "
                     f"{sum(1 for r in ok if not r['graph_count'])} | "
                     f"{sum(1 for r in rs if 'error' in r)} |")
    lines += ["", "## References with graph breaks (most first)", "",
              "| problem | graphs | breaks (listed) | reasons (distinct, first) |", "|---|---|---|---|"]
    for r in sorted((r for r in recs if r.get("breaks_listed") or r.get("graph_count") == 0),
                    key=lambda r: (-r["graph_break_count"], -r["breaks_listed"])):
        why = "; ".join(x.replace("|", "/") for x in r["break_reasons"][:3])
        lines.append(f"| {r['subset']}/{r['problem']} | {r['graph_count']} | "
                     f"{r['graph_break_count']} ({r['breaks_listed']}) | {why[:400]} |")
    lines += ["", "## Explain failed on the CPU (reason)", ""]
    for r in recs:
        if "error" in r:
            lines.append(f"- {r['subset']}/{r['problem']}: {r['error']}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m solforge.baselines.explain", description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", type=Path, default=_settings().shared_dir / "sol_execbench")
    ap.add_argument("--out", type=Path, default=REPO / "data/results/baselines/baselines_dynamo_explain.jsonl")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout-s", type=float, default=120.0)
    ap.add_argument("--stage", type=Path, default=Path("/tmp/explain_stage"))
    ap.add_argument("--only", default="", help="comma-separated problem-name prefixes")
    ap.add_argument("--first", default="", help="comma-separated subsets to explain first")
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("dirs", nargs="*")
    a = ap.parse_args(argv)
    if a.worker:
        return worker(a.dirs, a.stage)
    pre = tuple(x for x in a.only.split(",") if x)
    dirs = sorted(p.parent for p in a.dataset.glob("*/*/definition.json")
                  if not pre or p.parent.name.startswith(pre))
    recs = run_all(dirs, a.out, a.jobs, a.timeout_s, a.stage, tuple(a.first.split(",")))
    a.out.with_suffix(".md").write_text(summary_md(recs))
    print(f"{len(recs)} problems -> {a.out}, {a.out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
