"""Precompiled CuTe DSL cubins for machines without the DSL (the GPU box).

The CuTe DSL (nvidia-cutlass-dsl, ~92 MB of libraries) lives only on the CPU machine, yet the
evaluator's own path (`solforge evaluate`, the optimize loop) calls compile_candidate on whatever
machine it runs on. On the box that compile used to fail ("the CuTe DSL is not importable here") and
left a manifest with no entries, so the launcher then said "kernel 'rmsnorm_cute' has no entry in the
compile manifest" (the #10 export check on the H200). The compile cache does not help: its key holds
the compiler version, which reads "missing" where the DSL is not installed.

So the CPU side writes the compile's output here, keyed by what determines the cubin apart from the
compiler version (sources, params, options, arch, launches):

    write_prebuilt(root, candidate, compile_result)   # CPU machine, after a real DSL compile

and the cute compile worker, when it cannot import the DSL, answers from these folders instead
(lookup_job). Roots: $SOLFORGE_CUTE_PREBUILT (os.pathsep-separated) then <cache_dir>/cute_prebuilt.
A candidate nobody precompiled still fails, with a message naming its key and the folders searched.

Layout: <root>/<key>/prebuilt.json (entries, options, compiler version, sha256 per cubin) + cubins.
Every cubin is checked against its recorded sha256 and the job's arch before it is handed out.
Stdlib only: this runs in the compile worker on the bare box.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

ENV = "SOLFORGE_CUTE_PREBUILT"
_LAUNCH_KEYS = ("kernel", "grid", "block", "smem", "args", "cluster")


def prebuilt_key(candidate: dict, arch: str) -> str:
    """Key of a cute compile, from a Candidate dict (model_dump) or an api.compile_candidate job
    (same field names): everything that shapes the cubin except the compiler version."""
    launches = [{k: (launch.get(k) if k != "smem" else str(launch.get(k, "0"))) for k in _LAUNCH_KEYS}
                for launch in candidate["launches"]]
    payload = {"sources": candidate["sources"], "params": candidate.get("params", {}),
               "options": list(candidate.get("options", [])), "arch": arch, "launches": launches,
               "v": 1}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def roots(extra=None) -> list[Path]:
    out = [Path(p) for p in (extra or [])]
    out += [Path(p) for p in os.environ.get(ENV, "").split(os.pathsep) if p]
    try:
        from .. import settings

        out.append(Path(settings.get().cache_dir) / "cute_prebuilt")
    except Exception:  # noqa: BLE001 - no settings: the env folders alone
        pass
    return list(dict.fromkeys(out))


def _safe(unit: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", unit) + ".cubin"


def write_prebuilt(root, candidate, result) -> Path:
    """Store a successful cute CompileResult for `candidate` under root/<key>/; returns that folder."""
    cand = candidate.model_dump() if hasattr(candidate, "model_dump") else dict(candidate)
    if cand.get("language") != "cute":
        raise ValueError("only CuTe DSL candidates are precompiled (CUDA C++ compiles with NVRTC "
                         "on every machine)")
    if not result.ok:
        raise ValueError(f"cannot precompile a failed compile (status {result.status.value})")
    key = prebuilt_key(cand, result.arch)
    final = Path(root) / key
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key[:8]}-", dir=final.parent))
    files, shas = {}, {}
    for unit, blob in result.cubins.items():
        files[unit] = _safe(unit)
        shas[unit] = hashlib.sha256(blob).hexdigest()
        (tmp / files[unit]).write_bytes(blob)
    meta = {"key": key, "arch": result.arch, "compiler": result.compiler,
            "compiler_version": result.compiler_version, "options": list(result.options),
            "entries": {k: v.model_dump() if hasattr(v, "model_dump") else v
                        for k, v in result.entries.items()},
            "cubins": files, "sha256": shas, "cubin_hash": result.cubin_hash,
            "problem": cand.get("problem", ""), "notes": cand.get("notes", ""),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (tmp / "prebuilt.json").write_text(json.dumps(meta, indent=1))
    if final.exists():
        shutil.rmtree(final, ignore_errors=True)
    try:
        os.rename(tmp, final)
    except OSError:  # another writer of the same key won the race: same content
        shutil.rmtree(tmp, ignore_errors=True)
        if not (final / "prebuilt.json").is_file():
            raise
    return final


def _load(folder: Path, arch: str) -> dict:
    """The worker's result dict from one prebuilt folder; raises ValueError if it does not check."""
    from .elf import read_cubin, sm_of_arch

    meta = json.loads((folder / "prebuilt.json").read_text())
    if meta.get("arch") != arch:
        raise ValueError(f"{folder}: built for {meta.get('arch')}, not {arch}")
    cubins = {}
    for unit, fname in meta["cubins"].items():
        blob = (folder / fname).read_bytes()
        if hashlib.sha256(blob).hexdigest() != meta["sha256"].get(unit):
            raise ValueError(f"{folder / fname}: sha256 differs from prebuilt.json (damaged copy)")
        info = read_cubin(blob)
        if info.sm != sm_of_arch(arch):
            raise ValueError(f"{folder / fname}: cubin targets sm_{info.sm}, not {arch}")
        cubins[unit] = blob
    for name, e in meta["entries"].items():
        if e.get("unit") not in cubins:
            raise ValueError(f"{folder}: entry {name!r} names unit {e.get('unit')!r}, which has no cubin")
    return {"status": "ok", "cubins": cubins, "entries": meta["entries"],
            "options": list(meta.get("options", [])) + [f"prebuilt: {meta.get('compiler_version', '?')}"],
            "log": f"solforge: precompiled CuTe DSL cubin {meta['key'][:16]} "
                   f"({meta.get('compiler_version', '?')}, {meta.get('created', '?')}) from {folder}",
            "compile_seconds": 0.0}


def lookup_job(job: dict, missing: str, extra_roots=None) -> dict:
    """What the cute worker answers when the DSL is missing: the precompiled result for this job,
    or an error that says why (the DSL message, the key, the folders searched)."""
    t0 = time.perf_counter()
    key = prebuilt_key(job, job["arch"])
    searched, problems = [], []
    for root in roots(extra_roots):
        folder = root / key
        searched.append(str(root))
        if not (folder / "prebuilt.json").is_file():
            continue
        try:
            out = _load(folder, job["arch"])
        except (OSError, ValueError, KeyError, json.JSONDecodeError) as e:
            problems.append(str(e))
            continue
        out["compile_seconds"] = time.perf_counter() - t0
        return out
    why = ("; ".join(problems) + "; ") if problems else ""
    # no_cache: the folder may be carried later; a cached error would hide it (api.compile_candidate)
    return {"status": "error", "cubins": {}, "entries": {}, "options": [], "no_cache": True,
            "compile_seconds": time.perf_counter() - t0,
            "log": f"{missing}\nsolforge: {why}no precompiled cubin for this CuTe candidate "
                   f"(key {key}) in {searched or ['(no folders)']}; compile it where the DSL is "
                   f"installed and carry the folder: solforge.compile.cute_prebuilt.write_prebuilt "
                   f"or `python benchmarks/cute_eval_gpu.py prebuild` (set ${ENV} to it)"}


__all__ = ["ENV", "prebuilt_key", "roots", "write_prebuilt", "lookup_job"]
