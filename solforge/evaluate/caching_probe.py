"""The caching probe: is a candidate faster on input values it has seen than on values it has not?

A legitimate kernel's time does not depend on whether it met the same values before (the L2 is
flushed before every call either way); a kernel that keys a cache on input contents answers seen
values from the cache and pays the full price only on new ones. (A cache keyed on pointers returns a
stale answer for new values in the same buffers, which the output check here and correctness round 1
reject.)

How it times the two sides so that only the values differ:
- the same buffers and the same prepared call (the last timing set): no first-touch, allocation or
  argument-packing cost on either side. Earlier versions timed freshly allocated probe sets and
  rejected honest ~20 us kernels on the H200, whose fresh calls ran 25-55% slower (5-10 us);
- one profiler session: a few discarded warm-in calls (a session's first calls run slow), then all
  seen calls, then all fresh ones. Not interleaved: a fresh call's answer can evict a seen one
  from a small cache (8 slots in tests/adversarial), which would make "seen" look fresh. The order
  leaves any leftover start-of-session slowness on the seen side, which can only hide a gap, never
  invent one;
- the same untimed setup before every call: make a new input set (the same generation work on both
  sides), write it -- or, for a seen call, the saved seen values -- into the inputs, and poison the
  outputs;
- as many calls per side as a small time budget allows (clamped), so the medians of short, noisy
  kernels are stable;
- a verdict that needs the gap to clear a noise floor taken from the seen calls' own spread
  (interquartile range: a few outliers do not inflate it), and a
  second, independent probe that agrees before anything is rejected. A real cache is caught by
  both; one noisy sample set is not.
"""

from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from .correctness import compare_all, poison_
from .inputs import clone_inputs, write_into
from .timing import resolved

WARM_IN_CALLS = 3
# fresh call j of a round draws its values from seed + FRESH_SEED_OFFSET + j: the seeds do not
# depend on how many calls a side gets, so the sets can be made before the probe is sized
# (evaluator._prepare_probe makes them while the GPU is shared). Rounds are 1000 seeds apart.
FRESH_SEED_OFFSET = 100


def fresh_call_seed(seed: int, j: int) -> int:
    return seed + FRESH_SEED_OFFSET + j
# kernels shorter than this get the same input-making work before seen calls as before fresh ones
SYMMETRIC_BELOW_MS = 1.0


def fresh_seed() -> int:
    """A seed base no earlier evaluation used: the probe's new values must be new to a candidate
    that keeps a cache outside its process (a file), not just new within this run. Correctness and
    timing inputs stay deterministic (seed_for) so that runs can be reproduced."""
    return 1_000_000 + int.from_bytes(os.urandom(5), "little") * 1000


def most_calls(lo: int, hi: int, make_s: float = 0.0, make_budget_s: float = 0.0) -> int:
    """The most calls per side: hi, or fewer (at least lo) where the fresh sets, at make_s seconds
    each to make, would take more than make_budget_s: a reference's own input generator that loops
    in Python over rows costs a second a set, and 24 fresh calls ran such a workload past its limit."""
    lo, hi = max(int(lo), 1), max(int(hi), int(lo), 1)
    if make_s and make_s > 0 and make_budget_s and make_budget_s > 0:
        hi = max(lo, min(hi, int(make_budget_s / make_s)))
    return hi


def probe_calls(median_ms: float, budget_ms: float, lo: int, hi: int) -> int:
    """Calls per side: as many as budget_ms of kernel time allows, at least lo, at most hi (the
    evaluator passes most_calls' bound)."""
    lo, hi = max(int(lo), 1), max(int(hi), int(lo), 1)
    if not median_ms or median_ms <= 0 or math.isnan(median_ms):
        return lo
    return max(lo, min(hi, int(math.ceil(budget_ms / median_ms))))


def _quantile(s: list, q: float) -> float:
    s = sorted(s)
    pos = q * (len(s) - 1)
    i = int(pos)
    j = min(i + 1, len(s) - 1)
    return s[i] + (s[j] - s[i]) * (pos - i)


@dataclass
class Verdict:
    seen_ms: float           # median on values seen before
    fresh_ms: float          # median on never-seen values
    noise_ms: float          # the gap below which a difference counts as noise
    suspicious: bool         # seen < ratio x fresh and the gap clears the noise floor

    @property
    def gap_ms(self) -> float:
        return self.fresh_ms - self.seen_ms


def verdict(seen: list, fresh: list, ratio: float = 0.8, abs_floor_ms: float = 0.002,
            noise_k: float = 1.0) -> Verdict:
    """Compare the medians. Noise floor: the larger of abs_floor_ms and noise_k x the seen calls'
    interquartile range (with one sample per side the floor is abs_floor_ms alone)."""
    if not seen or not fresh:
        raise ValueError("caching probe: no samples")
    s_med, f_med = statistics.median(seen), statistics.median(fresh)
    spread = _quantile(seen, 0.75) - _quantile(seen, 0.25) if len(seen) > 1 else 0.0
    noise = max(abs_floor_ms, noise_k * spread)
    return Verdict(s_med, f_med, noise, f_med > 0 and s_med < ratio * f_med and f_med - s_med > noise)


@dataclass
class ProbeOutcome:
    rounds: list             # one Verdict per probe round run (1, or 2 when the first was suspicious)
    calls: int               # calls per side per round
    wrong_output: bool = False

    @property
    def caching(self) -> bool:
        return bool(self.rounds) and all(v.suspicious for v in self.rounds) and len(self.rounds) >= 2

    @property
    def last(self) -> Verdict:
        return self.rounds[-1]


