"""The evaluator's process entry: `python -m solforge.evaluate.driver STAGE_DIR`.

Runs in a freshly spawned process per candidate (see runner.py). Reads STAGE_DIR/job.json,
definition.json, workload.jsonl and the candidate (candidate.json + manifest.json + cubins, or
host.py), and writes JSON lines to its real stdout: one "hardware" line, then per workload a "start"
line and a "result" line (an EvalResult), then "done". Anything the candidate or a library prints goes
to stderr: stdout is reserved before torch is imported.

If a workload loses the CUDA context (illegal address and other sticky errors), the remaining
workloads are reported as skipped and the process exits with code 3.
"""

from __future__ import annotations

import os
import sys

# Reserve the real stdout for JSON lines before anything (torch, the candidate) can print to it.
_OUT_FD = os.dup(1)
os.dup2(2, 1)
_OUT = os.fdopen(_OUT_FD, "w", buffering=1)

import json  # noqa: E402
from pathlib import Path  # noqa: E402


def emit(kind: str, **payload) -> None:
    from .results import dumps_line

    _OUT.write(dumps_line({"type": kind, **payload}) + "\n")
    _OUT.flush()


def load_job(stage: Path):
    from ..problem.loader import load_definition, load_workloads

    job = json.loads((stage / "job.json").read_text())
    defn = load_definition(stage / "definition.json")
    workloads = load_workloads(stage / "workload.jsonl", defn)
    wanted = job.get("workloads")
    if wanted:
        order = {u: i for i, u in enumerate(wanted)}
        workloads = sorted((w for w in workloads if w.uuid in order), key=lambda w: order[w.uuid])
    return job, defn, workloads


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m solforge.evaluate.driver STAGE_DIR", file=sys.stderr)
        return 2
    stage = Path(argv[0]).resolve()
    job, defn, workloads = load_job(stage)

    import torch

    from . import guards, hardware
    from .evaluator import EvalConfig, Env, classify_exception, context_alive, evaluate_workload
    from .reference import DEQUANT_LABEL, Fp4Shim, load_reference, needs_fp4_dequant
    from .results import EvalResult, EvalStatus

    problem = job.get("problem") or defn.name
    config = EvalConfig.from_dict(job.get("settings", {}))
    if torch.cuda.is_available():
        device = torch.device("cuda", 0)
        torch.cuda.set_device(device)
    else:  # CPU: correctness of host candidates only (how CI exercises the process machinery)
        device = torch.device("cpu")
        config.timing = False
    torch.backends.cuda.matmul.allow_tf32 = False  # references are fp32 ground truth
    torch.backends.cudnn.allow_tf32 = False
    emit("hardware", **hardware.capture(device).__dict__)

    def fail_all(status, message, from_index=0):
        for w in workloads[from_index:]:
            emit("result", **EvalResult(w.uuid, status, problem=problem, message=message).to_json())

    ref_mod = load_reference(defn, stage)
    label = ""
    if needs_fp4_dequant(defn):
        Fp4Shim().install()
        label = DEQUANT_LABEL
    custom_fn = getattr(ref_mod, defn.custom_inputs_entrypoint) if defn.custom_inputs_entrypoint \
        else None
    kind = job.get("candidate_kind", "cuda")
    integrity = guards.Integrity()  # before any candidate code is loaded
    try:
        if kind == "host":
            from .callers import HostCaller

            caller = HostCaller(stage, device, allow_torch=bool(job.get("allow_torch", False)))
        else:
            from .callers import CudaCaller

            caller = CudaCaller(stage, device)
    except Exception as e:  # noqa: BLE001
        status, msg = classify_exception(e)
        fail_all(status, f"loading the candidate failed: {msg}")
        emit("done")
        return 0
    roots = [stage] + [Path(p) for p in job.get("blob_roots", [])]
    env = Env(problem=problem, reference=ref_mod.run, caller=caller, device=device, config=config,
              integrity=integrity, custom_fn=custom_fn, blob_roots=roots,
              t_sol_ms=job.get("t_sol_ms", {}), reference_label=label)
    for i, w in enumerate(workloads):
        emit("start", uuid=w.uuid, index=i)
        res = evaluate_workload(env, w)
        emit("result", **res.to_json())
        if res.extra.get("context_lost"):
            fail_all(EvalStatus.SKIPPED, f"not evaluated: workload {w.uuid} lost the CUDA context "
                                         f"({res.message[:200]})", i + 1)
            emit("done", context_lost=True)
            os._exit(3)  # the context is unusable; skip atexit handlers that would touch it
        if i + 1 < len(workloads) and not context_alive(device):
            fail_all(EvalStatus.SKIPPED, "not evaluated: the CUDA context was lost", i + 1)
            emit("done", context_lost=True)
            os._exit(3)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    emit("done")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
