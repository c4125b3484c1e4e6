"""Which work an evaluation does with the GPU to itself (gpu_share.alone) and which beside other lanes
(gpu_share.shared), on the CPU: input sets and reference outputs are made in the shared section, the
alone section holds the timed calls and the re-check's candidate call only; the re-check still
catches a candidate that skips work on inputs it has seen."""

from __future__ import annotations

import contextlib

import pytest
import torch

from solforge.evaluate import evaluator
from solforge.evaluate.evaluator import EvalConfig, Env, evaluate_workload
from solforge.evaluate.results import EvalStatus
from solforge.evaluate.timing import Timing
from tests.unit.adv_problem import reference_run, write_problem

REF = ("import torch\n\n\n@torch.no_grad()\ndef run(x, y):\n    return torch.sin(x) + y\n")


class _Sections:
    """gpu_share's two sections, recording which one is open."""

    def __init__(self):
        self.open = None
        self.log: list[tuple[str, str]] = []   # (what ran, in which section)

    def _section(self, name):
        @contextlib.contextmanager
        def cm(*_a, **_k):
            assert self.open is None, "sections never nest"
            self.open = name
            try:
                yield
            finally:
                self.open = None
        return cm

    def shared(self):
        return self._section("shared")()

    def alone(self, path: str = ""):
        return self._section("alone")()


class _Timer:
    """Runs the call a few times, as the timer's measurement does, and says it was alone."""

    def __init__(self, sections: _Sections):
        self.sections, self.queued = sections, True

    def measure(self, call, reps, *_a, setup=None, **_k):
        self.sections.log.append(("timed calls", self.sections.open))
        for i in range(reps):
            if setup is not None:
                setup(i)
            call(i)
        return Timing([0.01] * reps, "events")


class _Caller:
    def __init__(self, sections: _Sections, skip_seen: bool = False):
        self.sections, self.skip_seen = sections, skip_seen

    def prepare(self, rw, inputs, outputs):
        seen = {"n": 0}

        def call():
            self.sections.log.append(("candidate", self.sections.open))
            seen["n"] += 1
            if self.skip_seen and seen["n"] > 1:
                return               # "cached": the same buffers were computed before
            outputs["out"].copy_(torch.sin(inputs["x"]) + inputs["y"])
        return call


@pytest.fixture()
def problem(tmp_path):
    from solforge.problem import load_problem_dir

    return load_problem_dir(write_problem(tmp_path, "S", "sections", REF, [("w1", 512)]), subset="S")


def _env(problem, sections, monkeypatch, skip_seen=False, **cfg_over):
    run = reference_run(problem, "_sections_ref")

    def reference(*args):
        sections.log.append(("reference", sections.open))
        return run(*args)

    real_make = evaluator._make

    def make(factory, r):
        sections.log.append(("inputs", sections.open))
        return real_make(factory, r)

    monkeypatch.setattr(evaluator, "gpu_share", sections)
    monkeypatch.setattr(evaluator, "_make", make)
    cfg = EvalConfig(**{**dict(correctness_rounds=2, timing=True, caching_probe=False, rep_count=8),
                        **cfg_over})
    return Env(problem=problem.name, reference=reference, caller=_Caller(sections, skip_seen),
               device=torch.device("cpu"), config=cfg, timer=_Timer(sections))


def test_only_the_timed_calls_and_the_recheck_call_run_alone(problem, monkeypatch):
    sections = _Sections()
    res = evaluate_workload(_env(problem, sections, monkeypatch), problem.workloads[0])
    assert res.status is EvalStatus.PASSED, res.message
    assert res.extra["n_sets"] > 1          # extra timing sets were made (a small workload)
    alone = [what for what, where in sections.log if where == "alone"]
    assert "timed calls" in alone and "candidate" in alone
    assert "reference" not in alone and "inputs" not in alone, sections.log
    made = [where for what, where in sections.log if what in ("inputs", "reference")]
    # two correctness rounds and the timing sets, two references and the re-check's, all shared
    assert len(made) >= 2 + 1 + 3 and set(made) == {"shared"}, sections.log


def test_the_recheck_after_timing_still_catches_skipped_work(problem, monkeypatch):
    sections = _Sections()
    # correct on each correctness round (fresh prepared calls), then, timed over the same buffers,
    # it stops computing: the poisoned re-check output stays poisoned
    res = evaluate_workload(_env(problem, sections, monkeypatch, skip_seen=True),
                            problem.workloads[0])
    assert res.status is EvalStatus.INCORRECT and "after timing" in res.message, res.message


def test_the_caching_probes_fresh_sets_are_made_while_shared(problem, monkeypatch):
    """The probe's first round writes sets made before the GPU was taken alone; only where they
    would not fit in caching_probe_premade_bytes does its setup make them, alone. (A budget that
    asks for the most calls whatever a correctness call took on a busy machine: sets made ahead
    for fewer calls than the timed median asks for are completed before the probe's calls, alone.)"""
    probe = dict(caching_probe=True, caching_probe_calls=3, caching_probe_max_calls=4,
                 caching_probe_budget_ms=1000.0)
    sections = _Sections()
    res = evaluate_workload(_env(problem, sections, monkeypatch, **probe), problem.workloads[0])
    assert res.status is EvalStatus.PASSED, res.message
    assert res.extra["caching_probe"]["calls"] == 4
    alone = [what for what, where in sections.log if where == "alone"]
    assert alone.count("candidate") >= 1 + 3 + 2 * 4 and "inputs" not in alone, sections.log
    sections = _Sections()
    res = evaluate_workload(_env(problem, sections, monkeypatch, caching_probe_premade_bytes=0,
                                 **probe), problem.workloads[0])
    assert res.status is EvalStatus.PASSED, res.message
    made_alone = [what for what, where in sections.log if where == "alone" and what == "inputs"]
    assert len(made_alone) == 3 + 4 + 4       # symmetric setup: every call's setup makes a set


def test_a_slow_input_generator_gets_fewer_probe_calls(problem, monkeypatch):
    """The correctness rounds time one input set; the probe makes no more fresh sets per side than
    caching_probe_make_budget_s allows for that time (at least caching_probe_calls)."""
    probe = dict(caching_probe=True, caching_probe_calls=3, caching_probe_max_calls=8)
    sections = _Sections()
    res = evaluate_workload(_env(problem, sections, monkeypatch, **probe), problem.workloads[0])
    assert res.extra["caching_probe"]["calls"] == 8
    sections = _Sections()
    res = evaluate_workload(_env(problem, sections, monkeypatch, caching_probe_make_budget_s=1e-9,
                                 **probe), problem.workloads[0])
    assert res.status is EvalStatus.PASSED, res.message
    assert res.extra["caching_probe"]["calls"] == 3