def run_probe(timer, make_inputs: Callable[[int], dict], inputs: dict, outputs: dict,
              call: Callable[[], object], reference: Callable[[dict], dict], tolerance,
              calls: int, ratio: float = 0.8, abs_floor_ms: float = 0.002,
              noise_k: float = 1.0, seed: int = 3000,
              symmetric_setup: bool = True,
              final_seeds: Optional[list] = None,
              make_ahead: Optional[Callable[[list], bool]] = None) -> ProbeOutcome:
    """Probe one prepared call over its own buffers (`inputs`, `outputs`, values seen before).
    make_inputs(seed) makes a new valid input set; reference(inputs) the expected outputs.
    A second round runs only when the first is suspicious; both must be to call it caching.
    symmetric_setup=False skips making (and discarding) a new set before seen calls: for long
    kernels, whose inputs can be large, where a longer idle before fresh calls can only make them
    faster, i.e. hide a gap, never invent one.
    final_seeds: per round, the seed of the last fresh call (whose output is checked) instead of a
    never-seen one; reference is then called as reference(inputs, seed) (a cached reference).
    make_ahead: start_probe's.
    Each round leaves the seen values in `inputs` as it found them."""
    return start_probe(timer, make_inputs, inputs, outputs, call, reference, tolerance, calls,
                       ratio, abs_floor_ms, noise_k, seed, symmetric_setup, final_seeds,
                       make_ahead)()


def start_probe(timer, make_inputs, inputs, outputs, call, reference, tolerance, calls: int,
                ratio: float = 0.8, abs_floor_ms: float = 0.002, noise_k: float = 1.0,
                seed: int = 3000, symmetric_setup: bool = True,
                final_seeds: Optional[list] = None,
                make_ahead: Optional[Callable[[list], bool]] = None) -> Callable[[], ProbeOutcome]:
    """run_probe's first round now (its calls and its output check), the rest in the function it
    returns: inside Timer.batched the round's samples are read once the session has closed, and a
    second round, when the first is suspicious, runs then in a session of its own.
    make_ahead(seeds), if given, is told each round's fresh seeds before its calls; True: it has
    made those sets (make_inputs now hands them over), so each call's setup is a copy on both sides
    and no seen call makes a set to match (symmetric_setup does not apply)."""
    saved = clone_inputs(inputs)

    def round_(rnd: int):
        final = final_seeds[rnd] if final_seeds and rnd < len(final_seeds) else None
        t, wrong = _one_round(timer, make_inputs, inputs, outputs, call, reference, tolerance,
                              calls, saved, seed + 1000 * rnd, symmetric_setup, final, make_ahead)
        _write(inputs, saved)   # the seen values back: what follows finds the buffers as they were
        return t, wrong

    first = round_(0)

    def finish() -> ProbeOutcome:
        out = ProbeOutcome([], calls)
        t, wrong = first
        for rnd in range(2):
            if rnd:
                t, wrong = round_(rnd)
            if wrong:
                out.wrong_output = True
                return out
            s = resolved(t).samples_ms
            w = WARM_IN_CALLS
            v = verdict(s[w:w + calls], s[w + calls:], ratio, abs_floor_ms, noise_k)
            out.rounds.append(v)
            if not v.suspicious:
                break
        return out

    return finish


def _write(dst: dict, src: dict) -> bool:
    """Copy src's tensors into dst's, all or nothing: if any tensor's shape differs (index inputs
    whose length depends on the values drawn), writing only the others could pair new offsets with
    old indices and send an honest kernel out of bounds. Returns whether it wrote."""
    pairs = []
    for k, v in src.items():
        if not isinstance(v, torch.Tensor):
            continue
        old = dst.get(k)
        if not isinstance(old, torch.Tensor) or old.shape != v.shape or old.dtype != v.dtype:
            return False
        if any(st == 0 and sz > 1 for sz, st in zip(old.shape, old.stride())) and \
                any(st != 0 and sz > 1 and ost == 0 for sz, st, ost in zip(v.shape, v.stride(), old.stride())):
            return False                  # an expanded buffer cannot hold values that vary
        pairs.append((old, v))
    for old, v in pairs:
        write_into(old, v)
    return True


def _one_round(timer, make_inputs, inputs, outputs, call, reference, tolerance, calls, saved,
               seed, symmetric_setup=True, final_seed=None, make_ahead=None):
    """One round's calls (warm-in, seen x calls, fresh x calls) and the check of its last output:
    (its Timing or Pending, whether that output was wrong)."""
    w = WARM_IN_CALLS
    total = w + 2 * calls
    first_fresh = w + calls                     # warm-in, seen x calls, fresh x calls
    fresh_seeds = [fresh_call_seed(seed, j) for j in range(calls)]
    if final_seed is not None:
        fresh_seeds[-1] = final_seed
    symmetric = symmetric_setup and not (make_ahead is not None and make_ahead(fresh_seeds))

    def setup(i):
        if i >= first_fresh:
            _write(inputs, make_inputs(fresh_seeds[i - first_fresh]))
        else:
            if symmetric:
                make_inputs(seed + i)           # made and dropped: the same setup work as fresh
            _write(inputs, saved)
        for t in outputs.values():
            poison_(t, 2)

    t = timer.measure(lambda i: call(), total, warmup_ms=0, min_warmup_calls=0, setup=setup)
    # the last call ran on fresh values: its output must be right
    if final_seed is not None:
        ref = reference(clone_inputs(inputs), final_seed)
    else:
        ref = reference(clone_inputs(inputs))
    return t, not compare_all(outputs, ref, tolerance).ok
