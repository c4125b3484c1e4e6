#!/usr/bin/env python3
"""Build, check and time the kernel families' variants against the problems' references.

Three steps, so that compiling happens on a CPU machine and the GPU time is spent only on running:

  prepare  (CPU)  instantiate each family's variants for the problems it serves, compile them to
                  cubins (solforge.compile.compile_candidate), stage them with a copy of each problem
                  (definition + workloads) under --dir (default .carry/bench, git-ignored).
  run      (GPU)  for every problem, workload and variant: fresh inputs, the reference's outputs,
                  the variant's outputs (poisoned first) checked with the workload's tolerance, and
                  times. Writes rows.jsonl + env.json to --out and prints a summary table.
  report   (CPU)  reads the rows, picks each problem's best variant (all workloads correct, best
                  geomean speedup), writes data/results/kernels_<gpu>.{csv,txt} and
                  kernels_cuda/<family>/best/<problem>.json.

Timing (a simple harness, until solforge.evaluate's timing is used here): CUDA events around one
call, the L2 flushed before every call (a 256 MiB write), median of up to 50 calls after warm-up.
T_b = the faster of the eager reference and torch.compile(reference) when --compile is given.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _shared_dir() -> Path:
    """The dataset folder: settings.shared_dir ($SOLFORGE_SHARED_DIR, default ../shared)."""
    from solforge.settings import get

    return get().shared_dir


# ──────────────────────────────────────────── prepare (CPU) ──────────────────────────────────────
def _pick(space: list[dict], k: int) -> list[dict]:
    """k variants spread over the space, the family's first guess always included."""
    if len(space) <= k:
        return space
    idx = sorted({round(i * (len(space) - 1) / (k - 1)) for i in range(k)})
    return [space[i] for i in idx]


def cmd_prepare(args) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from solforge.compile.api import compile_candidate, stage
    from solforge.kernels import all_families, families_for
    from solforge.problem.loader import load_problem_dir

    shared = Path(args.shared) / "sol_execbench"
    out = Path(args.dir)
    if out.exists() and not args.keep:
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    extra = json.loads(Path(args.variants).read_text()) if args.variants else {}
    jobs, plan = [], []
    for pdir in sorted(shared.glob("*/*")):
        if args.problems and not any(p in pdir.name for p in args.problems.split(",")):
            continue
        problem = load_problem_dir(pdir)
        fams = families_for(problem)
        if args.families:
            wanted = args.families.split(",")
            fams = [f for f in fams if f.name in wanted]
            # a family named here is benchmarked even while not offered to the search (that is
            # how a new family gets its first GPU check)
            fams += [f for f in all_families() if f.name in wanted and f not in fams
                     and f.matches(problem)]
        for fam in fams:
            limit = args.max_gemm if fam.name.startswith("gemm") else args.max_variants
            listed = extra.get(problem.name, {}).get(fam.name, [])
            variants = list(listed)
            if not (listed and args.only_listed):
                for p in _pick(fam.param_space(problem), limit):
                    if p not in variants:
                        variants.append(p)
            key = f"{pdir.parent.name}__{pdir.name}__{fam.name}"
            pd = out / key / "problem"
            pd.mkdir(parents=True, exist_ok=True)
            for f in ("definition.json", "workload.jsonl", "reference.py"):
                if (pdir / f).exists():
                    shutil.copy(pdir / f, pd / f)
            if args.m_values:
                _write_m_workloads(pdir / "workload.jsonl", pd / "workload.jsonl", args.m_values)
            entry = {"key": key, "problem": problem.name, "subset": pdir.parent.name,
                     "family": fam.name, "variants": []}
            for i, params in enumerate(variants):
                cand = fam.instantiate(problem, params)
                vdir = out / key / f"v{i}"
                entry["variants"].append({"id": f"{fam.name}:v{i}", "params": params,
                                          "dir": str(vdir.relative_to(out))})
                jobs.append((cand, vdir))
            plan.append(entry)

    def build(job):
        cand, vdir = job
        res = compile_candidate(cand)
        if not res.ok:
            return f"{vdir}: {res.status.value}: {res.log[-2000:]}"
        vdir.mkdir(parents=True, exist_ok=True)
        stage(cand, res, vdir)
        return None

    t0 = time.time()
    with ThreadPoolExecutor(max_workers=args.jobs) as ex:
        errors = [e for e in ex.map(build, jobs) if e]
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    (out / "plan.json").write_text(json.dumps({"commit": commit, "problems": plan}, indent=1))
    print(f"staged {len(jobs)} variants of {len(plan)} problems in {time.time() - t0:.0f}s -> {out}")
    for e in errors:
        print("COMPILE FAILED", e)
    if errors:
        sys.exit(1)


