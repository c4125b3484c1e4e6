"""Flow: replay — run stored attempts again (given ids, or each problem's best) on this machine's
GPUs: a re-measurement is a new attempt whose parent is the old one. An attempt already answered on
this GPU model is served from the store unless `force`. Without a GPU: recompiles only, and says so."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # repo root, for `tasks`

from prefect import flow, get_run_logger  # noqa: E402
from prefect.artifacts import create_markdown_artifact, create_table_artifact  # noqa: E402
from prefect.utilities.annotations import quote  # noqa: E402

from solforge import settings  # noqa: E402
from solforge.agents.lab import NO_GPU, Lab  # noqa: E402
from solforge.candidate import Candidate  # noqa: E402
from solforge.orchestrate import leaderboard as lb  # noqa: E402
from solforge.orchestrate.loop import LoopConfig, OptimizeLoop  # noqa: E402
from solforge.orchestrate.setup import gpu_pool  # noqa: E402
from solforge.store import RunStatus  # noqa: E402
from tasks.common import open_store  # noqa: E402
from tasks.optimize import leaderboard_task, prefect_stages  # noqa: E402
from tasks.replay import load_stored_problems, select_attempts  # noqa: E402


@flow(name="replay", log_prints=True)
def replay(attempt_ids: Optional[list[str]] = None, problems: Optional[str] = None, force: bool = False,
           gpus: Optional[str] = None, gpu_limit: Optional[str] = None, db: Optional[str] = None) -> dict:
    """attempt_ids: attempts to run again; else `problems` (names, SUBSET/name or globs; None: all):
    each one's best attempt. force: re-measure even when the store has an answer from this GPU model."""
    log = get_run_logger()
    store = open_store(db)
    rows = select_attempts(quote(store), attempt_ids, problems)
    probs = {p.name: p for p in load_stored_problems(quote(store), sorted({r["problem"] for r in rows}))}
    cfg = settings.get()
    pool = gpu_pool(gpus)
    lab = Lab(cfg.arch, cfg.gpu_profile, store=store, has_gpu=len(pool) > 0)
    loop = OptimizeLoop(store, list(probs.values()), lab, {}, LoopConfig(), pool=pool,
                        stages=prefect_stages(gpu_limit), progress=log.info)
    loop.use_cache = not force
    if not lab.has_gpu:
        log.warning(NO_GPU)
    loop.run_id = store.create_run(kind="replay", gpu_profile=lab.gpu_profile, config=loop._config_json())
    status, results = RunStatus.FAILED, []
    try:
        jobs = [(probs[r["problem"]], r["agent"] or "replay", Candidate.model_validate(r["candidate"]), r["id"])
                for r in rows if r["problem"] in probs]
        results = loop.run_candidates(jobs)
        status = RunStatus.FINISHED
    finally:
        store.finish_run(loop.run_id, status)
    board = leaderboard_task(quote(store), loop.run_id)
    create_table_artifact(lb.table_rows(board), key="replay-leaderboard")
    create_markdown_artifact(lb.markdown(board, f"Replay run `{loop.run_id[:8]}`",
                                         [] if lab.has_gpu else [NO_GPU]), key="replay-summary")
    return {"run_id": loop.run_id, "replayed": len(results), "cache_hits": loop.cache_hits,
            "missing_problems": sorted({r["problem"] for r in rows} - set(probs))}


if __name__ == "__main__":
    replay(sys.argv[1:] or None)
