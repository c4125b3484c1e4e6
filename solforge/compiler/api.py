"""compile_definition: trace -> lower -> plan, with a one-line reason when any step refuses."""

from __future__ import annotations

import functools
import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from .. import disk_cache
from ..candidate import Candidate


@dataclass
class CompileOutcome:
    candidate: Optional[Candidate] = None
    reason: str = ""
    stage: str = ""                     # trace | lower | plan | ok
    ops: dict = field(default_factory=dict)      # traced op counts
    segments: dict = field(default_factory=dict)  # kernel kind -> count

    @property
    def ok(self) -> bool:
        return self.candidate is not None


_CACHE: dict[str, CompileOutcome] = {}
_TRACES: dict[str, Any] = {}  # definition + workloads -> TraceResult (_traced)
MAX_NODES = 2500  # a bigger graph is an unrolled loop: its lowering and compile would take minutes


# The CUDA sources a plan embeds (its candidate carries them as text): kernels_cuda/compiler's
# GEMM template header and flash attention kernel. A cached plan must not outlive a fix in them.
KERNEL_SOURCES = Path(__file__).resolve().parents[2] / "kernels_cuda" / "compiler"


def _code_version(roots: tuple = (Path(__file__).parent, KERNEL_SOURCES)) -> str:
    """A hash of the compiler's own sources and of the kernel sources its plans embed: a cached
    outcome from other code is never reused."""
    h = hashlib.sha256()
    for root in roots:
        for f in sorted(Path(root).rglob("*")):  # templates/ included
            if f.is_file() and f.suffix in (".py", ".cuh", ".cu", ".h"):
                h.update(f.relative_to(root).as_posix().encode())
                h.update(f.read_bytes())
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def _own_version() -> str:
    """_code_version of this installation, hashed once a process: ~100 kB of sources read on every
    key otherwise, and the Python it covers is the one imported at the process's start anyway."""
    return _code_version()


def _key(defn, workloads, gemm: str = "generic", attention: bool = False) -> str:
    axes = [sorted((getattr(w, "axes", {}) or {}).items()) for w in workloads]
    return hashlib.sha256(json.dumps([defn.model_dump(mode="json"), axes, _own_version()]
                                     + ([gemm] if gemm != "generic" else [])
                                     + (["attention"] if attention else []),
                                     sort_keys=True, default=str).encode()).hexdigest()


def _load(key: str) -> Optional[CompileOutcome]:
    d = disk_cache.load("compiler", key)
    if not isinstance(d, dict):
        return None
    try:
        cand = Candidate.model_validate(d["candidate"]) if d.get("candidate") else None
        return CompileOutcome(candidate=cand, reason=d.get("reason", ""), stage=d.get("stage", ""),
                              ops=d.get("ops", {}), segments=d.get("segments", {}))
    except (ValueError, KeyError, TypeError):
        return None


def _save(key: str, out: CompileOutcome) -> None:
    disk_cache.save("compiler", key, {"candidate": out.candidate.model_dump() if out.candidate else None,
                                      "reason": out.reason, "stage": out.stage, "ops": out.ops,
                                      "segments": out.segments})


def output_specs(defn) -> dict:
    """Output name -> (dtype, shape as axis-expression strings over var axes), as the trace writes."""
    from . import symexpr
    from .trace import _axis_sym

    out = {}
    for name, spec in defn.outputs.items():
        shape = [symexpr.to_axis(_axis_sym(defn, d)) for d in (spec.shape or [])]
        out[name] = (spec.dtype, shape)
    return out


# How matmuls and convolutions lower: "generic" (the lowering's own tiled kernel), "template"
# (templates/gemm_adapter: the wgmma / mma.sync / SIMT GEMM template; same call, same loaders, so
# prologues stay fused) or "template_3xtf32" (the same, fp32 operands on tensor cores as 3xTF32
# instead of SIMT FMA: fp32-level error, several times the FMA rate; the evaluator's tolerance
# decides per problem). Tunables the offline search tries (kernels/compiled.py).
GEMM_LOWERINGS = ("generic", "template", "template_3xtf32")


def _matmul_for(gemm: str):
    if gemm not in GEMM_LOWERINGS:
        raise ValueError(f"gemm lowering must be one of {GEMM_LOWERINGS}, not {gemm!r}")
    if gemm == "generic":
        return None
    from functools import partial

    from .templates import gemm_adapter

    return partial(gemm_adapter.matmul, fp32="3xtf32") if gemm == "template_3xtf32" else gemm_adapter.matmul


def _one_line(e: Exception) -> str:
    """An error in one line; a pydantic validation error with its first field and message (its
    first line alone only says that validation failed)."""
    first = str(e).splitlines()[0] if str(e) else type(e).__name__
    errors = getattr(e, "errors", None)
    if callable(errors):
        try:
            err = errors()[0]
            first += f": {'.'.join(str(x) for x in err.get('loc', ()))}: {err.get('msg', '')}"
        except Exception:  # noqa: BLE001 - the plain first line then
            pass
    return first[:300]


