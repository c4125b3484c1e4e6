"""What every kernel family is: a matcher, a parameter space and a Candidate factory.

A family reads a problem (definition + workloads), decides from its structure whether its kernel
computes that problem's function (`analyze`, returning a per-problem `Spec` or None: the traced
reference's ops, dtypes and shapes, solforge/kernels/structure.py; never its name or wording), lists the tunables worth
trying (`param_space`), and turns one choice into a `solforge.candidate.Candidate`
(`instantiate`). Per-problem facts the kernel needs (hidden size, dtype, rounding order of the
reference) travel as params too: the compiler #defines every param into the sources.

Sources live in kernels_cuda/<family>/ (or kernels_cute/<family>/); this module only reads them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional, Union

from ..candidate import Candidate
from ..problem import axis_expr
from ..problem.definition import Definition

REPO_ROOT = Path(__file__).resolve().parents[2]
CUDA_DIR = REPO_ROOT / "kernels_cuda"
CUTE_DIR = REPO_ROOT / "kernels_cute"

DTYPE_CODE = {"float32": 0, "float16": 1, "bfloat16": 2}  # DTYPE param the .cu files switch on
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


class FamilyError(ValueError):
    """The family cannot serve this problem or these params (the message says why)."""


@dataclass
class Spec:
    """What a family learned about one problem: fixed params plus anything instantiate needs."""

    fixed: dict[str, Any]                 # params #defined into the source, not tuned
    info: dict[str, Any] = field(default_factory=dict)  # launch facts (tensor names, row exprs)


def definition_of(problem) -> Definition:
    """Accept a loaded Problem, a Definition, or anything with `.definition`."""
    if isinstance(problem, Definition):
        return problem
    d = getattr(problem, "definition", None)
    if isinstance(d, Definition):
        return d
    raise TypeError(f"expected a Problem or Definition, got {type(problem).__name__}")


def workloads_of(problem) -> list:
    return list(getattr(problem, "workloads", []) or [])


def shape_dims(defn: Definition, tensor: str) -> list[Union[str, int]]:
    spec = defn.inputs.get(tensor) or defn.outputs[tensor]
    return list(spec.shape or [])


def product_expr(dims: list[Union[str, int]]) -> str:
    """'a*b*c' over axis names and literals; '1' for none."""
    return "*".join(str(d) for d in dims) if dims else "1"


def const_value(defn: Definition, dim: Union[str, int]) -> Optional[int]:
    if isinstance(dim, int):
        return dim
    if dim in defn.const_axes:
        return defn.const_axes[dim]
    if getattr(defn.axes.get(dim), "expression", None) is None:
        return None
    # an expr axis over constants only (input_dim = inner_dim * 2) is a constant too, also through
    # other such expr axes (num_input_blocks = input_dim // 128, input_dim = heads * head_dim)
    env = dict(defn.const_axes)
    for _ in range(len(defn.axes)):
        grew = False
        for name, ax in defn.axes.items():
            expr = getattr(ax, "expression", None)
            if name in env or expr is None:
                continue
            try:
                env[name], grew = axis_expr.evaluate(expr, env), True
            except axis_expr.ExprError:
                continue
        if dim in env or not grew:
            break
    v = env.get(dim)
    return int(v) if v is not None and v == int(v) else None


@lru_cache(maxsize=None)
def read_source(family_dir: str, filename: str, cute: bool = False) -> str:
    base = CUTE_DIR if cute else CUDA_DIR
    return (base / family_dir / filename).read_text()


class Family:
    """Base class. Subclasses set `name`, `description`, `ops` and implement analyze/_space/_build."""

    name: str = ""
    description: str = ""
    language: str = "cuda"
    ops: tuple[str, ...] = ()          # op patterns it serves, for humans and the planner
    source_dir: str = ""               # kernels_cuda/<source_dir>/ (kernels_cute/ when cute)
    cute: bool = False

    @property
    def family_dir(self) -> Path:
        return (CUTE_DIR if self.cute else CUDA_DIR) / self.source_dir

    # ---- the API the agents use -----------------------------------------------------------
    def matches(self, problem) -> bool:
        try:
            return self.analyze(definition_of(problem)) is not None
        except FamilyError:
            return False

    def param_space(self, problem) -> list[dict]:
        """Tunable param sets worth trying, best guess first. Empty if the family does not match."""
        defn = definition_of(problem)
        spec = self.analyze(defn)
        if spec is None:
            return []
        return self._space(defn, spec, workloads_of(problem))

    def default_params(self, problem) -> dict:
        space = self.param_space(problem)
        if not space:
            raise FamilyError(f"{self.name} does not serve {definition_of(problem).name}")
        return space[0]

    def instantiate(self, problem, params: Optional[dict] = None) -> Candidate:
        defn = definition_of(problem)
        spec = self.analyze(defn)
        if spec is None:
            raise FamilyError(f"family {self.name} does not serve problem {defn.name}")
        params = dict(params) if params is not None else self.default_params(problem)
        clash = set(params) & set(spec.fixed)
        if clash:
            raise FamilyError(f"params {sorted(clash)} are fixed by the problem, not tunable")
        self._check_params(defn, spec, params)
        cand = self._build(defn, spec, params)
        cand.check_tensor_args(set(defn.inputs), set(defn.outputs))
        return cand

    # ---- for subclasses -------------------------------------------------------------------
    def analyze(self, defn: Definition) -> Optional[Spec]:
        raise NotImplementedError

    def _space(self, defn: Definition, spec: Spec, workloads: list) -> list[dict]:
        raise NotImplementedError

    def _check_params(self, defn: Definition, spec: Spec, params: dict) -> None:
        pass

    def _build(self, defn: Definition, spec: Spec, params: dict) -> Candidate:
        raise NotImplementedError

    def _valid(self, defn: Definition, spec: Spec, params: dict) -> bool:
        """The params pass _check_params."""
        try:
            self._check_params(defn, spec, params)
            return True
        except FamilyError:
            return False

    def _best_params(self, defn: Definition, spec: Spec, best_dir: Path) -> Optional[dict]:
        """The params measured best on a GPU for a problem of the same structure: the best_dir/*.json
        whose candidate was built with exactly this problem's fixed params (spec.fixed: shapes,
        dtypes, rounding modes), the fastest where several were; None when none is, or its params do
        not pass _check_params. Keyed on structure, never on the file's problem name: a renamed or
        reworded problem gets the same params."""
        best = None
        for f in sorted(best_dir.glob("*.json")) if best_dir.is_dir() else []:
            try:
                data = json.loads(f.read_text())
                built = data["candidate"]["params"]
                params = data["params"]
                if any(built.get(k) != v for k, v in spec.fixed.items()):
                    continue
                self._check_params(defn, spec, params)
            except (OSError, ValueError, KeyError, TypeError, AttributeError, FamilyError):
                continue
            speed = data.get("geomean_speedup")
            speed = speed if isinstance(speed, (int, float)) else 0.0
            if best is None or speed > best[0]:
                best = (speed, params)
        return best[1] if best else None

    def __repr__(self) -> str:
        return f"<Family {self.name}>"
