"""CLI: doctor: what this machine can do (GPU, driver, torch, NVRTC, CuTe DSL, store, Prefect)."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("doctor", help="check this machine: GPU, driver, torch CUDA build, NVRTC, "
                                      "CuTe DSL, the store, the Prefect API (one line each)")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..doctor import run_checks
    from .output import emit_json

    checks = run_checks(args.db)
    if args.json:
        emit_json([c.to_json() for c in checks])
    else:
        for c in checks:
            print(c.line())
        gpu_ok = all(c.ok for c in checks if c.needed_for == "evaluate")
        print("GPU commands (evaluate, replay, baseline, optimize --gpus): "
              + ("ready" if gpu_ok else "not on this machine") + "; CPU commands (ingest, sol, "
              "compile, optimize --gpus '', report, export): "
              + ("ready" if all(c.ok for c in checks if c.name == "NVRTC") else "need NVRTC"))
    # exit status: 0 when the CPU side can compile (a CPU-only box is a normal setup; a missing store
    # is created by the first ingest)
    return 0 if all(c.ok for c in checks if c.needed_for == "compile") else 1


def require_gpu(command: str) -> None:
    """Refuse a GPU command on a machine without a usable GPU: one line, before anything is written."""
    from ..doctor import gpu_problem
    from ..errors import SolforgeError

    why = gpu_problem()
    if why:
        raise SolforgeError(f"{command} needs a CUDA GPU: {why}; nothing was run or stored "
                            "(`solforge doctor` lists what this machine has)")
