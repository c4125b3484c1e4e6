"""solforge/disk_cache.py: an entry comes back as written, a damaged one is a miss, and nothing half
written is ever left where a reader looks."""

from __future__ import annotations

from solforge import disk_cache


def test_entries_round_trip_and_damage_is_a_miss(tmp_path, monkeypatch):
    monkeypatch.setenv("SOLFORGE_CACHE_DIR", str(tmp_path / "c"))
    assert disk_cache.load("compiler", "k1") is None
    disk_cache.save("compiler", "k1", {"reason": "", "ops": {"aten.mm": 2}})
    assert disk_cache.load("compiler", "k1") == {"reason": "", "ops": {"aten.mm": 2}}
    # kinds are separate folders; only finished entries are there
    assert disk_cache.load("traces", "k1") is None
    assert [p.name for p in (tmp_path / "c" / "compiler").iterdir()] == ["k1.json"]
    disk_cache.entry_path("compiler", "k1").write_text('{"reason": ')   # cut short
    assert disk_cache.load("compiler", "k1") is None
    disk_cache.save("compiler", "k1", {"reason": "again"})
    assert disk_cache.load("compiler", "k1") == {"reason": "again"}


def test_a_value_json_cannot_hold_is_not_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("SOLFORGE_CACHE_DIR", str(tmp_path / "c"))
    disk_cache.save("traces", "k", {"x": object()})
    assert disk_cache.load("traces", "k") is None
    assert not [p for p in (tmp_path / "c" / "traces").iterdir() if p.suffix == ".json"]
