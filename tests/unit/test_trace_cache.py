"""The sandboxed tracers' answers come back from the disk for the same definition and tracer code, and
a damaged entry is traced again (solforge/kernels/trace_cache.py)."""

from __future__ import annotations

import json

from solforge.kernels import structure
from solforge.kernels.trace_cache import sandboxed_trace
from solforge.problem import load_problem_dir

from tests.unit.adv_problem import write_problem

REFERENCE = "import torch\n\ndef run(x, y):\n    return torch.relu(x) * y + 1.0\n"


def _definition(tmp_path):
    d = write_problem(tmp_path / "ds", "S", "relu_mul", REFERENCE, [("w1", 64)])
    return load_problem_dir(d, subset="S").definition


def _ask(defn):
    return sandboxed_trace(structure.__name__, "trace_entry",
                           {"definition": defn.model_dump(mode="json"), "scalars": {}},
                           timeout_s=120.0, code=(structure.__name__,))


def test_answer_is_kept_and_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("SOLFORGE_CACHE_DIR", str(tmp_path / "cache"))
    defn = _definition(tmp_path)
    first = _ask(defn)
    assert first.get("traced") is not None           # a real trace, from the sandbox
    entries = list((tmp_path / "cache" / "traces").glob("*.json"))
    assert len(entries) == 1

    # the second ask never reaches the sandbox
    import solforge.sandbox as sandbox

    def refuse(*a, **k):
        raise AssertionError("traced again")
    monkeypatch.setattr(sandbox, "run_python", refuse)
    assert _ask(defn) == first


def test_damaged_entry_is_traced_again(tmp_path, monkeypatch):
    monkeypatch.setenv("SOLFORGE_CACHE_DIR", str(tmp_path / "cache"))
    defn = _definition(tmp_path)
    first = _ask(defn)
    (entry,) = (tmp_path / "cache" / "traces").glob("*.json")
    entry.write_text("{not json")
    assert _ask(defn) == first
    assert json.loads(entry.read_text()) == first     # rewritten whole


def test_other_tracer_code_is_another_key(tmp_path, monkeypatch):
    monkeypatch.setenv("SOLFORGE_CACHE_DIR", str(tmp_path / "cache"))
    defn = _definition(tmp_path)
    _ask(defn)
    import solforge.kernels.trace_cache as tc

    monkeypatch.setattr(tc, "_sources_hash", lambda modules: "another version")
    _ask(defn)
    assert len(list((tmp_path / "cache" / "traces").glob("*.json"))) == 2


def test_a_time_out_is_remembered_within_its_matching_session_only(tmp_path, monkeypatch):
    # a child of the matching ran past the time box: the process reading its answers does not trace
    # again for as long; another session (a later run) asks afresh, as does a process with none
    import pytest

    import solforge.sandbox as sandbox
    from solforge.kernels.trace_cache import SESSION_ENV
    from solforge.sandbox import SandboxError

    monkeypatch.setenv("SOLFORGE_CACHE_DIR", str(tmp_path / "cache"))
    defn = _definition(tmp_path)
    calls = []

    def slow(*a, **k):
        calls.append(1)
        raise SandboxError("timed out after 120 s (killed)", "timeout")
    monkeypatch.setattr(sandbox, "run_python", slow)
    monkeypatch.setenv(SESSION_ENV, "s1")
    for _ in range(2):
        with pytest.raises(SandboxError) as e:
            _ask(defn)
        assert e.value.kind == "timeout"
    assert len(calls) == 1
    monkeypatch.setenv(SESSION_ENV, "s2")
    with pytest.raises(SandboxError):
        _ask(defn)
    assert len(calls) == 2
    monkeypatch.delenv(SESSION_ENV)
    for _ in range(2):
        with pytest.raises(SandboxError):
            _ask(defn)
    assert len(calls) == 4
    assert not list((tmp_path / "cache" / "traces").glob("*.json"))   # no answer was kept