def _write_m_workloads(src: Path, dst: Path, m_values: str) -> None:
    """Replace a one-var-axis problem's workloads by one per value (--m-values 1,16,4096): the
    first workload is the template (its inputs and tolerance), only the var axis changes."""
    lines = [json.loads(l) for l in src.read_text().splitlines() if l.strip()]
    tmpl = lines[0]
    if len(tmpl["axes"]) != 1:
        raise SystemExit(f"--m-values needs one var axis, {src} has {sorted(tmpl['axes'])}")
    axis = next(iter(tmpl["axes"]))
    out = []
    for v in (int(x) for x in m_values.split(",")):
        w = json.loads(json.dumps(tmpl))
        w["axes"] = {axis: v}
        w["uuid"] = f"{tmpl['uuid'][:8]}-{axis}{v}"
        out.append(json.dumps(w))
    dst.write_text("\n".join(out) + "\n")


# ──────────────────────────────────────────── run (GPU) ──────────────────────────────────────────
def _error_pattern(out, ref, tol) -> str:
    """Where a 2-D output is wrong: bad fraction, first bad (row, col), and the rows mod 64 /
    columns mod 64 that are bad most often (a tile or swizzle bug shows as a pattern there)."""
    try:
        x, y = out.float().reshape(-1, out.shape[-1]), ref.float().reshape(-1, ref.shape[-1])
        bad = ~((x - y).abs() <= tol.max_atol + tol.max_rtol * y.abs())
        n = int(bad.sum())
        if n == 0:
            return "no bad elements"
        idx = bad.nonzero()
        r, c = idx[:, 0], idx[:, 1]
        top = lambda v: [int(i) for i in (v % 64).bincount(minlength=64).topk(4).indices]
        nan = int(x.isnan().sum())
        return (f"bad {n}/{bad.numel()} ({n / bad.numel():.3f}) nan {nan} first ({int(r[0])},{int(c[0])}) "
                f"out {float(x[r[0], c[0]]):.4g} ref {float(y[r[0], c[0]]):.4g} "
                f"bad rows%64 {top(r)} cols%64 {top(c)} bad rows {int(bad.any(1).sum())}/{bad.shape[0]} "
                f"cols {int(bad.any(0).sum())}/{bad.shape[1]}")
    except Exception as e:  # noqa: BLE001
        return f"pattern failed: {e}"


