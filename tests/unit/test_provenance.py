"""solforge/provenance.py and the optimize run row (migration 080): commit, torch and CUDA versions."""

from __future__ import annotations

from pathlib import Path

from solforge import provenance as pv


def test_env_commit_wins_and_names_its_source(monkeypatch):
    monkeypatch.setenv("SOLFORGE_COMMIT", "abc123")
    monkeypatch.delenv("SOLFORGE_COMMIT_SOURCE", raising=False)
    assert pv.git_commit() == ("abc123", "env SOLFORGE_COMMIT", None)
    monkeypatch.setenv("SOLFORGE_COMMIT_SOURCE", "prepare_scaling_run manifest")
    assert pv.run_provenance()["commit_source"] == "prepare_scaling_run manifest"


def test_without_env_or_git_the_commit_is_unknown(monkeypatch, tmp_path):
    monkeypatch.delenv("SOLFORGE_COMMIT", raising=False)
    monkeypatch.setattr(pv, "REPO", tmp_path)  # a copy of the tree without .git (the GPU box)
    assert pv.git_commit() == (None, None, None)


def test_git_commit_from_the_checkout(monkeypatch):
    monkeypatch.delenv("SOLFORGE_COMMIT", raising=False)
    if not (pv.REPO / ".git").exists():
        return
    commit, source, dirty = pv.git_commit()
    assert source == "git" and len(commit) == 40 and dirty in (True, False)


def test_versions_without_importing_torch(monkeypatch, tmp_path):
    import importlib.util
    from types import SimpleNamespace

    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "version.py").write_text("__version__ = '2.11.0+cu130'\ngit_version = 'x'\n"
                                     "cuda: Optional[str] = '13.0'\nhip = None\n")
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name: SimpleNamespace(submodule_search_locations=[str(fake)]))
    assert pv.torch_cuda_version() == "13.0"
    (fake / "version.py").write_text("cuda = None\n")
    assert pv.torch_cuda_version() is None
    d = pv.run_provenance()
    assert set(d) >= {"commit", "commit_source", "dirty", "torch", "cuda", "python"}


def test_the_optimize_loop_records_provenance_in_its_run_row(tmp_path, monkeypatch):
    from solforge.store import Store

    monkeypatch.setenv("SOLFORGE_COMMIT", "feedbeef" * 5)
    s = Store(tmp_path / "r.duckdb")
    cfg = {"provenance": pv.run_provenance()}
    rid = s.create_run(kind="optimize", config=cfg, provenance=cfg["provenance"])
    row = s.query_one("SELECT git_commit, torch_version, config FROM runs WHERE id = ?", [rid])
    assert row["git_commit"] == "feedbeef" * 5
    assert row["torch_version"] == cfg["provenance"]["torch"]
    assert row["config"]["provenance"]["commit_source"] == "env SOLFORGE_COMMIT"
    s.close()

