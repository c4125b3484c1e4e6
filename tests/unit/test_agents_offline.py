"""The offline worker's search: best guess first, random picks, local refinement around the best."""

from __future__ import annotations

import itertools

from solforge.agents.offline import OfflineWorker, neighbours, params_key


class _Lab:
    """Only what the search reads from a Lab: whether results are timed."""

    def __init__(self, has_gpu: bool):
        self.has_gpu = has_gpu


class GridFamily:
    """A family whose space is a 3-D grid; the search is scored by a synthetic objective."""

    name = "grid"

    def __init__(self):
        self.space = [{"BLOCK": b, "VEC": v, "UNROLL": u}
                      for b, v, u in itertools.product([32, 64, 128, 256, 512, 1024], [1, 2, 4, 8, 16, 32],
                                                       [1, 2, 4, 8])]

    def param_space(self, problem):
        return list(self.space)


def objective(p: dict) -> float:
    """Unimodal, best at BLOCK=256, VEC=8, UNROLL=2 (far from the space's first point)."""
    import math

    d = (math.log2(p["BLOCK"]) - 8) ** 2 + (math.log2(p["VEC"]) - 3) ** 2 + (math.log2(p["UNROLL"]) - 1) ** 2
    return 1.0 / (1.0 + d)


class _Problem:
    name = "synthetic"


def test_neighbours_differ_in_one_tunable_nearest_first():
    space = GridFamily().space
    nb = neighbours(space, {"BLOCK": 128, "VEC": 4, "UNROLL": 2})
    assert nb and all(sum(p[k] != c for k, c in {"BLOCK": 128, "VEC": 4, "UNROLL": 2}.items()) == 1
                      for p in nb)
    assert len(nb) == 5 + 5 + 3
    first = nb[:6]  # distance-1 steps (one notch up or down in one tunable) come first
    assert {"BLOCK": 64, "VEC": 4, "UNROLL": 2} in first and {"BLOCK": 128, "VEC": 8, "UNROLL": 2} in first


def test_search_finds_the_optimum_well_before_exhausting_the_space(monkeypatch):
    fam = GridFamily()
    w = OfflineWorker(_Lab(has_gpu=True), seed=1)
    monkeypatch.setattr(OfflineWorker, "families_for", staticmethod(lambda problem: [fam]))
    evaluated = 0
    for _ in range(12):
        picks = w.next_params(_Problem(), 4)
        assert picks, "search ran dry before finding the optimum"
        for fs, p, why in picks:
            fs.tried[params_key(fam.name, p)] = objective(p)
            evaluated += 1
        _, best_p, best = w._state(_Problem()).best()
        if best == 1.0:
            break
    assert best == 1.0 and best_p == {"BLOCK": 256, "VEC": 8, "UNROLL": 2}
    assert evaluated <= 48 < len(fam.space)  # a third of the 144 points at most


def test_search_never_repeats_and_reports_exhaustion(monkeypatch):
    class Tiny(GridFamily):
        def __init__(self):
            self.space = [{"BLOCK": b} for b in (64, 128, 256)]

    fam = Tiny()
    w = OfflineWorker(_Lab(has_gpu=True))
    monkeypatch.setattr(OfflineWorker, "families_for", staticmethod(lambda problem: [fam]))
    seen = []
    while True:
        picks = w.next_params(_Problem(), 2)
        if not picks:
            break
        for fs, p, _ in picks:
            seen.append(p["BLOCK"])
            fs.tried[params_key(fam.name, p)] = p["BLOCK"] / 1000
    assert sorted(seen) == [64, 128, 256]  # each point once
    assert w.has_family(_Problem())  # exhaustion is found by propose(), which marks it


def test_without_gpu_only_defaults_are_compiled(monkeypatch):
    fam = GridFamily()
    w = OfflineWorker(_Lab(has_gpu=False))
    monkeypatch.setattr(OfflineWorker, "families_for", staticmethod(lambda problem: [fam]))
    picks = w.next_params(_Problem(), 10)
    assert [p for _, p, _ in picks] == [fam.space[0]]
    picks[0][0].tried[params_key(fam.name, fam.space[0])] = None
    assert w.next_params(_Problem(), 10) == []


def test_remember_seeds_from_previous_attempts(monkeypatch):
    fam = GridFamily()
    w = OfflineWorker(_Lab(has_gpu=True))
    monkeypatch.setattr(OfflineWorker, "families_for", staticmethod(lambda problem: [fam]))
    best = {"BLOCK": 256, "VEC": 8, "UNROLL": 4}
    w.remember(_Problem(), {"notes": "family=grid (random); x", "params": {**best, "HIDDEN": 7}}, 0.8)
    _, p, s = w._state(_Problem()).best()
    assert p == best and s == 0.8
    picks = w.next_params(_Problem(), 3)
    assert any("neighbour of best" in why for _, _, why in picks)