class Timer:
    """CUDA-event timing of one call with the L2 flushed before each call; median of the calls."""

    def __init__(self, torch, budget_ms: float = 60.0, max_reps: int = 50):
        self.torch = torch
        self.flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
        self.budget_ms, self.max_reps = budget_ms, max_reps

    def __call__(self, fn) -> tuple[float, float]:
        torch = self.torch
        fn()
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); torch.cuda.synchronize()
        est = max(s.elapsed_time(e), 1e-3)
        reps = int(min(self.max_reps, max(5, self.budget_ms / (est + 0.06))))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for i in range(reps):
            self.flush.zero_()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        ts = sorted(a.elapsed_time(b) for a, b in zip(starts, ends))
        return ts[len(ts) // 2], (ts[int(len(ts) * 0.9)] - ts[len(ts) // 10]) if len(ts) > 4 else 0.0


class CuptiTimer:
    """--cupti: the evaluator's timing (solforge.evaluate.timing: CUPTI span from the first kernel's
    start to the last one's end, L2 flushed before each call), so that calls of a few microseconds
    compare as the optimize run scores them (CUDA events add the launch overhead)."""

    def __init__(self, torch, reps: int = 15):
        from solforge.evaluate.timing import Timer as EvalTimer
        self.timer, self.reps = EvalTimer(), reps

    def __call__(self, fn) -> tuple[float, float]:
        t = self.timer.measure(lambda i: fn(), reps=self.reps, warmup_ms=5.0, budget_s=0.5)
        self.method = t.method
        return t.median_ms, t.p90_ms - t.p10_ms


def _reference_ns(defn) -> dict:
    ns: dict = {}
    exec(compile(defn.reference, f"<reference {defn.name}>", "exec"), ns)
    return ns


def _reference_fn(defn, ns=None):
    run = (ns or _reference_ns(defn))["run"]
    try:  # FP4 torch._scaled_mm needs sm_100: on Hopper run solforge's labelled dequantizing path
        from solforge.evaluate.reference import Fp4Shim, needs_fp4_dequant
    except ImportError:
        return run
    if not needs_fp4_dequant(defn):
        return run
    shim = Fp4Shim()

    def run_dequant(*a, **kw):
        shim.install()
        try:
            return run(*a, **kw)
        finally:
            shim.remove()
    return run_dequant


def _custom_fn(defn, ns):
    return ns.get(defn.custom_inputs_entrypoint) if defn.custom_inputs_entrypoint else None


def _as_outputs(result, defn) -> dict:
    names = list(defn.outputs)
    if isinstance(result, dict):
        return result
    if not isinstance(result, (tuple, list)):
        result = (result,)
    return dict(zip(names, result))


def _compare(out, ref, tol):
    try:
        from solforge.evaluate.correctness import compare
        c = compare(out, ref, tol)
        return c.ok, c.max_abs_err, c.reason
    except ImportError:
        import torch
        x, y = out.float(), ref.float()
        err = (x - y).abs()
        ok_el = err <= tol.max_atol + tol.max_rtol * y.abs()
        ratio = float(ok_el.float().mean())
        ok = bool(torch.isfinite(x).all()) and ratio >= tol.required_matched_ratio
        return ok, float(err.max()), "" if ok else f"matched {ratio:.5f}"


def _inputs(rw, round_index: int, custom_fn=None):
    try:
        from solforge.evaluate.inputs import InputFactory
        return InputFactory(rw, "cuda", custom_fn=custom_fn).make(round_index)
    except ImportError:
        import torch
        from solforge.problem.dtypes import to_torch
        g = torch.Generator(device="cuda").manual_seed(1234 + round_index)
        out = {}
        for k, spec in rw.definition.inputs.items():
            src = rw.workload.inputs.get(k)
            if spec.is_scalar:
                out[k] = getattr(src, "value", 1e-6)
            else:
                out[k] = torch.randn(rw.input_shapes[k], generator=g, device="cuda").to(to_torch(spec.dtype))
        return out


def cmd_run(args) -> None:
    import torch

    from solforge.compile.launcher import load_stage
    from solforge.problem.loader import load_problem_dir

    base = Path(args.dir)
    plan = json.loads((base / "plan.json").read_text())
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    rows_f = open(outdir / "rows.jsonl", "w")
    timer = CuptiTimer(torch) if args.cupti else Timer(torch, budget_ms=args.budget_ms)
    env = _gpu_env(torch)
    env["timing"] = "cupti (solforge.evaluate.timing)" if args.cupti else "cuda events"
    env["commit"] = plan.get("commit", "")
    # measured copy bandwidth: one large device-to-device copy (bytes read + written)
    a = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    t_copy, _ = timer(lambda: b.copy_(a))
    env["copy_tb_s"] = 2 * a.numel() / (t_copy * 1e-3) / 1e12
    del a, b
    (outdir / "env.json").write_text(json.dumps(env, indent=1))
    print(f"GPU {env['gpu']} driver {env['driver']} copy {env['copy_tb_s']:.2f} TB/s", flush=True)
    if args.compile:
        # One dynamic-shape compile per problem, recompiled where inductor specializes (size 1,
        # 32-bit indexing); the default limit (8) would silently fall back to eager.
        import torch._dynamo
        for knob in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                     "accumulated_cache_size_limit"):
            if hasattr(torch._dynamo.config, knob):
                setattr(torch._dynamo.config, knob, 4096)
    only = set(args.problems.split(",")) if args.problems else None
    t_start = time.time()
    groups: dict = {}
    for entry in plan["problems"]:  # one problem may have entries from several families
        groups.setdefault(entry["problem"], []).append(entry)
    for pname, entries in groups.items():
        if only and not any(o in pname for o in only):
            continue
        if time.time() - t_start > args.time_limit:
            print(f"time limit reached; skipping {pname} and the rest", flush=True)
            break
        entry = entries[0]
        problem = load_problem_dir(base / entry["key"] / "problem")
        defn = problem.definition
        ref_ns = _reference_ns(defn)
        ref, custom = _reference_fn(defn, ref_ns), _custom_fn(defn, ref_ns)
        compiled = None
        if args.compile and not any(e["family"].startswith("gemm") for e in entries):
            torch._dynamo.reset()
            compiled = torch.compile(ref, dynamic=True)
        runtimes, fam_of, variants = {}, {}, []
        for e in entries:
            for v in e["variants"]:
                variants.append(v)
                fam_of[v["id"]] = e["family"]
                try:
                    runtimes[v["id"]] = load_stage(base / v["dir"])
                except Exception as ex:  # noqa: BLE001
                    print(f"{pname} {v['id']}: load failed: {ex}", flush=True)
        for wi, rw in enumerate(problem.workloads):
            inputs = _inputs(rw, 0, custom)
            tensors = {k: v for k, v in inputs.items() if isinstance(v, torch.Tensor)}
            scalars = {k: v for k, v in inputs.items() if not isinstance(v, torch.Tensor)}
            t_ref = time.perf_counter()
            refs = _as_outputs(ref(**inputs), defn)
            torch.cuda.synchronize()
            t_ref = (time.perf_counter() - t_ref) * 1e3
            # --ref-once: a slow Python-loop reference (FlashInfer-Bench paged prefill: seconds per
            # call) is timed by the one call that made its outputs (wall clock), not 8 more calls
            t_eager = t_ref if args.ref_once else timer(lambda: ref(**inputs))[0]
            t_comp = None
            if compiled is not None:
                try:
                    compiled(**inputs)
                    t_comp, _ = timer(lambda: compiled(**inputs))
                except Exception as e:  # noqa: BLE001
                    print(f"torch.compile failed on {entry['problem']}: {e}", flush=True)
                    compiled = None
            axes = dict(rw.axes)
            for v in variants:
                rt = runtimes.get(v["id"])
                row = {"problem": pname, "subset": entry["subset"], "family": fam_of[v["id"]],
                       "variant": v["id"], "params": v["params"], "workload": wi, "uuid": rw.uuid,
                       "axes": axes, "t_eager_ms": t_eager, "t_compile_ms": t_comp}
                if rt is None:
                    row.update(ok=False, reason="load failed")
                else:
                    try:
                        outs = {k: torch.full(ref_t.shape, float("nan"), dtype=ref_t.dtype, device="cuda")
                                for k, ref_t in refs.items()}
                        plan_ = rt.prepare({**tensors, **outs}, axes, scalars)
                        plan_.run()
                        torch.cuda.synchronize()
                        ok, err, reason = True, 0.0, ""
                        for k in refs:
                            o, e_, r_ = _compare(outs[k], refs[k], rw.workload.tolerance)
                            ok, err = ok and o, max(err, e_ or 0.0)
                            reason = reason or r_
                        row.update(ok=ok, max_abs_err=err, reason=reason)
                        if not ok and len(refs) == 1:
                            k = next(iter(refs))
                            row["pattern"] = _error_pattern(outs[k], refs[k], rw.workload.tolerance)
                        if ok:
                            row["t_kernel_ms"], row["spread_ms"] = timer(plan_.run)
                            # the same plan once more on NaN outputs: a kernel that keeps state in
                            # its workspace (workspace_zero) must leave it right after every call
                            for k in outs:
                                outs[k].fill_(float("nan"))
                            plan_.run()
                            torch.cuda.synchronize()
                            for k in refs:
                                o, _, r_ = _compare(outs[k], refs[k], rw.workload.tolerance)
                                if not o:
                                    row.update(ok=False, reason=f"after timing (same plan): {r_}")
                                    break
                    except Exception as e:  # noqa: BLE001
                        torch.cuda.synchronize()
                        row.update(ok=False, reason=f"{type(e).__name__}: {e}"[:500])
                rows_f.write(json.dumps(row) + "\n")
                rows_f.flush()
            del inputs, tensors, refs
        _print_problem(outdir / "rows.jsonl", pname)
    rows_f.close()
    print(f"done in {time.time() - t_start:.0f}s", flush=True)


