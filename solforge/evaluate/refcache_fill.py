"""The filling side of the reference-output cache (refcache.py): a trusted process of its own, no
candidate code anywhere near it (`python -m solforge.evaluate.refcache_fill fill STAGE CACHE_DIR`).
Its own module because it drives the evaluator's pieces (driver.load_job, evaluator.EvalConfig),
while refcache.py's reader is used by the driver and the guards and must not import them back."""

from __future__ import annotations

import io
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Optional

from .refcache import entry_key, fingerprint, inputs_version, reference_hash, sha256_bytes


class _TooSlow(Exception):
    pass


def _alarm(seconds: float):
    def handler(signum, frame):
        raise _TooSlow(f"the reference ran over {seconds:.0f} s")
    signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))


def _no_alarm():
    signal.setitimer(signal.ITIMER_REAL, 0)


def planned_seeds(cfg, rw, set_bytes: int, probe_seeds: list[int]) -> list[int]:
    """The input-set seeds a candidate evaluation under `cfg` checks against the reference, in the
    order the evaluator uses them (evaluator._evaluate / _time / _probe_caching)."""
    from .evaluator import timing_set_count

    rounds = max(cfg.correctness_rounds, 1)
    seeds = list(range(rounds))
    if cfg.timing:
        n_sets = timing_set_count(cfg, set_bytes)
        last = 100 + n_sets - 1 if n_sets > 1 else rounds - 1
        if last not in seeds:
            seeds.append(last)
        if cfg.caching_probe and cfg.caching_probe_calls > 0:
            seeds += list(probe_seeds)
    return seeds


def fill(stage: Path, cache_dir: Path, *, probe: int = 2, max_ref_s: float = 120.0,
         budget_s: Optional[float] = None) -> dict:
    """Fill the cache for the staged problem (definition.json, workload.jsonl, job.json settings).
    Returns the summary the orchestrator keeps: {"entries", "probe_seeds", "unfillable", "seconds",
    "key_parts"}. A workload whose reference call runs over max_ref_s (or that is reached after
    budget_s) is listed in "unfillable" with the reason and has no entries."""
    import torch

    from .caching_probe import fresh_seed
    from .correctness import normalize_reference_outputs
    from .driver import load_job
    from .evaluator import EvalConfig
    from .inputs import InputFactory, clone_inputs
    from .reference import Fp4Shim, load_reference, needs_fp4_dequant

    t_start = time.monotonic()
    stage, cache_dir = Path(stage).resolve(), Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(cache_dir, 0o700)
    job, defn, workloads = load_job(stage)
    problem = job.get("problem") or defn.name
    cfg = EvalConfig.from_dict(job.get("settings", {}))
    if torch.cuda.is_available():
        device = torch.device("cuda", 0)
        torch.cuda.set_device(device)
        name = torch.cuda.get_device_name(device)
    else:
        device, name = torch.device("cpu"), "cpu"
        cfg.timing = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    ref_dir = stage / "refcache_fill"
    ref_mod = load_reference(defn, ref_dir)
    if needs_fp4_dequant(defn):
        Fp4Shim().install()
    custom_fn = getattr(ref_mod, defn.custom_inputs_entrypoint) if defn.custom_inputs_entrypoint \
        else None
    roots = [stage] + [Path(p) for p in job.get("blob_roots", [])]
    parts = {"inputs_version": inputs_version(), "reference_hash": reference_hash(defn.reference),
             "torch": torch.__version__, "device": name}
    summary: dict = {"entries": {}, "probe_seeds": {}, "unfillable": {}, "seconds": {},
                     "key_parts": parts, "problem": problem}
    for rw in workloads:
        if budget_s is not None and time.monotonic() - t_start > budget_s:
            summary["unfillable"][rw.uuid] = f"fill budget of {budget_s:.0f} s spent"
            continue
        tw = time.monotonic()
        try:
            factory = InputFactory(rw, device, custom_fn=custom_fn, blob_roots=roots)
            first = factory.make(0)
            from .correctness import allocate_outputs

            outs = allocate_outputs(rw, device, 0)
            set_bytes = max(_nbytes(first) + _nbytes(outs), 1)
            del first, outs
            pool = [fresh_seed() for _ in range(max(probe, 0))]
            seeds = planned_seeds(cfg, rw, set_bytes, pool)
            ents = {}
            for s in seeds:
                inputs = factory.make(s)
                fp = fingerprint(inputs)
                args = [clone_inputs(inputs)[k] for k in rw.definition.inputs]
                _alarm(max_ref_s)
                try:
                    with torch.no_grad():
                        raw = ref_mod.run(*args)
                    if device.type == "cuda":
                        torch.cuda.synchronize(device)
                finally:
                    _no_alarm()
                ref = normalize_reference_outputs(raw, rw, device)
                key = entry_key(problem, rw.uuid, s, parts["inputs_version"], parts["reference_hash"],
                                parts["torch"], name)
                buf = io.BytesIO()
                torch.save({"key": key, "seed": int(s), "fingerprint": fp,
                            "outputs": {k: v.detach().cpu() for k, v in ref.items()}}, buf)
                blob = buf.getvalue()
                path = cache_dir / f"{key}.pt"
                tmp = cache_dir / f".{key}.{os.getpid()}.tmp"
                tmp.write_bytes(blob)
                os.chmod(tmp, 0o400)
                os.replace(tmp, path)
                ents[str(int(s))] = {"key": key, "sha256": sha256_bytes(blob), "bytes": len(blob)}
                del inputs, args, raw, ref
            summary["entries"][rw.uuid] = ents
            summary["probe_seeds"][rw.uuid] = pool
        except _TooSlow as e:
            summary["unfillable"][rw.uuid] = str(e)
        except Exception as e:  # noqa: BLE001 - the reference's own failure: live (and SKIPPED) later
            summary["unfillable"][rw.uuid] = f"{type(e).__name__}: {e}"[:300]
        summary["seconds"][rw.uuid] = round(time.monotonic() - tw, 3)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    summary["total_s"] = round(time.monotonic() - t_start, 3)
    return summary


def _nbytes(d: dict) -> int:
    import torch

    return sum(v.numel() * v.element_size() for v in d.values() if isinstance(v, torch.Tensor))




def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m solforge.evaluate.refcache_fill")
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fill")
    f.add_argument("stage")
    f.add_argument("cache_dir")
    f.add_argument("--probe", type=int, default=2)
    f.add_argument("--max-ref-s", type=float, default=120.0)
    f.add_argument("--budget-s", type=float, default=None)
    a = ap.parse_args(argv)
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # stdout is the summary's alone
    summary = fill(Path(a.stage), Path(a.cache_dir), probe=a.probe, max_ref_s=a.max_ref_s,
                   budget_s=a.budget_s)
    out.write(json.dumps(summary) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    _rc = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_rc)
