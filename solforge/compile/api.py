"""compile_candidate: Candidate -> CompileResult (cubins per source unit), cached on disk."""

from __future__ import annotations

import time
from functools import lru_cache
from pathlib import Path

from .. import settings as settings_mod
from ..candidate import Candidate
from ..provenance import dist_version
from ..sandbox.redact import scrub
from .cache import CompileCache, cache_key
from .result import CompileResult, CompileStatus, KernelEntry

DEFAULT_TIMEOUT_S = 120.0


@lru_cache(maxsize=None)
def compiler_identity(language: str) -> tuple[str, str]:
    """(compiler name, version string) from the installed wheels; no library is loaded for this."""
    def v(dist: str) -> str:
        return dist_version(dist, "missing")

    if language == "cute":
        return "cutlass-dsl", f"nvidia-cutlass-dsl {v('nvidia-cutlass-dsl')}"
    return "nvrtc", (f"nvidia-cuda-nvrtc {v('nvidia-cuda-nvrtc')}; headers: nvidia-cuda-runtime "
                     f"{v('nvidia-cuda-runtime')}, nvidia-cuda-cccl {v('nvidia-cuda-cccl')}")


def _refused(cand: Candidate, why: str, arch: str, compiler: str, version: str, t0: float) -> CompileResult:
    res = CompileResult(status=CompileStatus.invalid, log=scrub(why), cubins={}, entries={},
                        cubin_hash=CompileResult.hash_cubins({}), compiler=compiler,
                        compiler_version=version, arch=arch, options=[], cache_key="", cache_hit=False,
                        source_hash=cand.source_hash(), compile_seconds=0.0)
    res.seconds = time.perf_counter() - t0
    return res


def compile_candidate(candidate: Candidate | dict, arch: str | None = None, *, use_cache: bool = True,
                      timeout_s: float | None = None, cache_dir=None, pch: bool | None = None,
                      expect_language: str | None = None) -> CompileResult:
    """Compile every source unit of a candidate for `arch` (default settings.arch, "sm_90a").

    CUDA C++ units reuse NVRTC precompiled headers kept in <cache_dir>/nvrtc_pch (see pch.py), also
    when use_cache is False (that switch is about finished results); pch=False (or the setting
    nvrtc_pch=False) compiles without them. The cubins are the same either way.

    Never raises for a bad candidate source: the result's status is error/timeout and `log` holds the
    compiler's words verbatim, with secrets scrubbed (sandbox.scrub) before the log is cached or
    returned. Raises pydantic's ValidationError if `candidate` is not a Candidate.

    Refused before any compiler sees them (status invalid): a candidate whose language is not
    `expect_language` (the language the run asked for: a model asked for CUDA must not get its
    Python executed by answering "cute"), and CUDA sources whose #include lines reach outside the
    toolchain's headers and the candidate's own files (nvrtc_backend.check_includes).
    """
    t0 = time.perf_counter()
    cand = candidate if isinstance(candidate, Candidate) else Candidate.model_validate(candidate)
    cfg = settings_mod.get()
    arch = arch or cfg.arch
    timeout_s = timeout_s or float(getattr(cfg, "compile_timeout_s", DEFAULT_TIMEOUT_S))
    compiler, version = compiler_identity(cand.language)
    if expect_language is not None and cand.language != expect_language:
        return _refused(cand, f"solforge: the run asked for a {expect_language!r} candidate, got language "
                        f"{cand.language!r}; refused without compiling", arch, compiler, version, t0)
    if cand.language != "cute":
        from .nvrtc_backend import check_includes

        bad = check_includes(cand.sources)
        if bad:
            return _refused(cand, "solforge: " + "\nsolforge: ".join(bad), arch, compiler, version, t0)
    kernels = [launch.kernel for launch in cand.launches]
    key = cache_key(language=cand.language, sources=cand.sources, params=cand.params,
                    options=cand.options, arch=arch, compiler_version=version, kernels=kernels,
                    launch_args=[[launch.kernel, launch.args] for launch in cand.launches])
    cache = CompileCache(cache_dir or cfg.cache_dir) if use_cache else None
    if cache is not None:
        hit = cache.get(key)
        if hit is not None:
            hit.seconds = time.perf_counter() - t0
            hit.source_hash = cand.source_hash()
            return hit

    job = {"sources": cand.sources, "params": cand.params, "options": cand.options, "arch": arch,
           "kernels": kernels, "launches": [launch.model_dump() for launch in cand.launches],
           "timeout_s": timeout_s}
    if cand.language != "cute" and (getattr(cfg, "nvrtc_pch", True) if pch is None else pch):
        job["pch_dir"] = str(Path(cache_dir or cfg.cache_dir) / "nvrtc_pch")
        job["pch_max_bytes"] = int(getattr(cfg, "nvrtc_pch_max_mb", 0) or 0) << 20
    from .worker import run_job

    out = run_job("cute" if cand.language == "cute" else "nvrtc", job, timeout_s)
    cubins = out.get("cubins", {})
    try:
        status = CompileStatus(out.get("status"))
    except ValueError:  # the worker's answer is checked like any other untrusted data
        status, cubins = CompileStatus.error, {}
    result = CompileResult(
        status=status, log=scrub(str(out.get("log", ""))), cubins=cubins,
        entries={k: KernelEntry(**e) for k, e in out.get("entries", {}).items()},
        cubin_hash=CompileResult.hash_cubins(cubins), compiler=compiler, compiler_version=version,
        arch=arch, options=out.get("options", []), cache_key=key, cache_hit=False,
        source_hash=cand.source_hash(), compile_seconds=out.get("compile_seconds", 0.0),
        compile_cpu_seconds=out.get("compile_cpu_seconds", 0.0))
    result.seconds = time.perf_counter() - t0
    if cache is not None and not out.get("no_cache"):  # e.g. a CuTe cubin not precompiled (yet)
        cache.put(key, result)
        if cand.language == "cute" and result.ok and not any(o.startswith("prebuilt:")
                                                             for o in result.options):
            # a real DSL compile: also keyed without the compiler version, so that carrying
            # <cache_dir>/cute_prebuilt to a GPU box without the DSL lets its compile step find it
            from .cute_prebuilt import write_prebuilt

            write_prebuilt(Path(cache_dir or cfg.cache_dir) / "cute_prebuilt", cand, result)
    return result


def stage(candidate: Candidate | dict, result: CompileResult, folder) -> dict:
    """Write what the GPU box needs into `folder`: candidate.json, manifest.json and the cubins.

    launcher.load_stage(folder) reads it back with no pydantic on the box.
    """
    import json
    from pathlib import Path

    if not result.ok:
        raise ValueError(f"cannot stage a failed compile (status {result.status.value})")
    cand = candidate if isinstance(candidate, Candidate) else Candidate.model_validate(candidate)
    manifest = result.write_stage(folder)
    (Path(folder) / "candidate.json").write_text(json.dumps(cand.model_dump(), indent=1))
    return manifest
