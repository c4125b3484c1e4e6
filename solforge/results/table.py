"""The results table: one row per problem of a store (or of a dataset folder), never only the attempted ones.

Per problem: the best correct kernel's geomean speedup over T_b and its SOL score (mean over
workloads), from the store's v_best_per_problem rule. A problem without a correct, scored kernel is
"unserved" and counts as the baseline: 1.0x and SOL score 0.5 (the score T_b itself gets). The summary
per subset and over all problems: geomean speedup, share faster than T_b, share over 2x, mean and median
SOL score, with those counting rules, so the numbers describe the whole benchmark, not a chosen part.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

UNSERVED_SPEEDUP = 1.0
UNSERVED_SOL = 0.5


@dataclass
class ProblemResult:
    problem: str
    subset: str
    served: bool
    speedup: Optional[float] = None      # measured geomean speedup over T_b (None: unserved)
    sol_score: Optional[float] = None    # measured mean SOL score (None: unserved)
    attempts: int = 0
    attempt_id: Optional[str] = None
    t_b_from: Optional[str] = None

    @property
    def counted_speedup(self) -> float:
        return self.speedup if self.served and self.speedup else UNSERVED_SPEEDUP

    @property
    def counted_sol(self) -> float:
        return self.sol_score if self.served and self.sol_score is not None else UNSERVED_SOL


@dataclass
class Summary:
    subset: str
    problems: int
    served: int
    geomean_speedup: float
    share_faster: float
    share_over_2x: float
    mean_sol: float
    median_sol: float


@dataclass
class ResultsTable:
    db: str
    rows: list[ProblemResult] = field(default_factory=list)
    summaries: list[Summary] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"db": self.db, "counting": {"unserved_speedup": UNSERVED_SPEEDUP,
                                            "unserved_sol_score": UNSERVED_SOL},
                "summary": [asdict(s) for s in self.summaries],
                "problems": [{**asdict(r), "counted_speedup": r.counted_speedup,
                              "counted_sol_score": r.counted_sol} for r in self.rows]}


def summarize(subset: str, rows: list[ProblemResult]) -> Summary:
    sp = [r.counted_speedup for r in rows]
    sol = [r.counted_sol for r in rows]
    n = len(rows)
    return Summary(
        subset=subset, problems=n, served=sum(r.served for r in rows),
        geomean_speedup=math.exp(sum(math.log(x) for x in sp) / n) if n else float("nan"),
        share_faster=sum(x > 1.0 for x in sp) / n if n else float("nan"),
        share_over_2x=sum(x > 2.0 for x in sp) / n if n else float("nan"),
        mean_sol=statistics.fmean(sol) if n else float("nan"),
        median_sol=statistics.median(sol) if n else float("nan"))


def dataset_names(root: Path) -> dict[str, str]:
    """{problem name: subset} of a SOL-ExecBench-style folder (ROOT/SUBSET/PROBLEM/definition.json, or
    ROOT/PROBLEM/definition.json with ROOT's name as the subset): each definition.json's "name"."""
    root = Path(root)
    out = {}
    for d in sorted(root.rglob("definition.json")):
        rel = d.relative_to(root).parts
        subset = rel[-3] if len(rel) >= 3 else root.name
        try:
            name = json.loads(d.read_text()).get("name") or d.parent.name
        except (OSError, ValueError):
            name = d.parent.name
        out[name] = subset
    return out


def build(store, subset: Optional[str] = None, dataset: Optional[dict[str, str]] = None) -> ResultsTable:
    """Every problem of the store with its best result; with `dataset` ({name: subset}, see
    dataset_names), exactly the dataset's problems, those the store has never seen counted unserved."""
    from ..store.results import attempt_counts, best_attempts, problem_subsets

    subsets = problem_subsets(store)
    best = best_attempts(store)
    counts = attempt_counts(store)
    names = sorted(subsets)
    if dataset is not None:
        subsets = {**dataset, **{n: s for n, s in subsets.items() if n in dataset and s}}
        names = sorted(dataset)
    if subset:
        names = [n for n in names if (subsets[n] or "").lower() == subset.lower()]
    rows = []
    for n in names:
        b = best.get(n)
        rows.append(ProblemResult(
            problem=n, subset=subsets[n] or "-", served=b is not None,
            speedup=b["speedup_geomean"] if b else None, sol_score=b["sol_score"] if b else None,
            attempts=counts.get(n, 0), attempt_id=b["attempt_id"] if b else None,
            t_b_from=b["t_b_from"] if b else None))
    rows.sort(key=lambda r: (r.subset, r.problem))
    out = ResultsTable(db=str(store.path), rows=rows)
    for s in sorted({r.subset for r in rows}):
        out.summaries.append(summarize(s, [r for r in rows if r.subset == s]))
    if rows:
        out.summaries.append(summarize("all", rows))
    return out


def _x(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _s(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.3f}"


def _pct(v: float) -> str:
    return "-" if v != v else f"{100 * v:.0f}%"


# "timed": with a correct, timed kernel (the others count as unserved); not what `solforge coverage`
# calls served (a first candidate that compiles)
SUMMARY_COLUMNS = ["subset", "problems", "timed", "geomean speedup", "faster than T_b", "over 2x",
                   "mean SOL", "median SOL"]
PROBLEM_COLUMNS = ["problem", "subset", "speedup vs T_b", "SOL score", "attempts", "T_b from"]
# the same columns, short enough that a 100-column terminal shows subset names whole
SUMMARY_COLUMNS_SHORT = ["subset", "problems", "timed", "geomean", "faster", ">2x", "mean SOL", "med. SOL"]


def summary_cells(s: Summary) -> list[str]:
    return [s.subset, str(s.problems), str(s.served), _x(s.geomean_speedup), _pct(s.share_faster),
            _pct(s.share_over_2x), _s(s.mean_sol), _s(s.median_sol)]


def problem_cells(r: ProblemResult) -> list[str]:
    # tried but without a correct, timed kernel (wrong, failed, out of time) is not "unserved"
    missing = "no timed kernel (1.00x)" if r.attempts else "unserved (1.00x)"
    return [r.problem, r.subset, _x(r.speedup) if r.served else missing,
            _s(r.sol_score) if r.served else "(0.500)", str(r.attempts), r.t_b_from or "-"]


def markdown(t: ResultsTable, with_problems: bool = True) -> str:
    """Summary and per-problem tables in GitHub markdown (what the README shows)."""
    def md(cols, rows):
        lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
        return "\n".join(lines)

    parts = [md(SUMMARY_COLUMNS, [summary_cells(s) for s in t.summaries]),
             "",
             f"Problems without a correct, timed kernel (unserved, or tried without one) count as "
             f"{UNSERVED_SPEEDUP:.1f}x and SOL score "
             f"{UNSERVED_SOL}; speedup is the geomean over a problem's workloads of T_b / T_kernel, T_b the "
             "faster of eager PyTorch and torch.compile where both were measured."]
    if with_problems:
        parts += ["", md(PROBLEM_COLUMNS, [problem_cells(r) for r in t.rows])]
    return "\n".join(parts) + "\n"
