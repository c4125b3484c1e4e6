"""The caching probe's decision and schedule, on the CPU: real kernels (torch on the CPU, one honest,
one caching by input fingerprint, one caching by pointer) timed with a wall-clock timer that follows
the GPU timer's contract (setup untimed before each call). The GPU run of tests/adversarial covers
the CUDA path."""

from __future__ import annotations

import time

import pytest
import torch

from solforge.evaluate.caching_probe import probe_calls, run_probe, verdict
from solforge.evaluate.timing import Timing
from solforge.problem.workload import Tolerance

N = 1 << 14


@pytest.fixture(autouse=True)
def one_thread():
    # intra-op threads on a busy 2-core runner turn a 1 ms op into 100 ms stalls
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


class WallTimer:
    """Timer.measure's contract on the CPU: setup(i) untimed, then call(i) timed."""

    def __init__(self):
        self.sessions = 0

    def measure(self, call, reps, warmup_ms=0, budget_s=10.0, min_warmup_calls=0, min_reps=5,
                setup=None, steady=None):
        self.sessions += 1
        out = []
        for i in range(reps):
            if setup is not None:
                setup(i)
            t0 = time.perf_counter()
            call(i)
            out.append((time.perf_counter() - t0) * 1e3)
        return Timing(out, "events")


def chain(x, y):
    z = x
    for _ in range(24):
        z = torch.sin(z) + y
    return z


def make(seed):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(N, generator=g), "y": torch.randn(N, generator=g)}


def reference(ins):
    return {"out": chain(ins["x"], ins["y"])}


class Honest:
    def __init__(self, ins, outs):
        self.ins, self.outs = ins, outs

    def __call__(self):
        self.outs["out"].copy_(chain(self.ins["x"], self.ins["y"]))


