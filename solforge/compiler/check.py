"""Check a compiler candidate against the reference on the CPU (emulate.py), at a small workload.

    python -m solforge.compiler.check PROBLEM_DIR [--cap 8]

Var axes are shrunk (to at most --cap, keeping the definition's constraints) so the emulation stays
small; inputs come from the evaluator's InputFactory, the reference runs on the CPU, outputs are
compared with the evaluator's compare_all under the workload's tolerance. Prints one JSON line.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path


def shrink(defn, rw, cap: int):
    """The workload with var axes cut to <= cap where the definition's constraints still hold."""
    from ..problem.loader import resolve_at

    axes = dict(rw.workload.axes)
    for k in defn.var_axes:
        v = int(axes.get(k, 1))
        for c in (min(v, cap), min(v, 2 * cap), min(v, 4 * cap), v):
            trial = dict(axes, **{k: c})
            try:
                wl = rw.workload.model_copy(update={"axes": trial})
                resolve_at(defn, wl, "<check>", None)
                axes = trial
                break
            except Exception:  # noqa: BLE001 - a constraint fails: try a larger value
                continue
    wl = rw.workload.model_copy(update={"axes": axes})
    return resolve_at(defn, wl, "<check>", None)


def check_problem(problem, cap: int = 8, candidate=None) -> dict:
    import torch

    from ..evaluate.correctness import allocate_outputs, compare_all, normalize_reference_outputs
    from ..evaluate.inputs import InputFactory, clone_inputs
    from ..evaluate.reference import Fp4Shim, load_reference, needs_fp4_dequant
    from .api import compile_problem
    from .emulate import emulate

    defn = problem.definition
    if candidate is None:
        out = compile_problem(problem)
        if not out.ok:
            return {"ok": False, "stage": out.stage, "reason": out.reason}
        candidate = out.candidate
    rw0 = min(problem.workloads, key=lambda w: sum(int(v) for v in w.axes.values()))
    rw = shrink(defn, rw0, cap)
    if needs_fp4_dequant(defn) and not isinstance(torch._scaled_mm, Fp4Shim):
        # what the evaluator runs where FP4 _scaled_mm is unavailable (the CPU here, Hopper there)
        Fp4Shim().install()
    mod = load_reference(defn, Path(tempfile.mkdtemp()), "_check_ref")
    custom = getattr(mod, defn.custom_inputs_entrypoint, None) if defn.custom_inputs_entrypoint else None
    inputs = InputFactory(rw, "cpu", custom_fn=custom).make(0)
    with torch.no_grad():
        ref = mod.run(**clone_inputs(inputs))
    refs = normalize_reference_outputs(ref, rw, "cpu")
    outs = allocate_outputs(rw, "cpu")
    tensors = {k: v.contiguous() for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    tensors.update(outs)
    scalars = {k: v for k, v in inputs.items() if not isinstance(v, torch.Tensor)}
    emulate(candidate, tensors, rw.axes, scalars)
    cmp = compare_all(outs, refs, rw.workload.tolerance)
    return {"ok": bool(cmp.ok), "stage": "check", "reason": cmp.reason,
            "max_abs_err": cmp.max_abs_err, "axes": rw.axes}


def _one(path: str, cap: int, emitted, q) -> None:
    from ..candidate import Candidate
    from ..problem.loader import load_problem_dir

    try:
        p = load_problem_dir(Path(path))
        cand = None
        if emitted:
            found = sorted(Path(emitted).glob(f"*__{p.name}.json"))
            f = found[0] if found else None
            if f is None:
                q.put({"problem": p.name, "ok": False, "stage": "none", "reason": "no candidate"})
                return
            cand = Candidate.model_validate(json.loads(f.read_text()))
        r = check_problem(p, cap, candidate=cand)
        r["problem"] = p.name
        r["subset"] = p.subset
    except Exception as e:  # noqa: BLE001 - one line per problem
        r = {"problem": Path(path).name, "ok": False, "stage": "check",
             "reason": f"{type(e).__name__}: {str(e)[:300]}"}
    q.put(r)


def main(argv=None) -> int:
    """Check each problem dir in a forked child with a timeout; one JSON line each."""
    import argparse
    import multiprocessing as mp

    ap = argparse.ArgumentParser()
    ap.add_argument("problems", nargs="+", help="problem directories")
    ap.add_argument("--cap", type=int, default=8)
    ap.add_argument("--emitted", default=None, help="read candidates from `coverage --emit` here")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--jsonl", default=None)
    a = ap.parse_args(argv)
    import torch  # noqa: F401 - forked children start with it

    ctx = mp.get_context("fork")
    for path in a.problems:
        q = ctx.Queue()
        proc = ctx.Process(target=_one, args=(path, a.cap, a.emitted, q))
        proc.start()
        proc.join(a.timeout)
        if proc.is_alive():
            proc.kill()
            proc.join()
            r = {"problem": Path(path).name, "ok": False, "stage": "check", "reason": "timeout"}
        else:
            try:
                r = q.get(timeout=1)
            except Exception:  # noqa: BLE001
                r = {"problem": Path(path).name, "ok": False, "stage": "check",
                     "reason": f"crashed (exit code {proc.exitcode})"}
        line = json.dumps(r, default=str)
        print(line, flush=True)
        if a.jsonl:
            with open(a.jsonl, "a") as f:
                f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
