"""Flow: baseline — T_b for every workload of the selected problems (eager and/or torch.compile),
one problem per task run, on the GPU this worker was given (CUDA_VISIBLE_DEVICES). Problems whose
every workload already has a passing baseline of that variant are skipped unless `force`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # repo root, for `tasks`

from prefect import flow, get_run_logger  # noqa: E402
from prefect.artifacts import create_markdown_artifact  # noqa: E402
from prefect.utilities.annotations import quote  # noqa: E402

from solforge import settings  # noqa: E402
from solforge.orchestrate.setup import gpu_pool, select_problems  # noqa: E402
from solforge.store.report_queries import passed_baseline_counts  # noqa: E402
from tasks.baseline import measure_baseline, store_baselines  # noqa: E402
from tasks.common import open_store  # noqa: E402


@flow(name="baseline", log_prints=True)
def baseline(problems: Optional[str] = None, subset: Optional[str] = None, limit: Optional[int] = None,
             variants: list[str] = ["eager"], reps: int = 20, force: bool = False,  # noqa: B006
             gpus: Optional[str] = None, db: Optional[str] = None) -> dict:
    log = get_run_logger()
    store = open_store(db)
    pool = gpu_pool(gpus)
    probs = select_problems(store, problems, subset=subset, limit=limit,
                            shared_dir=settings.get().shared_dir, report=log.warning)
    if not len(pool):
        msg = "no GPU on this machine: baselines are GPU timings; nothing measured"
        log.warning(msg)
        create_markdown_artifact(f"# Baselines\n\n{msg} ({len(probs)} problem(s) selected)\n",
                                 key="baseline-summary")
        return {"measured": 0, "skipped": len(probs), "gpu": False}
    done = passed_baseline_counts(store)
    measured, lines = 0, ["# Baselines", "", "| problem | variant | workloads passed |", "|---|---|---|"]
    for p in probs:
        for v in variants:
            if not force and done.get((p.name, v), 0) >= len(p.workloads):
                continue
            rows = measure_baseline(quote(p), v, quote(pool), reps)
            measured += store_baselines(quote(store), rows)
            lines.append(f"| {p.name} | {v} | {sum(r['status'] == 'passed' for r in rows)}/{len(rows)} |")
    create_markdown_artifact("\n".join(lines), key="baseline-summary")
    return {"measured": measured, "problems": len(probs), "gpu": True}


if __name__ == "__main__":
    baseline(*sys.argv[1:2])