def _gpu_env(torch) -> dict:
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    try:
        from cuda.bindings import driver
        driver.cuInit(0)
        _, v = driver.cuDriverGetVersion()
        env["cuda_driver_api"] = f"{v // 1000}.{(v % 1000) // 10}"
    except Exception:  # noqa: BLE001
        pass
    try:
        env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                       capture_output=True, text=True).stdout.strip()
    except Exception:  # noqa: BLE001
        env["driver"] = "unknown"
    return env


# ──────────────────────────────────────────── summaries ──────────────────────────────────────────
def _load_rows(path: Path) -> list[dict]:
    return [json.loads(l) for l in path.read_text().splitlines() if l.strip()]


def _t_base(r: dict) -> float:
    ts = [t for t in (r.get("t_eager_ms"), r.get("t_compile_ms")) if t]
    return min(ts)


def best_variants(rows: list[dict]) -> dict:
    """problem -> (variant id, geomean speedup, rows of that variant); only variants correct on
    every workload qualify."""
    by: dict = {}
    for r in rows:
        by.setdefault(r["problem"], {}).setdefault(r["variant"], []).append(r)
    out = {}
    for prob, variants in by.items():
        best = None
        for vid, rs in variants.items():
            if not all(r.get("ok") and r.get("t_kernel_ms") for r in rs):
                continue
            g = math.exp(sum(math.log(_t_base(r) / r["t_kernel_ms"]) for r in rs) / len(rs))
            if best is None or g > best[1]:
                best = (vid, g, rs)
        out[prob] = best
    return out


