"""One evaluation run with a faulting and a hanging candidate between two honest ones: the run
completes, records runtime_error and timeout, and the honest candidates after them still pass.
With SOLFORGE_EVIDENCE_DIR set, the run's results are written there as JSON (committed under
data/results/)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "adversarial"))


@pytest.mark.gpu
def test_fault_and_hang_in_one_run(tmp_path):
    import harness

    from solforge.evaluate.runner import run_stage

    order = ["good", "fault", "hang", "good"]
    reports = []
    for i, name in enumerate(order):
        adv = harness.load(harness.HERE / f"{name}.cu")
        adv.name = f"{i}_{name}"
        st = harness.stage(adv, tmp_path, ["adv-1m", "adv-4k"])
        reports.append(run_stage(st, timeout_s=90, workload_timeout_s=20))
    statuses = [[r.status.value for r in rep.results] for rep in reports]
    out = os.environ.get("SOLFORGE_EVIDENCE_DIR")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "evaluate_fault_hang_h200.json").write_text(json.dumps(
            [{"candidate": n, **rep.to_json(), "stderr_tail": rep.stderr_tail[-600:]}
             for n, rep in zip(order, reports)], indent=1))
    assert statuses[0] == ["passed", "passed"]
    assert statuses[1][0] == "runtime_error" and statuses[1][1] == "skipped"
    assert statuses[2][0] == "timeout" and statuses[2][1] == "skipped"
    assert statuses[3] == ["passed", "passed"]
    assert reports[2].killed
