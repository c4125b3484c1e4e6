"""Check a compiler candidate against the reference on the CPU (emulate.py), at a small workload.
The reference (a dataset's code) runs in solforge.sandbox; the emulation (the compiler's own
generated code, built with g++) runs here.

    python -m solforge.compiler.check PROBLEM_DIR [--cap 8]
    python -m solforge.compiler.check PROBLEM_DIR --float64   # the reference against itself in float64

Var axes are shrunk (to at most --cap, keeping the definition's constraints) so the emulation stays
small; inputs come from the evaluator's InputFactory, the reference runs on the CPU (sandboxed), outputs are
compared with the evaluator's compare_all under the workload's tolerance. Prints one JSON line.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Optional


def shrink(defn, rw, cap: int):
    """The workload with var axes cut to <= cap where the definition's constraints still hold."""
    from ..problem.loader import resolve_at

    axes = dict(rw.workload.axes)
    # a scalar input that carries an axis's value (num_frames beside a num_frames axis) does not
    # shrink with it: such an axis keeps its size
    mirrored = {v for v in rw.scalars().values() if isinstance(v, int) and not isinstance(v, bool)}
    for k in defn.var_axes:
        v = int(axes.get(k, 1))
        if v in mirrored and v > cap:
            continue
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


# ---- inside the sandbox: the reference's side of the check -----------------------------------------
# The reference is a dataset's code: it runs in solforge.sandbox (no secrets, no network, read-only
# filesystem), and its inputs and outputs come back as raw tensor files in a folder the caller made
# (dtype and shape in the JSON answer, bytes read back with no unpickling).
def reference_case(payload: dict) -> dict:
    import torch

    from ..evaluate.correctness import normalize_reference_outputs
    from ..evaluate.inputs import InputFactory, clone_inputs
    from ..evaluate.reference import Fp4Shim, load_reference, needs_fp4_dequant
    from ..problem.loader import problem_from_json, resolve_at

    problem = problem_from_json(payload["problem"])
    defn = problem.definition
    rw0 = next(w for w in problem.workloads if w.uuid == payload["uuid"])
    rw = resolve_at(defn, rw0.workload.model_copy(update={"axes": payload["axes"]}), "<check>", None)
    if needs_fp4_dequant(defn) and not isinstance(torch._scaled_mm, Fp4Shim):
        # what the evaluator runs where FP4 _scaled_mm is unavailable (the CPU here, Hopper there)
        Fp4Shim().install()
    _use_cuda_topk_order(torch)
    code_dir = Path(payload["folder"]) / "reference"  # the caller's folder: removed with it
    code_dir.mkdir(exist_ok=True)
    mod = load_reference(defn, code_dir, "_check_ref")
    custom = getattr(mod, defn.custom_inputs_entrypoint, None) if defn.custom_inputs_entrypoint else None
    inputs = InputFactory(rw, "cpu", custom_fn=custom).make(0)
    with torch.no_grad():
        ref = mod.run(**clone_inputs(inputs))
    refs = normalize_reference_outputs(ref, rw, "cpu")
    folder = Path(payload["folder"])
    tensors = {k: v for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    scalars = {k: v for k, v in inputs.items() if not isinstance(v, torch.Tensor)}
    ans = {"inputs": _save(folder, "in", tensors), "refs": _save(folder, "ref", refs),
           "scalars": {k: (v.item() if hasattr(v, "item") else v) for k, v in scalars.items()}}
    if payload.get("float64"):
        # the same reference on the same values held in float64 (casts the reference makes itself
        # still happen), rounded to each output's dtype: the best answer that dtype can hold
        wide = {k: v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v
                for k, v in clone_inputs(inputs).items()}
        try:
            with torch.no_grad():
                ref64 = mod.run(**wide)
        except RuntimeError:
            # a reference that casts to a dtype it names (x.to(torch.bfloat16)) and then mixes the
            # result with float64 tensors cannot run as it is: then every floating dtype it names
            # is float64 (its module's `torch` answers float64 for them), the same code held wide
            ans["widened"] = True
            wide = {k: v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v
                    for k, v in clone_inputs(inputs).items()}  # afresh: the failed run may have written
            with torch.no_grad(), _named_dtypes_wide(mod, torch):
                ref64 = mod.run(**wide)
        outs64 = ref64 if isinstance(ref64, (tuple, list)) else (ref64,)
        names = list(defn.outputs)
        if isinstance(ref64, dict):
            outs64 = [ref64[k] for k in names]
        ans["refs64"] = _save(folder, "wide", {k: t.to(refs[k].dtype) for k, t in zip(names, outs64)
                                               if isinstance(t, torch.Tensor) and k in refs})
    return ans


class _WideTorch:
    """A reference module's `torch` whose floating dtypes are all float64 (everything else is torch)."""

    def __init__(self, torch):
        self._torch = torch

    def __getattr__(self, name):
        v = getattr(self._torch, name)
        if isinstance(v, self._torch.dtype) and v.is_floating_point:
            return self._torch.float64
        return v


class _named_dtypes_wide:
    """Within it, the module's global `torch` (and a `from torch import bfloat16`-style name) is the
    widened one."""

    def __init__(self, mod, torch):
        self.mod, self.torch, self.saved = mod, torch, {}

    def __enter__(self):
        g = vars(self.mod)
        for k, v in list(g.items()):
            if v is self.torch:
                self.saved[k] = v
                g[k] = _WideTorch(self.torch)
            elif isinstance(v, self.torch.dtype) and v.is_floating_point:
                self.saved[k] = v
                g[k] = self.torch.float64
        return self

    def __exit__(self, *exc):
        vars(self.mod).update(self.saved)
        return False


def _use_cuda_topk_order(torch) -> None:
    """topk(sorted=False) on the CPU gives its elements in another order than on CUDA, where the
    evaluator runs the reference, and indices are compared element by element: here it gives CUDA's
    order (ATen's gatherTopK: better than the k-th value in index order, then ties in index order),
    so that the check predicts the GPU's verdict. Sorted topk is left alone."""
    if getattr(torch.topk, "_solforge_cuda_order", False):
        return
    plain = torch.topk

    def topk(x, k, dim=-1, largest=True, sorted=True, *, out=None):  # noqa: A002 - torch's name
        if sorted or out is not None or x.dim() == 0:
            return plain(x, k, dim, largest, sorted, out=out) if out is not None else \
                plain(x, k, dim, largest, sorted)
        vals, _ = plain(x, k, dim, largest, True)
        kth = vals.narrow(dim, k - 1, 1)
        n = x.shape[dim]
        shape = [1] * x.dim()
        shape[dim] = n
        pos = torch.arange(n, device=x.device).view(shape).expand_as(x)
        better = x > kth if largest else x < kth
        key = torch.where(better, pos, torch.where(x == kth, pos + n, pos + 2 * n))
        idx = key.argsort(dim=dim, stable=True).narrow(dim, 0, k)
        return torch.return_types.topk((x.gather(dim, idx), idx))

    topk._solforge_cuda_order = True
    torch.topk = topk
    torch.Tensor.topk = lambda self, *a, **kw: topk(self, *a, **kw)


def _save(folder: Path, prefix: str, tensors: dict) -> dict:
    out = {}
    for i, (name, t) in enumerate(tensors.items()):
        f = f"{prefix}{i}.bin"
        flat = t.detach().contiguous().reshape(-1)
        (folder / f).write_bytes(flat.view(torch_uint8()).numpy().tobytes() if flat.numel() else b"")
        out[name] = {"file": f, "dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape)}
    return out


def torch_uint8():
    import torch

    return torch.uint8


def _load(folder: Path, manifest: dict) -> dict:
    """Tensors back from the sandbox's files; a dtype that is not a torch dtype, a name that is not a
    file of this folder, or a byte count that does not match the shape is refused."""
    import torch

    out = {}
    for name, m in manifest.items():
        dt = getattr(torch, str(m.get("dtype")), None)
        f = str(m.get("file", ""))
        if not isinstance(dt, torch.dtype) or "/" in f or not f or f.startswith("."):
            raise ValueError(f"reference output {name!r}: bad tensor description")
        shape = [int(x) for x in m.get("shape", [])]
        data = (folder / f).read_bytes()
        n = 1
        for x in shape:
            n *= x
        if len(data) != n * torch.empty((), dtype=dt).element_size():
            raise ValueError(f"reference output {name!r}: {len(data)} bytes for shape {shape}")
        raw = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
        out[name] = raw.view(dt).reshape(shape)
    return out


# ---- in the caller ----------------------------------------------------------------------------------
def _reference_answer(problem, cap: Optional[int], folder: Path, timeout_s: float,
                      float64: bool = False, uuid: Optional[str] = None):
    """The workload (the smallest, shrunk to `cap`; or the one `uuid` names, at full size when cap
    is None) and the sandboxed reference's answer for it (reference_case), its tensors as files in
    `folder`. Raises SandboxError when the reference fails."""
    from ..problem.loader import problem_to_json, resolve_at
    from ..sandbox import Limits, run_python

    if uuid is not None:
        rw0 = next((w for w in problem.workloads if w.uuid == uuid), None)
        if rw0 is None:
            raise ValueError(f"no workload {uuid!r} in {problem.name}")
    else:
        rw0 = min(problem.workloads, key=lambda w: sum(int(v) for v in w.axes.values()))
    rw = shrink(problem.definition, rw0, cap) if cap is not None else \
        resolve_at(problem.definition, rw0.workload, "<check>", None)
    src = Path(problem.source) if problem.source and "://" not in problem.source else None
    reads = [str(src if src.is_dir() else src.parent)] if src is not None and src.exists() else []
    payload = {"problem": problem_to_json(problem), "uuid": rw0.uuid,
               # the shrunk workload's own axes (a custom-inputs entrypoint may read an axis the
               # definition does not declare)
               "axes": dict(rw.workload.axes), "folder": str(folder)}
    if float64:
        payload["float64"] = True
    ans = run_python("solforge.compiler.check", "reference_case", payload, timeout_s=timeout_s,
                     binds=(str(folder),), read_paths=reads,
                     # constant dims stay full size when var axes shrink: a weight can pass the
                     # default 256 MiB file limit
                     limits=Limits(fsize_bytes=16 << 30))
    return rw, ans


def check_problem(problem, cap: int = 8, candidate=None, timeout_s: float = 300.0,
                  uuid: Optional[str] = None) -> dict:
    """The candidate (default: the compiler's plan) emulated on the CPU at a shrunk workload (the
    smallest, or the one `uuid` names) and compared with the reference (run in the sandbox) under
    the workload's tolerance."""
    import shutil

    from ..evaluate.correctness import allocate_outputs, compare_all
    from ..sandbox import SandboxError
    from .api import compile_problem
    from .emulate import emulate

    if candidate is None:
        out = compile_problem(problem)
        if not out.ok:
            return {"ok": False, "stage": out.stage, "reason": out.reason}
        candidate = out.candidate
    folder = Path(tempfile.mkdtemp(prefix="solforge_check_"))
    try:
        try:
            rw, ans = _reference_answer(problem, cap, folder, timeout_s, uuid=uuid)
        except SandboxError as e:
            return {"ok": False, "stage": "reference", "reason": f"reference run failed: {e}"}
        try:
            inputs = _load(folder, ans["inputs"])
            refs = _load(folder, ans["refs"])
        except (KeyError, TypeError, ValueError, OSError) as e:
            return {"ok": False, "stage": "reference", "reason": f"reference gave no usable tensors: {e}"}
        outs = allocate_outputs(rw, "cpu")
        tensors = {k: v.contiguous() for k, v in inputs.items()}
        tensors.update(outs)
        emulate(candidate, tensors, rw.axes, dict(ans.get("scalars") or {}))
        cmp = compare_all(outs, refs, rw.workload.tolerance)
        return {"ok": bool(cmp.ok), "stage": "check", "reason": cmp.reason,
                "max_abs_err": cmp.max_abs_err, "axes": rw.axes}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def reference_conditioning(problem, cap: Optional[int] = 16, timeout_s: float = 300.0,
                           uuid: Optional[str] = None) -> dict:
    """Is the reference within its own tolerance of itself evaluated in float64 (at the shrunk
    workload check_problem uses, or at workload `uuid`, full size when cap is None)? Where it is not
    (activations that grow layer after layer, long fp32 sums), any kernel that adds in another order
    fails some elements for the same reason, however right it is: such a wrong-answer verdict says
    more about the problem than the kernel. Conditioning can depend on size (a sum over millions of
    terms against an absolute tolerance): a shrunk workload can pass where the full one does not."""
    import shutil

    from ..evaluate.correctness import compare_all
    from ..sandbox import SandboxError

    if uuid is not None and not any(w.uuid == uuid for w in problem.workloads):
        return {"ok": False, "stage": "workload", "reason": f"no workload {uuid!r} in {problem.name}"}
    folder = Path(tempfile.mkdtemp(prefix="solforge_cond_"))
    try:
        try:
            rw, ans = _reference_answer(problem, cap, folder, timeout_s, float64=True, uuid=uuid)
            refs, wide = _load(folder, ans["refs"]), _load(folder, ans["refs64"])
        except SandboxError as e:
            return {"ok": False, "stage": "reference", "reason": f"reference run failed: {e}"}
        except (KeyError, TypeError, ValueError, OSError) as e:
            return {"ok": False, "stage": "reference", "reason": f"reference gave no usable tensors: {e}"}
        if set(wide) != set(refs):
            return {"ok": False, "stage": "reference",
                    "reason": "the float64 run did not give every output back"}
        cmp = compare_all(refs, wide, rw.workload.tolerance)
        return {"ok": bool(cmp.ok), "stage": "float64", "well_conditioned": bool(cmp.ok),
                "reason": cmp.reason, "max_abs_err": cmp.max_abs_err, "axes": rw.axes,
                "matched_ratio": cmp.matched_ratio,
                # the float64 run held the dtypes the reference names (its own casts) wide too
                "widened": bool(ans.get("widened"))}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _one(path: str, cap: int, emitted, float64: bool = False, timeout_s: float = 300.0,
         workloads: Optional[list] = None):
    """One problem's JSON row (or rows: one per named workload with --float64 --workload)."""
    from ..candidate import Candidate
    from ..problem.loader import load_problem_dir

    try:
        p = load_problem_dir(Path(path))
        # each named workload (or every one: "all"), one line each
        uuids = ([w.uuid for w in p.workloads] if "all" in workloads else list(workloads)) \
            if workloads else []
        if float64 and uuids:   # at full size
            rows = []
            for u in uuids:
                r = reference_conditioning(p, None, timeout_s=timeout_s, uuid=u)
                r["problem"], r["subset"], r["workload"] = p.name, p.subset, u
                rows.append(r)
            return rows
        if float64:
            r = reference_conditioning(p, cap, timeout_s=timeout_s)
            r["problem"], r["subset"] = p.name, p.subset
            return r
        cand = None
        if emitted:
            found = sorted(Path(emitted).glob(f"*__{p.name}.json"))
            f = found[0] if found else None
            if f is None:
                return {"problem": p.name, "ok": False, "stage": "none", "reason": "no candidate"}
            cand = Candidate.model_validate(json.loads(f.read_text()))
        if uuids:   # each shrunk to cap
            rows = []
            for u in uuids:
                r = check_problem(p, cap, candidate=cand, timeout_s=timeout_s, uuid=u)
                r["problem"], r["subset"], r["workload"] = p.name, p.subset, u
                rows.append(r)
            return rows
        r = check_problem(p, cap, candidate=cand)
        r["problem"] = p.name
        r["subset"] = p.subset
    except Exception as e:  # noqa: BLE001 - one line per problem
        r = {"problem": Path(path).name, "ok": False, "stage": "error",
             "reason": f"{type(e).__name__}: {str(e)[:300]}"}
    return r


def main(argv=None) -> int:
    """Check each problem dir in a forked child with a timeout; one JSON line each."""
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("problems", nargs="+", help="problem directories")
    ap.add_argument("--cap", type=int, default=8)
    ap.add_argument("--emitted", default=None, help="read candidates from `coverage --emit` here")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--jsonl", default=None)
    ap.add_argument("--float64", action="store_true",
                    help="check the reference against its own float64 evaluation instead of a "
                         "candidate (a reference that fails this is ill-conditioned at its tolerance)")
    ap.add_argument("--workload", nargs="+", default=None, metavar="UUID",
                    help="these workloads (or 'all') instead of the smallest one: shrunk to --cap, "
                         "with --float64 at full size")
    a = ap.parse_args(argv)
    import torch  # noqa: F401 - forked children start with it

    from ..forked import run_forked

    for path in a.problems:
        got = run_forked(_one, (path, a.cap, a.emitted, a.float64, a.timeout, a.workload), a.timeout)
        if got.ok:
            r = got.value
        elif got.timed_out:
            r = {"problem": Path(path).name, "ok": False, "stage": "timeout", "reason": "timeout"}
        else:   # _one answers its own errors: no answer is a crash
            r = {"problem": Path(path).name, "ok": False, "stage": "crash", "reason": got.why}
        for one in (r if isinstance(r, list) else [r]):
            line = json.dumps(one, default=str)
            print(line, flush=True)
            if a.jsonl:
                with open(a.jsonl, "a") as f:
                    f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