def _print_problem(rows_path: Path, problem: str) -> None:
    rows = [r for r in _load_rows(rows_path) if r["problem"] == problem]
    best = best_variants(rows).get(problem)
    n_ok = {}
    for r in rows:
        n_ok.setdefault(r["variant"], [0, 0])
        n_ok[r["variant"]][0] += bool(r.get("ok"))
        n_ok[r["variant"]][1] += 1
    fails = [f"{v}:{a}/{b}" for v, (a, b) in n_ok.items() if a < b]
    reasons = sorted({r.get("reason", "")[:160] for r in rows if not r.get("ok")})[:2]
    pats = [f"{r['variant']} {r['axes']}: {r['pattern']}" for r in rows if r.get("pattern")][:2]
    for pat in pats:
        print(f"    {pat}", flush=True)
    if best is None:
        print(f"{problem:44s} NO CORRECT VARIANT  fails {fails} {reasons}", flush=True)
    else:
        print(f"{problem:44s} best {best[0]:4s} geomean speedup {best[1]:.3f}x  fails {fails} {reasons}",
              flush=True)


# ──────────────────────────────────────────── report (CPU) ───────────────────────────────────────
HBM_TB_S, FP16_TFLOPS = 4.8, 989.0  # H200 datasheet: the speed-of-light ceilings of the SOL score


