"""Flow: optimize — planner round -> propose -> check -> compile -> evaluate -> score -> store, each a
task run; sessions of one round in parallel, evaluations spread over the host's GPUs (one at a time
per GPU); identical candidates answered from the store; resumed after a kill by running it again with
the same parameters. Publishes a leaderboard table and a markdown summary.

Runs with a Prefect server (a deployment) or without one (call `optimize(...)` or
`python flows/optimize.py --problems ...`: Prefect starts an ephemeral API in-process).
Without a GPU it plans, checks and compiles, and says that timing needs a GPU.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict, fields
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # repo root, for `tasks`

from prefect import flow, get_run_logger  # noqa: E402
from prefect.artifacts import create_markdown_artifact, create_table_artifact  # noqa: E402

from solforge.agents.lab import NO_GPU  # noqa: E402
from solforge.orchestrate import leaderboard as lb  # noqa: E402
from solforge.orchestrate.setup import OptimizeParams, build  # noqa: E402
from tasks.optimize import leaderboard_task, prefect_stages  # noqa: E402


@flow(name="optimize", log_prints=True)
def optimize(problems: Optional[str] = "FlashInfer-Bench/*rmsnorm*", subset: Optional[str] = None,
             limit: Optional[int] = None, with_family: bool = False,
             budget_attempts: Optional[int] = 20, gpu_seconds: Optional[float] = None,
             wall_seconds: Optional[float] = None, max_dollars: Optional[float] = None,
             attempts_per_round: int = 4, runs_per_round: int = 1, sol_target: float = 0.95,
             model: Optional[str] = None, api_base: Optional[str] = None,
             api_key_env: Optional[str] = None, language: str = "cuda", gpus: Optional[str] = None,
             lanes: int = 1, arch: Optional[str] = None, gpu_profile: Optional[str] = None, reps: Optional[int] = None,
             correctness_rounds: Optional[int] = None, timing_budget_s: Optional[float] = None,
             eval_timeout_s: Optional[float] = None, baseline_reps: int = 20,
             max_tokens: Optional[int] = None, max_calls: Optional[int] = None,
             no_tools: bool = False, offline: bool = False, job: Optional[str] = None,
             gpu_limit: Optional[str] = None, db: Optional[str] = None,
             eval_timeout_for: Optional[str] = None, refcache: Optional[str] = None,
             refcache_max_ref_s: float = 120.0, refcache_dir: Optional[str] = None,
             screen_workloads: Optional[int] = None) -> dict:
    """Optimize kernels for the selected problems.

    problems: names, SUBSET/name or globs over the store's problems (solforge.problem.select; terms
        the store lacks are ingested from the shared SOL-ExecBench tree), or a path to ingest.
    budget_attempts / gpu_seconds / wall_seconds / max_dollars: the budget of the whole job; a rerun
        with the same parameters resumes it and counts what the killed run spent.
    model: LiteLLM model string (None: the offline kernel-family search alone).
    gpus: CUDA_VISIBLE_DEVICES-style list of GPUs to spread evaluations over (None: all visible,
        "": none, compile only). `lanes` evaluations per GPU at a time: their correctness checks
        side by side, each timing alone (default 1).
    correctness_rounds / timing_budget_s / eval_timeout_s / baseline_reps: evaluation settings
        (None: solforge.settings defaults).
    job: part of the resume key; a rerun with the same parameters and job resumes that job, a new
        job value starts a new one. Default: the UTC day of the run's scheduled start, so each night
        of the nightly schedule is a new job and a run killed today resumes when started again today.
    gpu_limit: optional Prefect global-concurrency-limit name template per GPU, e.g. "gpu-{host}-{gpu}".
    db: DuckDB file (default $SOLFORGE_DB_PATH or ./solforge.duckdb).
    eval_timeout_for: per-problem evaluation limits, "PATTERN=SECONDS,..." (first match wins).
    refcache / refcache_max_ref_s / refcache_dir: problems whose slow references run once per run in a
        trusted process (docs/refcache.md), the longest reference call kept, where the cache lives.
    screen_workloads: where a problem has a timed best on this GPU model, a candidate runs on this
        many representative workloads first and on the rest only if it could be a new best there
        (None: settings; 0: every workload).
    """
    given = dict(locals())
    logger = get_run_logger()
    if job is None:
        # One job per scheduled day: tonight's run is a new job with a fresh budget, while a run killed
        # today and started again today resumes it.
        given["job"] = _job_of_the_day()
    params = OptimizeParams(**{f.name: given[f.name] for f in fields(OptimizeParams) if f.name in given})
    loop = build(params, stages=prefect_stages(gpu_limit), progress=logger.info)
    if not loop.lab.has_gpu:
        logger.warning(NO_GPU)
    logger.info(f"optimize: {len(loop.problems)} problem(s), GPUs {loop.pool.gpus or 'none'}, "
                f"workers {sorted(loop.workers)}, resume key {loop.key}")
    report = loop.run()
    rows = leaderboard_task(loop.store, report.run_id)
    publish(rows, report, loop)
    return {"run_id": report.run_id, "stop_reason": report.stop_reason, "gpu": report.gpu,
            "resume_key": loop.key, "resume": loop.resume_state.as_dict() if loop.resume_state else None,
            "cache_hits": loop.cache_hits, "resumed": loop.resumed, "spent": asdict(report.spent),
            "notes": report.notes, "leaderboard": lb.table_rows(rows)}


def _job_of_the_day() -> Optional[str]:
    from prefect.runtime import flow_run

    try:
        t = flow_run.scheduled_start_time
    except Exception:  # noqa: BLE001 - outside a flow run: no day
        return None
    return f"day-{t:%Y-%m-%d}" if t else None


def publish(rows: list[dict], report, loop) -> None:
    notes = list(report.notes)
    if loop.resume_state and loop.resume_state.prior_runs:
        notes.append(f"resumed job {loop.key}: {len(loop.resume_state.prior_runs)} earlier run(s), "
                     f"{loop.resumed} unfinished attempt(s) finished here")
    notes.append(f"stop: {report.stop_reason}; {report.spent.attempts} attempts, "
                 f"{report.spent.gpu_seconds:.1f} GPU-s, ${report.spent.dollars:.4f}; "
                 f"{loop.cache_hits} answered from the store")
    create_table_artifact(lb.table_rows(rows), key="optimize-leaderboard",
                          description=f"optimize run {report.run_id}: best attempt per problem")
    create_markdown_artifact(lb.markdown(rows, f"Optimize run `{report.run_id[:8]}`", notes),
                             key="optimize-summary", description="speedup and SOL score per problem")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description="run the optimize flow (ephemeral Prefect, no server needed)")
    for f in fields(OptimizeParams):
        flag = "--" + f.name.replace("_", "-")
        if f.type in ("bool",) or isinstance(f.default, bool):
            ap.add_argument(flag, action="store_true")
        else:
            kind = {"Optional[int]": int, "int": int, "Optional[float]": float, "float": float}.get(
                str(f.type), str)
            ap.add_argument(flag, type=kind, default=f.default)
    ap.add_argument("--gpu-limit")
    a = vars(ap.parse_args(argv))
    print(optimize(**a)["stop_reason"])


if __name__ == "__main__":
    main()
