"""The problem model: Definition, Workload, Solution, Trace — one module per on-disk format."""

from .definition import AxisConst, AxisExpr, AxisVar, Definition, TensorSpec
from .loader import Problem, load_definition, load_problem_dir, load_workloads
from .workload import ResolvedWorkload, Tolerance, Workload, resolve

__all__ = [
    "AxisConst", "AxisExpr", "AxisVar", "Definition", "TensorSpec", "Problem", "load_definition",
    "load_problem_dir", "load_workloads", "ResolvedWorkload", "Tolerance", "Workload", "resolve",
]