def _bytes_flops(problem, rw) -> tuple[float, float]:
    from solforge.problem.dtypes import itemsize
    d = problem.definition
    nbytes = 0.0
    for k, spec in list(d.inputs.items()) + list(d.outputs.items()):
        shp = rw.input_shapes.get(k) if k in d.inputs else rw.output_shapes.get(k)
        if shp is not None:
            nbytes += math.prod(shp) * itemsize(spec.dtype)
    flops = 0.0
    if "M" in rw.axes and "N" in d.const_axes and "K" in d.const_axes:
        flops = 2.0 * rw.axes["M"] * d.const_axes["N"] * d.const_axes["K"]
    return nbytes, flops


def _per_workload(problem, rs: list[dict], env: dict) -> list[dict]:
    out = []
    for r in sorted(rs, key=lambda r: r["workload"]):
        rw = problem.workloads[r["workload"]]
        nbytes, flops = _bytes_flops(problem, rw)
        t_sol = max(nbytes / (HBM_TB_S * 1e12), flops / (FP16_TFLOPS * 1e12)) * 1e3
        tb, tk = _t_base(r), r["t_kernel_ms"]
        sol = 1.0 / (1.0 + (tk - t_sol) / (tb - t_sol)) if tb > t_sol else None
        out.append({"workload": r["workload"], "uuid": r["uuid"], "axes": r["axes"],
                    "axes_str": " ".join(f"{k}={v}" for k, v in r["axes"].items()
                                         if k not in problem.definition.const_axes),
                    "t_kernel_ms": tk, "t_eager_ms": r["t_eager_ms"], "t_compile_ms": r.get("t_compile_ms"),
                    "t_base_ms": tb, "speedup": tb / tk, "t_sol_ms": t_sol, "sol_score": sol,
                    "bytes": nbytes, "flops": flops, "achieved_tb_s": nbytes / (tk * 1e-3) / 1e12,
                    "max_abs_err": r.get("max_abs_err")})
    return out