class FingerprintCache(Honest):
    """Keeps answers keyed by a sample of the input values (like cache_by_fingerprint.cu)."""

    def __init__(self, ins, outs):
        super().__init__(ins, outs)
        self.store, self.keys_seen = {}, []

    def __call__(self):
        key = (tuple(self.ins["x"][:: N // 16].tolist()), tuple(self.ins["y"][:: N // 16].tolist()))
        self.keys_seen.append(key)
        if key not in self.store:
            self.store[key] = chain(self.ins["x"], self.ins["y"])
        self.outs["out"].copy_(self.store[key])


class PointerCache(Honest):
    def __init__(self, ins, outs):
        super().__init__(ins, outs)
        self.last = None

    def __call__(self):
        ptr = self.ins["x"].data_ptr()
        if ptr != self.last:
            self.last = ptr
            super().__call__()


def _setup(kind):
    ins, outs = make(1), {"out": torch.empty(N)}
    call = kind(ins, outs)
    call()                                    # the timing run saw these values
    return ins, outs, call


def _probe(kind, calls=8):
    ins, outs, call = _setup(kind)
    timer = WallTimer()
    res = run_probe(timer, make, ins, outs, call, reference, Tolerance(), calls)
    return res, call, timer


def test_verdict_needs_ratio_and_noise_floor():
    assert verdict([1.0] * 5, [2.0] * 5).suspicious
    assert not verdict([1.0] * 5, [1.1] * 5).suspicious              # within 80%
    # a 10 us gap on 20 us kernels: suspicious with a tight seen set ...
    assert verdict([0.020] * 9, [0.030] * 9).suspicious
    # ... not when the seen calls themselves spread over more than the gap
    noisy = [0.010, 0.014, 0.018, 0.020, 0.026, 0.032, 0.011, 0.030, 0.022]
    v = verdict(noisy, [0.030] * 9)
    assert v.noise_ms > v.gap_ms and not v.suspicious
    # a few outliers among the seen calls (a small cache evicted now and then) do not hide a cache
    hits = [0.004] * 20 + [0.070] * 4
    assert verdict(hits, [0.070] * 24).suspicious
    # a gap under the absolute floor (2 us) is noise however tight the samples are
    assert not verdict([0.004] * 5, [0.0055] * 5).suspicious
    with pytest.raises(ValueError):
        verdict([], [1.0])


def test_probe_calls_scale_with_kernel_time():
    assert probe_calls(0.020, 5.0, 3, 24) == 24       # short kernel: more calls, up to the cap
    assert probe_calls(1.0, 5.0, 3, 24) == 5
    assert probe_calls(100.0, 5.0, 3, 24) == 3        # long kernel: the minimum
    assert probe_calls(float("nan"), 5.0, 3, 24) == 3
    assert probe_calls(0.5, 5.0, 3, 2) == 3           # a max below the min gives the min


def test_probe_calls_fit_the_time_to_make_fresh_sets():
    from solforge.evaluate.caching_probe import most_calls

    def calls(median_ms, make_s):
        return probe_calls(median_ms, 5.0, 3, most_calls(3, 24, make_s=make_s, make_budget_s=2.0))

    assert calls(0.020, 0.001) == 24
    assert calls(0.020, 0.25) == 8
    assert calls(0.020, 5.0) == 3        # never below lo
    assert calls(1.0, 0.25) == 5         # the kernel's bound


def test_honest_kernel_passes():
    res, _, _ = _probe(Honest, calls=12)
    assert not res.wrong_output and not res.caching


def test_fingerprint_cache_caught_in_two_rounds():
    res, call, timer = _probe(FingerprintCache)
    assert not res.wrong_output
    assert res.caching and len(res.rounds) == 2 and timer.sessions == 2
    assert all(r.seen_ms < 0.5 * r.fresh_ms for r in res.rounds)


def test_schedule_seen_values_repeat_fresh_values_never_do():
    _, call, _ = _probe(FingerprintCache, calls=6)
    keys = call.keys_seen[1:]                 # after the timing run's call
    seen_key = call.keys_seen[0]
    # per round: 3 warm-in + 6 seen calls on the timing run's values, then 6 fresh (each new)
    fresh = [k for k in keys if k != seen_key]
    assert len(fresh) == len(set(fresh)) == 6 * 2
    assert [k == seen_key for k in keys] == ([True] * 9 + [False] * 6) * 2


def test_pointer_cache_gives_wrong_output_on_new_values():
    res, _, _ = _probe(PointerCache)
    assert res.wrong_output and not res.rounds


def test_asymmetric_setup_makes_inputs_for_fresh_calls_only():
    ins, outs, call = _setup(FingerprintCache)
    made = []

    def counting_make(seed):
        made.append(seed)
        return make(seed)

    res = run_probe(WallTimer(), counting_make, ins, outs, call, reference, Tolerance(), 8,
                    symmetric_setup=False)
    assert res.caching and len(made) == 8 * 2            # 8 fresh calls per round, two rounds
    made.clear()
    # new seeds: the cache holds the first probe's fresh values, which are "seen" now
    run_probe(WallTimer(), counting_make, ins, outs, call, reference, Tolerance(), 8, seed=9000)
    assert len(made) == (3 + 8 + 8) * 2                  # every call's setup makes a set


def test_sets_made_ahead_leave_the_timed_loop_copies_alone():
    """make_ahead: each round's fresh sets are made before its calls (the evaluator makes the first
    round's while the GPU is shared), so no call's setup runs the input factory; a cache is still
    caught, and the fresh seeds do not depend on how many calls a side gets."""
    from solforge.evaluate.caching_probe import fresh_call_seed

    ins, outs, call = _setup(FingerprintCache)
    ahead, made_in_setup, told = {}, [], []

    def make_ahead(seeds):
        told.append(list(seeds))
        for s in seeds:
            ahead.setdefault(s, make(s))
        return True

    def make_inputs(seed):
        if seed in ahead:
            return ahead.pop(seed)
        made_in_setup.append(seed)
        return make(seed)

    res = run_probe(WallTimer(), make_inputs, ins, outs, call, reference, Tolerance(), 8,
                    seed=5000, make_ahead=make_ahead)
    assert res.caching and made_in_setup == []                  # symmetric_setup not applied
    assert told[0] == [fresh_call_seed(5000, j) for j in range(8)]
    assert told[1] == [fresh_call_seed(6000, j) for j in range(8)]  # the second round's own
    assert [fresh_call_seed(5000, j) for j in range(4)] == told[0][:4]  # fewer calls: a prefix
    # an honest kernel passes the same way; declining (False) falls back to making in setup
    ins, outs, call = _setup(Honest)
    res = run_probe(WallTimer(), make_inputs, ins, outs, call, reference, Tolerance(), 8,
                    seed=7000, make_ahead=lambda seeds: False)
    # a second round runs when a loaded machine makes the first look suspicious: count per round
    assert not res.caching and len(made_in_setup) == (3 + 8 + 8) * len(res.rounds)


def test_fresh_seeds_differ_between_probes():
    from solforge.evaluate.caching_probe import fresh_seed

    seeds = {fresh_seed() for _ in range(50)}
    assert len(seeds) == 50 and min(seeds) >= 1_000_000


def test_write_is_all_or_nothing():
    from solforge.evaluate.caching_probe import _write

    dst = {"indptr": torch.tensor([0, 2, 4]), "indices": torch.arange(4), "n": 3}
    ok = {"indptr": torch.tensor([0, 1, 4]), "indices": torch.tensor([3, 2, 1, 0]), "n": 3}
    assert _write(dst, ok) and dst["indptr"].tolist() == [0, 1, 4]
    # a new draw with a different number of indices: nothing is written, not the offsets alone
    bad = {"indptr": torch.tensor([0, 3, 5]), "indices": torch.arange(5), "n": 3}
    assert not _write(dst, bad)
    assert dst["indptr"].tolist() == [0, 1, 4] and dst["indices"].tolist() == [3, 2, 1, 0]


class FirstSetsCache(Honest):
    """Caches only the first input sets it sees twice (the timing sets), then stops caching: a
    second probe round on new values would find nothing cached. Both rounds probe the timing set's
    own values, so it is caught."""

    def __init__(self, ins, outs, k=1):
        super().__init__(ins, outs)
        self.k, self.counts, self.store = k, {}, {}

    def __call__(self):
        key = (tuple(self.ins["x"][:: N // 16].tolist()), tuple(self.ins["y"][:: N // 16].tolist()))
        if key in self.store:
            self.outs["out"].copy_(self.store[key])
            return
        self.counts[key] = self.counts.get(key, 0) + 1
        out = chain(self.ins["x"], self.ins["y"])
        if self.counts[key] >= 2 and len(self.store) < self.k:
            self.store[key] = out
        self.outs["out"].copy_(out)


def test_a_cache_of_the_timing_set_alone_is_caught():
    ins, outs = make(1), {"out": torch.empty(N)}
    call = FirstSetsCache(ins, outs)
    call()
    call()                                    # the timing run saw these values twice: cached
    res = run_probe(WallTimer(), make, ins, outs, call, reference, Tolerance(), 8)
    assert res.caching and len(res.rounds) == 2


class ValueDependent(Honest):
    """Honest, with work that depends on the values (like tokens routed to experts): 1 pass when
    x[0] > 2, else 4. The timing run's set is one of the rare fast ones."""

    def __call__(self):
        z = self.ins["y"]
        for _ in range(1 if float(self.ins["x"][0]) > 2.0 else 4):
            z = chain(self.ins["x"], z)
        self.outs["out"].copy_(z)


def _value_reference(ins):
    z = ins["y"]
    for _ in range(1 if float(ins["x"][0]) > 2.0 else 4):
        z = chain(ins["x"], z)
    return {"out": z}


@pytest.mark.xfail(strict=True, reason="known limit: an honest kernel whose time follows its values "
                   "and whose timing set is a fast one looks like a cache of that set (the H200 "
                   "rejected a compiled MoE dispatch plan so); probing a new seen set instead would "
                   "let a cache of the timing set alone pass (the test above)")
def test_value_dependent_time_on_a_fast_timing_set_is_not_a_cache():
    ins = make(1)
    ins["x"][0] = 3.0                                     # the timing set routes to the fast path
    outs = {"out": torch.empty(N)}
    call = ValueDependent(ins, outs)
    call()
    res = run_probe(WallTimer(), make, ins, outs, call, _value_reference, Tolerance(), 6)
    assert not res.wrong_output and not res.caching