def lower_ir(defn, ir: dict, name: Optional[str] = None, gemm: str = "generic",
             attention: bool = False) -> CompileOutcome:
    from .lower import Lowering, Unsupported
    from .plan import build_candidate

    from .rolling import node_count, roll

    if "variants" in ir:
        return _lower_variants(defn, ir, name, gemm, attention)
    ops = Counter(n["op"] for n in ir["nodes"])
    rolled = roll(ir)  # a Python loop the trace unrolled, lowered once (rolling.py)
    if node_count(rolled) > MAX_NODES:
        return CompileOutcome(reason=f"graph of {node_count(rolled)} ops (over {MAX_NODES}: a "
                                     "Python loop unrolled by the trace?)", stage="lower", ops=dict(ops))
    try:
        try:
            low = Lowering(rolled, output_specs(defn), matmul=_matmul_for(gemm), attention=attention).run()
        except Unsupported:
            if rolled is ir or len(ir["nodes"]) > MAX_NODES:
                raise
            low = Lowering(ir, output_specs(defn), matmul=_matmul_for(gemm), attention=attention).run()
    except Unsupported as e:
        return CompileOutcome(reason=str(e), stage="lower", ops=dict(ops))
    except RecursionError:
        return CompileOutcome(reason="lowering recursed too deeply", stage="lower", ops=dict(ops))
    segs = Counter(s.kind for s in low.kernels)
    try:
        cand = build_candidate(name or defn.name, low,
                               notes="compiler: " + ", ".join(f"{k} x{v}" for k, v in segs.items()))
    except (ValueError, TypeError) as e:
        return CompileOutcome(reason=f"plan: {_one_line(e)}", stage="plan",
                              ops=dict(ops), segments=dict(segs))
    return CompileOutcome(candidate=cand, stage="ok", ops=dict(ops), segments=dict(segs))


def _lower_variants(defn, ir: dict, name: Optional[str], gemm: str = "generic",
                    attention: bool = False) -> CompileOutcome:
    """One lowering per structure the reference takes, selected at run time by its guards."""
    from .lower import Lowering, Unsupported
    from .plan import build_candidate_variants

    ops: Counter = Counter()
    segs: Counter = Counter()
    parts = []
    for i, v in enumerate(ir["variants"]):
        ops.update(n["op"] for n in v["ir"]["nodes"])
        try:
            low = Lowering(v["ir"], output_specs(defn), prefix=f"v{i}", matmul=_matmul_for(gemm),
                           attention=attention, pins=v.get("pins")).run()
        except Unsupported as e:
            return CompileOutcome(reason=str(e), stage="lower", ops=dict(ops))
        except RecursionError:
            return CompileOutcome(reason="lowering recursed too deeply", stage="lower", ops=dict(ops))
        segs.update(s.kind for s in low.kernels)
        parts.append((low, (v["pred"], v["names"], v["fnames"], v.get("tensors", []), v.get("when"))))
    segs["variants"] = len(parts)
    try:
        cand = build_candidate_variants(name or defn.name, parts, notes="compiler: " + ", ".join(
            f"{k} x{n}" for k, n in segs.items()))
    except (ValueError, TypeError) as e:
        return CompileOutcome(reason=f"plan: {_one_line(e)}", stage="plan",
                              ops=dict(ops), segments=dict(segs))
    return CompileOutcome(candidate=cand, stage="ok", ops=dict(ops), segments=dict(segs))


def compile_definition(defn, workloads: list, timeout_s: Optional[float] = None,
                       gemm: str = "generic", attention: bool = False) -> CompileOutcome:
    """The compiler's candidate for a problem, or why not (cached per definition + workloads +
    lowering choices). `gemm`: how matmuls and convolutions lower (GEMM_LOWERINGS); `attention`:
    softmax(QK^T)V patterns as the flash template (attention_segment.py; in a plan with variants,
    where the variant's launches carry a host-side `when`: the template has no guard of its own)."""
    key = _key(defn, workloads, gemm, attention)
    if key in _CACHE:
        return _CACHE[key]
    cached = _load(key)
    if cached is not None:
        _CACHE[key] = cached
        return cached
    if timeout_s is None:
        from ..settings import Settings

        timeout_s = Settings.load().trace_timeout_s
    tr = _traced(defn, workloads, timeout_s)
    if not tr.ok:
        out = CompileOutcome(reason=tr.reason, stage="trace")
    else:
        out = lower_ir(defn, tr.ir, gemm=gemm, attention=attention)
    _CACHE[key] = out
    if not out.reason.startswith("tracing the reference took over"):  # a timeout may pass later
        _save(key, out)
    return out


def _traced(defn, workloads: list, timeout_s: float):
    """The reference's trace, once per definition + workloads in this process: each lowering choice
    of the same problem lowers the same IR (a trace is a sandboxed process)."""
    from .trace import trace_definition

    key = _key(defn, workloads)
    if key not in _TRACES:
        tr = trace_definition(defn, workloads, timeout_s=timeout_s)
        if tr.ok:   # loops of a symbolic count: launched for the largest workload's count
            from .counted_loops import bind_counts

            try:
                bind_counts(tr.ir, defn, workloads)
            except ValueError as e:
                tr = type(tr)(False, reason=str(e))
        _TRACES[key] = tr
    return _TRACES[key]


def compile_problem(problem, timeout_s: Optional[float] = None, gemm: str = "generic",
                    attention: bool = False) -> CompileOutcome:
    return compile_definition(problem.definition, list(problem.workloads), timeout_s, gemm, attention)
