"""The numbers behind `solforge report`, computed with polars from the 070 views.

Reads go through Store (its file lock), then polars does the analysis. Per subset, as the Cursor x
NVIDIA SOL-ExecBench report summarises a run: the share of attempted problems whose best kernel beats
the baseline (geomean speedup > 1), the share over 2x, the geomean of best speedups (over problems
with a correct kernel) and the median best SOL score.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Optional

import polars as pl

from ..store import Store
from ..store import report_queries as rq

SOL_BINS = [i / 10 for i in range(11)]  # 0.0 .. 1.0; a score above 1 (below the SOL floor) lands last
SPEEDUP_EDGES = [0.5, 0.8, 1.0, 1.25, 1.5, 2.0, 4.0]


frame = rq.frame  # a polars DataFrame of a query (solforge.store.report_queries)


@dataclass
class ReportData:
    db: str
    run: Optional[str]
    generated_at: str
    sources: list[dict] = field(default_factory=list)   # runs in scope: id, kind, note, source file
    attempts: pl.DataFrame = None                         # v_attempt_summary (in scope)
    problems: pl.DataFrame = None                         # one row per attempted problem, with its best
    subsets: pl.DataFrame = None                          # per-subset summary + an "all" row
    timeline: pl.DataFrame = None                         # attempt_no, best-so-far per problem
    planner: pl.DataFrame = None                          # planner budget over time
    llm: pl.DataFrame = None                              # spend per problem vs speedup
    llm_runs: pl.DataFrame = None                         # v_llm_spend
    failures: pl.DataFrame = None                         # v_failures_by_kind (in scope)

    @property
    def empty(self) -> bool:
        return self.attempts is None or self.attempts.height == 0

    @property
    def scored(self) -> bool:
        """True once any attempt has a correct, scored result (before that there is nothing to rank)."""
        return (self.problems is not None and self.problems.height > 0
                and self.problems["best_speedup"].drop_nulls().len() > 0)


def load(store: Store, run: Optional[str] = None) -> ReportData:
    d = ReportData(db=str(store.path), run=run,
                   generated_at=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
    d.sources = [
        {**r, "config": json.loads(r["config"]) if isinstance(r.get("config"), str) else r.get("config")}
        for r in rq.report_runs(store, run)]
    d.attempts = typed(rq.attempt_summary_frame(store, run))
    d.problems = best_per_problem(d.attempts)
    d.subsets = subset_summary(d.problems)
    d.timeline = timeline(d.attempts)
    d.planner = planner_budget(store, run)
    d.llm = spend_per_speedup(d.problems)
    d.llm_runs = rq.llm_spend_frame(store, run)
    d.failures = rq.failures_frame(store, run)
    return d


_BOOL_COLUMNS = {"all_correct"}
_TEXT_COLUMNS = {"attempt_id", "run_id", "problem", "subset", "parent_id", "agent", "model", "language",
                 "status", "outcome", "error"}


def typed(df: pl.DataFrame) -> pl.DataFrame:
    """Columns that came back all NULL (nothing scored yet: speedups, SOL scores, costs) have dtype
    Null, on which log, cum_max and median fail: give them the type v_attempt_summary declares."""
    fix = []
    for name, dtype in df.schema.items():
        if dtype == pl.Null:
            to = (pl.Boolean if name in _BOOL_COLUMNS else pl.Utf8 if name in _TEXT_COLUMNS
                  else pl.Datetime if name.endswith("_at") else pl.Float64)
            fix.append(pl.col(name).cast(to))
    return df.with_columns(fix) if fix else df


def best_per_problem(attempts: pl.DataFrame) -> pl.DataFrame:
    """Per attempted problem: effort, correctness, and its best correct attempt (same rule as the
    v_best_per_problem view: highest SOL score, then highest geomean speedup, then earliest)."""
    if attempts.height == 0:
        return pl.DataFrame(schema={"problem": pl.Utf8, "subset": pl.Utf8, "attempts": pl.Int64,
                                    "correct_attempts": pl.Int64, "cost_usd": pl.Float64,
                                    "best_attempt_id": pl.Utf8, "best_speedup": pl.Float64,
                                    "best_sol_score": pl.Float64})
    effort = attempts.group_by("problem").agg(
        pl.col("subset").drop_nulls().first().fill_null("?"),
        pl.len().alias("attempts"),
        pl.col("all_correct").fill_null(False).sum().alias("correct_attempts"),
        pl.col("cost_usd").fill_null(0.0).sum().alias("cost_usd"),
        pl.col("gpu_seconds").fill_null(0.0).sum().alias("gpu_seconds"),
    )
    best = (attempts.filter(pl.col("all_correct").fill_null(False) & (pl.col("n_scored") > 0))
            .sort(["sol_score", "speedup_geomean", "created_at"], descending=[True, True, False],
                  nulls_last=True)
            .group_by("problem", maintain_order=True).first()
            .select("problem", pl.col("attempt_id").alias("best_attempt_id"),
                    pl.col("speedup_geomean").alias("best_speedup"),
                    pl.col("sol_score").alias("best_sol_score"),
                    pl.col("agent").alias("best_agent"), pl.col("language").alias("best_language")))
    # an all-null column (nothing scored yet) comes back with dtype Null: make the numbers numbers
    best = best.with_columns(pl.col("best_speedup", "best_sol_score").cast(pl.Float64))
    out = effort.join(best, on="problem", how="left")
    return out.with_columns(
        (pl.col("correct_attempts") / pl.col("attempts")).alias("correctness")
    ).sort(["best_sol_score", "best_speedup", "problem"], descending=[True, True, False],
           nulls_last=True)


def _geomean(col: str) -> pl.Expr:
    # cast: a store where nothing is scored yet gives an all-null column of dtype Null, which has no log
    x = pl.col(col).cast(pl.Float64)
    return x.filter(x > 0).log().mean().exp()


def subset_summary(problems: pl.DataFrame) -> pl.DataFrame:
    """Per subset (and "all"): problems, solved, share beating the baseline, share over 2x,
    geomean best speedup, median best SOL score."""
    if problems.height == 0:
        return pl.DataFrame()
    aggs = [
        pl.len().alias("problems"),
        pl.col("best_speedup").is_not_null().sum().alias("solved"),
        ((pl.col("best_speedup") > 1.0).sum() / pl.len()).alias("share_beat_baseline"),
        ((pl.col("best_speedup") > 2.0).sum() / pl.len()).alias("share_over_2x"),
        _geomean("best_speedup").alias("geomean_speedup"),
        pl.col("best_sol_score").median().alias("median_sol_score"),
        pl.col("best_sol_score").mean().alias("mean_sol_score"),
        pl.col("attempts").sum().alias("attempts"),
        pl.col("cost_usd").sum().alias("cost_usd"),
    ]
    per = problems.group_by("subset").agg(aggs).sort("subset")
    total = problems.select(aggs).with_columns(pl.lit("all").alias("subset")).select(per.columns)
    return pl.concat([per, total], how="vertical_relaxed")


def sol_histogram(problems: pl.DataFrame) -> tuple[list[str], dict[str, list[int]]]:
    """Counts of best SOL scores in 0.1-wide bins, per subset. Labels '0.0', '0.1', ... '0.9'
    (the last bin also takes 1.0 and anything above it)."""
    labels = [f"{b:.1f}" for b in SOL_BINS[:-1]]
    out: dict[str, list[int]] = {}
    for subset in sorted(problems["subset"].unique().to_list()) if problems.height else []:
        vals = problems.filter(pl.col("subset") == subset)["best_sol_score"].drop_nulls().to_list()
        counts = [0] * len(labels)
        for v in vals:
            counts[min(max(int(math.floor(v * 10)), 0), len(labels) - 1)] += 1
        out[subset] = counts
    return labels, out


def speedup_histogram(problems: pl.DataFrame) -> tuple[list[str], dict[str, list[int]]]:
    """Counts of best geomean speedups per subset in bins around 1x."""
    edges = SPEEDUP_EDGES
    labels = [f"<{edges[0]}x"] + [f"{a}-{b}x" for a, b in zip(edges, edges[1:])] + [f">={edges[-1]}x"]
    out: dict[str, list[int]] = {}
    for subset in sorted(problems["subset"].unique().to_list()) if problems.height else []:
        vals = problems.filter(pl.col("subset") == subset)["best_speedup"].drop_nulls().to_list()
        counts = [0] * len(labels)
        for v in vals:
            counts[sum(v >= e for e in edges)] += 1
        out[subset] = counts
    return labels, out


def timeline(attempts: pl.DataFrame) -> pl.DataFrame:
    """Attempts in order per problem with the best SOL score / speedup so far (correct ones only)."""
    if attempts.height == 0:
        return pl.DataFrame()
    ok = pl.col("all_correct").fill_null(False)
    return (attempts.sort(["problem", "created_at", "attempt_id"])
            .with_columns(
                pl.int_range(1, pl.len() + 1).over("problem").alias("attempt_no"),
                pl.when(ok).then(pl.col("sol_score")).otherwise(None)
                  .cum_max().over("problem").alias("best_sol_so_far"),
                pl.when(ok).then(pl.col("speedup_geomean")).otherwise(None)
                  .cum_max().over("problem").alias("best_speedup_so_far"))
            .select("problem", "subset", "attempt_no", "attempt_id", "created_at", "all_correct",
                    "sol_score", "speedup_geomean", "best_sol_so_far", "best_speedup_so_far"))


def planner_budget(store: Store, run: Optional[str]) -> pl.DataFrame:
    """Budget spent (and caps) at each planner round: one row per distinct decision time and run."""
    rows = rq.planner_budget_rows(store, run)
    out: list[dict[str, Any]] = []
    seen = set()
    for r in rows:
        b = r["budget"] if isinstance(r["budget"], dict) else {}
        spent, cap = b.get("spent") or {}, b.get("budget") or {}
        key = (r["run_id"], r["created_at"])
        if key in seen:
            continue
        seen.add(key)
        out.append({"run_id": r["run_id"], "created_at": r["created_at"],
                    **{f"spent_{k}": float(spent.get(k) or 0.0)
                       for k in ("attempts", "gpu_seconds", "dollars", "wall_seconds")},
                    **{f"cap_{k}": (None if cap.get(k) is None else float(cap[k]))
                       for k in ("attempts", "gpu_seconds", "dollars", "wall_seconds")}})
    if not out:
        return pl.DataFrame()
    df = pl.DataFrame(out)
    t0 = df.group_by("run_id").agg(pl.col("created_at").min().alias("t0"))
    return df.join(t0, on="run_id").with_columns(
        ((pl.col("created_at") - pl.col("t0")).dt.total_milliseconds() / 1000.0).alias("t_s")
    ).drop("t0").sort(["run_id", "created_at"])


def spend_per_speedup(problems: pl.DataFrame) -> pl.DataFrame:
    """LLM dollars per problem against what they bought: $ per 1x of speedup gained over the baseline
    (best geomean speedup - 1; only problems that beat it), and $ per SOL-score point above 0.5
    (the baseline's own score)."""
    if problems.height == 0:
        return pl.DataFrame()
    return (problems.filter(pl.col("cost_usd") > 0)
            .select("problem", "subset", "cost_usd", "best_speedup", "best_sol_score", "attempts")
            .with_columns(
                pl.when(pl.col("best_speedup") > 1)
                  .then(pl.col("cost_usd") / (pl.col("best_speedup") - 1)).otherwise(None)
                  .alias("usd_per_speedup_gain"),
                pl.when(pl.col("best_sol_score") > 0.5)
                  .then(pl.col("cost_usd") / (pl.col("best_sol_score") - 0.5)).otherwise(None)
                  .alias("usd_per_sol_point"))
            .sort("cost_usd", descending=True))
