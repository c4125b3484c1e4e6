"""A small problem on disk for the evaluator / baseline tests: a copy of tests/adversarial/problem
(inputs x, y; one axis n) with its own name, reference and workloads."""

from __future__ import annotations

import json
from pathlib import Path

ADV = Path(__file__).resolve().parents[1] / "adversarial" / "problem"


def write_problem(root: Path, subset: str, name: str, reference: str, workloads) -> Path:
    """root/subset/name/{definition.json, workload.jsonl}, one workload per (uuid, n) in `workloads`."""
    d = root / subset / name
    d.mkdir(parents=True)
    defn = json.loads((ADV / "definition.json").read_text())
    defn["name"], defn["reference"] = name, reference
    (d / "definition.json").write_text(json.dumps(defn))
    line = json.loads((ADV / "workload.jsonl").read_text().splitlines()[0])
    (d / "workload.jsonl").write_text("".join(json.dumps(dict(line, uuid=u, axes={"n": n})) + "\n"
                                              for u, n in workloads))
    return d


def reference_run(problem, module_name: str):
    """The problem's reference `run`, imported in this process (tests that build an Env by hand)."""
    import importlib.util

    path = Path(problem.source) / "_ref.py"
    path.write_text(problem.definition.reference)
    spec = importlib.util.spec_from_file_location(module_name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.run