def cmd_report(args) -> None:
    from solforge.kernels import get_family
    from solforge.problem.loader import load_problem_dir

    rows = _load_rows(Path(args.rows))
    env = json.loads(Path(args.env).read_text())
    plans = []  # later dirs override earlier ones for the same problem
    for d in args.dir.split(","):
        pl = json.loads((Path(d) / "plan.json").read_text())
        for e in pl["problems"]:
            e["base"] = d
        plans.append(pl)
    plan = {"problems": [e for pl in plans for e in pl["problems"]]}
    entries = {}  # (problem, variant id) -> (plan entry, variant)
    for e in plan["problems"]:
        for v in e["variants"]:
            entries[(e["problem"], v["id"])] = (e, v)
    best = best_variants(rows)
    gpu = args.gpu
    res_dir = REPO / "data" / "results" / "kernels_bench"
    res_dir.mkdir(parents=True, exist_ok=True)
    csv_lines = ["problem,family,variant,workload,axes,t_kernel_ms,t_eager_ms,t_compile_ms,t_base_ms,"
                 "speedup,t_sol_ms,sol_score,bytes,achieved_tb_s,copy_frac"]
    txt = [f"# kernels on {env.get('gpu')} (driver {env.get('driver')}, torch {env.get('torch')}), "
           f"commit {env.get('commit', '')[:12]}",
           f"# measured copy bandwidth {env['copy_tb_s']:.2f} TB/s; T_sol from {HBM_TB_S} TB/s and "
           f"{FP16_TFLOPS} TFLOP/s; T_b = min(eager, torch.compile) where torch.compile was timed",
           f"{'problem':44s} {'family':12s} {'variant':16s} {'n':>3s} {'geomean':>8s} {'min':>6s} {'max':>6s}"]
    all_speedups = []
    for prob in sorted(best):
        b = best[prob]
        if b is None:
            txt.append(f"{prob:44s} none correct")
            continue
        vid, g, rs = b
        e = entries[(prob, vid)][0]
        problem = load_problem_dir(Path(e["base"]) / e["key"] / "problem")
        per_wl = _per_workload(problem, rs, env)
        for w in per_wl:
            csv_lines.append(",".join(str(x) for x in (
                prob, e["family"], vid, w["workload"], w["axes_str"], f"{w['t_kernel_ms']:.5f}",
                f"{w['t_eager_ms']:.5f}", f"{w['t_compile_ms']:.5f}" if w.get("t_compile_ms") else "",
                f"{w['t_base_ms']:.5f}", f"{w['speedup']:.4f}", f"{w['t_sol_ms']:.5f}",
                f"{w['sol_score']:.4f}" if w["sol_score"] is not None else "", int(w["bytes"]),
                f"{w['achieved_tb_s']:.3f}", f"{w['achieved_tb_s'] / env['copy_tb_s']:.3f}")))
        sp = [w["speedup"] for w in per_wl]
        all_speedups.append(g)
        txt.append(f"{prob:44s} {e['family']:12s} {vid:16s} {len(sp):3d} {g:8.3f} {min(sp):6.2f} {max(sp):6.2f}")
    # each family's best variant per problem, with its measurements, in the family's best/ folder
    by_pf: dict = {}
    for r in rows:
        by_pf.setdefault((r["problem"], r["family"]), []).append(r)
    for (prob, fam_name), rs in sorted(by_pf.items()):
        if args.no_best:
            break
        fb = best_variants(rs).get(prob)
        if fb is None:
            continue
        vid, g, vrows = fb
        e, v = entries[(prob, vid)]
        problem = load_problem_dir(Path(e["base"]) / e["key"] / "problem")
        fam = get_family(fam_name)
        cand = fam.instantiate(problem, v["params"])
        bdir = fam.family_dir / "best"
        bdir.mkdir(parents=True, exist_ok=True)
        per_wl = _per_workload(problem, vrows, env)
        (bdir / f"{prob}.json").write_text(json.dumps({
            "problem": prob, "subset": e["subset"], "family": fam.name, "variant": vid,
            "params": v["params"], "geomean_speedup": g,
            "overall_best": best.get(prob) is not None and best[prob][0] == vid,
            "gpu": env.get("gpu"), "driver": env.get("driver"), "torch": env.get("torch"),
            "commit": env.get("commit"), "copy_tb_s": env["copy_tb_s"],
            "timing": ("CUPTI spans (solforge.evaluate.timing)" if "cupti" in env.get("timing", "")
                       else "CUDA events") + ", L2 flushed before each call, median; benchmarks/bench_kernels.py",
            "baseline": "min(eager, torch.compile(dynamic=True)) where timed, else eager",
            "workloads": per_wl, "candidate": cand.model_dump()}, indent=1))
    if all_speedups:
        gm = math.exp(sum(map(math.log, all_speedups)) / len(all_speedups))
        txt.append(f"overall geomean over {len(all_speedups)} problems: {gm:.3f}x")
    (res_dir / f"kernels_{gpu}.csv").write_text("\n".join(csv_lines) + "\n")
    (res_dir / f"kernels_{gpu}.txt").write_text("\n".join(txt) + "\n")
    print("\n".join(txt))


