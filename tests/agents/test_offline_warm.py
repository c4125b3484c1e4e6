"""OfflineWorker.warm: every problem matched to its kernel families in child processes before the
planner asks, within a deadline; answers come back through the disk cache. Problems written here."""

from __future__ import annotations

import time

from solforge.agents.offline import OfflineWorker

import json
import textwrap

from .conftest import write_unservable_problem

SCALE = """
import torch

def run(x):
    return x * 2.0 + 1.0
"""

SLOW = """
import time
import torch

def run(x):
    time.sleep(300)  # tracing this takes minutes: past any test deadline
    return x + 1.0
"""


def _problem(tmp, name, ref):
    """A one-input elementwise problem over a var axis, two workloads."""
    from solforge.problem import load_problem_dir

    d = tmp / name
    d.mkdir(parents=True)
    defn = {"name": name, "axes": {"n": {"type": "var"}},
            "inputs": {"x": {"shape": ["n"], "dtype": "float32"}},
            "outputs": {"out": {"shape": ["n"], "dtype": "float32"}}, "reference": textwrap.dedent(ref)}
    (d / "definition.json").write_text(json.dumps(defn))
    (d / "workload.jsonl").write_text("".join(
        json.dumps({"uuid": f"{name}-{i}", "axes": {"n": n}, "inputs": {"x": {"type": "random"}}}) + "\n"
        for i, n in enumerate((1000, 4097))))
    return load_problem_dir(d, subset="written")


def test_warm_matches_in_children_through_the_disk_cache(tmp_path, cpu_lab):
    served = _problem(tmp_path, "scale_shift", SCALE)
    unserved = load_unserved(tmp_path)
    w = OfflineWorker(cpu_lab)
    got = w.warm([served, unserved], deadline_s=300, jobs=2)
    assert got["matched"] == 2 and got["unmatched"] == []
    # the parent read the children's answers: the compiler's outcome is on disk, not only in memory
    assert list((tmp_path / "cache" / "compiler").glob("*.json"))
    assert w.has_family(served) and not w.has_family(unserved)
    assert any(fs.family.name == "compiler" for fs in w._state(served).families)


def test_warm_leaves_out_what_misses_the_deadline(tmp_path, cpu_lab):
    fast, slow = _problem(tmp_path, "scale_shift", SCALE), _problem(tmp_path, "slow_trace", SLOW)
    w = OfflineWorker(cpu_lab)
    t0 = time.monotonic()
    got = w.warm([fast, slow], deadline_s=60, jobs=2)
    assert time.monotonic() - t0 < 80  # the slow one's child was stopped, not waited for
    assert got["unmatched"] == ["slow_trace"] and got["matched"] == 1
    assert w.has_family(fast) and not w.has_family(slow)


def test_warm_with_no_time_left_matches_nothing(tmp_path, cpu_lab):
    a, b = _problem(tmp_path, "a", SCALE), _problem(tmp_path, "b", SCALE)
    w = OfflineWorker(cpu_lab)
    got = w.warm([a, b], deadline_s=0)
    assert got["matched"] == 0 and sorted(got["unmatched"]) == ["a", "b"]
    assert not w.has_family(a) and not w._search["b"].families


def load_unserved(tmp_path):
    from solforge.problem import load_problem_dir

    return load_problem_dir(write_unservable_problem(tmp_path / "row_eigenvalues"), subset="written")
