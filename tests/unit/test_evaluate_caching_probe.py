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
    # round 1: 3 warm-in + 6 seen calls on the timing run's values, then 6 fresh (each new);
    # round 2: the same on a seen set of its own, new to the kernel
    own = keys[15]
    assert own != seen_key
    assert [k == seen_key for k in keys[:15]] == [True] * 9 + [False] * 6
    assert [k == own for k in keys[15:]] == [True] * 9 + [False] * 6
    fresh = keys[9:15] + keys[24:]
    assert len(set(fresh)) == 6 * 2 and seen_key not in fresh and own not in fresh


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
    assert res.caching and len(made) == 8 * 2 + 1        # 8 fresh calls per round, two rounds,
                                                         # and round 2's own seen set
    made.clear()
    # new seeds: the cache holds the first probe's fresh values, which are "seen" now
    run_probe(WallTimer(), counting_make, ins, outs, call, reference, Tolerance(), 8, seed=9000)
    assert len(made) == (3 + 8 + 8) * 2 + 1              # every call's setup makes a set


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


def test_value_dependent_time_on_a_fast_timing_set_is_not_a_cache():
    """Round 1 compares the timing set (fast values) with fresh ones and is suspicious; round 2, on a
    seen set of its own, is not: no rejection. A cache stays caught (the tests above)."""
    ins = make(1)
    ins["x"][0] = 3.0                                     # the timing set routes to the fast path
    outs = {"out": torch.empty(N)}
    call = ValueDependent(ins, outs)
    call()
    from solforge.evaluate.caching_probe import OWN_SEEN_OFFSET

    assert float(make(3000 + 1000 + OWN_SEEN_OFFSET)["x"][0]) <= 2.0   # round 2's own set: slow path
    res = run_probe(WallTimer(), make, ins, outs, call, _value_reference, Tolerance(), 6,
                    prime_calls=5)
    assert not res.wrong_output
    assert len(res.rounds) == 2 and res.rounds[0].suspicious and not res.rounds[1].suspicious
    assert not res.caching
    assert float(ins["x"][0]) == 3.0                      # the timing set's values back in place


def test_round_two_primes_its_own_set_as_often_as_asked():
    ins, outs, call = _setup(FingerprintCache)
    res = run_probe(WallTimer(), make, ins, outs, call, reference, Tolerance(), 4, prime_calls=7)
    assert res.caching
    keys = call.keys_seen[1:]
    own = keys[3 + 4 + 4]
    assert [k == own for k in keys[11:]] == [True] * (7 + 4) + [False] * 4
