"""The problem model: Definition, Workload, Solution, Trace — one module per on-disk format — and
ingest_path, which reads any supported source into Problems with per-problem errors."""

from .definition import AxisConst, AxisExpr, AxisVar, Definition, TensorSpec
from .ingest import IngestReport
from .sources import ingest_path
from .loader import Problem, load_definition, load_problem_dir, load_workloads
from .solution import Solution
from .trace import Trace
from .workload import ResolvedWorkload, Tolerance, Workload, resolve

__all__ = [
    "AxisConst", "AxisExpr", "AxisVar", "Definition", "TensorSpec", "Problem", "load_definition",
    "load_problem_dir", "load_workloads", "ResolvedWorkload", "Tolerance", "Workload", "resolve",
    "IngestReport", "ingest_path", "Solution", "Trace",
]