def cmd_table(args) -> None:
    """Per problem and workload: the reference's time and each family's best variant there (and
    the spread of all its variants), so a new family can be compared at each size."""
    rows = _load_rows(Path(args.rows))
    by: dict = {}
    for r in rows:
        by.setdefault((r["problem"], json.dumps(r["axes"], sort_keys=True)), []).append(r)
    fams = sorted({r["family"] for r in rows})
    head = f"{'problem':24s} {'axes':>22s} {'torch_us':>9s}" + "".join(
        f" {f + '_us':>15s} {'x':>5s} {'var':>5s} {'ok':>5s}" for f in fams)
    lines = [head]
    for (prob, axes), rs in sorted(by.items(), key=lambda kv: (kv[0][0], sorted(json.loads(kv[0][1]).values()))):
        te = _t_base(rs[0])
        ax = " ".join(f"{k}={v}" for k, v in json.loads(axes).items())
        line = f"{prob[:24]:24s} {ax:>22s} {te * 1e3:9.1f}"
        for f in fams:
            fr = [r for r in rs if r["family"] == f]
            ok = [r for r in fr if r.get("ok") and r.get("t_kernel_ms")]
            if not ok:
                line += f" {'-':>15s} {'':>5s} {'':>5s} {len(ok):>2d}/{len(fr):<2d}"
                continue
            b = min(ok, key=lambda r: r["t_kernel_ms"])
            line += (f" {b['t_kernel_ms'] * 1e3:15.1f} {te / b['t_kernel_ms']:5.2f} "
                     f"{b['variant'].split(':')[-1]:>5s} {len(ok):>2d}/{len(fr):<2d}")
        lines.append(line)
    text = "\n".join(lines) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    print(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--dir", default=str(REPO / ".carry" / "bench"))
    p.add_argument("--shared", default=str(_shared_dir()))
    p.add_argument("--problems", default="")
    p.add_argument("--families", default="")
    p.add_argument("--max-variants", type=int, default=6)
    p.add_argument("--max-gemm", type=int, default=8)
    p.add_argument("--variants", default="", help="JSON {problem: {family: [params, ...]}} tried first")
    p.add_argument("--only-listed", action="store_true", help="only the --variants params")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--m-values", default="", help="e.g. 1,16,64,512,4096: one workload per value "
                   "of the (single) var axis instead of the problem's workloads")
    p.add_argument("--keep", action="store_true")
    r = sub.add_parser("run")
    r.add_argument("--dir", default=str(REPO / ".carry" / "bench"))
    r.add_argument("--out", default=os.environ.get("OUT", "bench_out"))
    r.add_argument("--problems", default="")
    r.add_argument("--compile", action="store_true", help="also time torch.compile(reference)")
    r.add_argument("--ref-once", action="store_true", help="time the reference by its one checked call")
    r.add_argument("--budget-ms", type=float, default=40.0)
    r.add_argument("--cupti", action="store_true",
                   help="time with the evaluator's CUPTI spans instead of CUDA events")
    r.add_argument("--time-limit", type=float, default=400.0)
    s = sub.add_parser("report")
    s.add_argument("--rows", required=True)
    s.add_argument("--env", required=True)
    s.add_argument("--dir", default=str(REPO / ".carry" / "bench"))
    s.add_argument("--gpu", default="h200")
    s.add_argument("--no-best", action="store_true", help="do not write kernels_cuda/<family>/best/")
    t = sub.add_parser("table", help="per-workload table: reference vs each family's best variant")
    t.add_argument("--rows", required=True)
    t.add_argument("--out", default="")
    args = ap.parse_args()
    {"prepare": cmd_prepare, "run": cmd_run, "report": cmd_report, "table": cmd_table}[args.cmd](args)


if __name__ == "__main__":
    main()
