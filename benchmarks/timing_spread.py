#!/usr/bin/env python3
"""Is the evaluator's timer repeatable? Times each kernel twice -- once on a cool card, once right
after a sustained full-power bf16 GEMM load has heated it -- under several timing methods side by
side, and reports both medians and their difference; the bar is 3% (median).

    python benchmarks/timing_spread.py --out data/results/timing_spread/timing_spread_h200_run4.txt \
        --json data/results/timing_spread/timing_spread_h200_run4.json

Device command (about 60-80 s; kind nvidia-h200, or on nvidia-h200-x2 next to other work with
CUDA_VISIBLE_DEVICES=1 in front of python3; carry .whl):

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
      .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit; export PYTHONUNBUFFERED=1; \
    timeout 170 python3 benchmarks/timing_spread.py --out $OUT/timing_spread_h200_run4.txt \
      --json $OUT/timing_spread_h200_run4.json > $OUT/timing_spread_h200_run4.log 2>&1; \
    echo rc=$?; tail -5 $OUT/timing_spread_h200_run4.log; cat $OUT/timing_spread_h200_run4.txt

Why two states: a power-limited kernel (the 8192^3 bf16 GEMM runs the H200 at its power limit) is
timed faster on a cool card than on one that has just run at full power for seconds (run 3: 1.39 vs
1.60 ms, 15.6%), so "the same kernel timed twice" only agrees if the method measures it in the same
power state whatever ran before. Clocks are read (NVML, read-only) but never set.

Methods (timer settings for one measurement, 50 reps, L2 flushed, CUPTI span):
  plain    warm-up 25 ms, calls back to back (the evaluator before the duty cycle)
  default  the Timer's defaults from solforge/settings.py (duty cycle for calls >= 0.5 ms wall)
  duty0.5  idle 0.5 x each call's time after it, every kernel
  duty2    idle 2 x each call's time after it, every kernel
  duty4    idle 4 x each call's time after it                    (GEMM only)
  cool1s   1 s idle, then plain                                  (GEMM only)
  steady   warm up until the rolling median of 20 calls is stable within 1% (at most 3 s), back
           to back                                               (GEMM only)
  warm2s   2 s of back-to-back warm-up, then plain (run 3)       (GEMM only)

Phases: idle 1 s; pass 1 (cool); heat: HEAT_S seconds of back-to-back GEMM with per-call event
times and NVML clock/power/temperature/throttle reasons (printed per second); pass 2 (hot), same
order. Kernels: bf16 GEMM 8192^3 (compute-bound, power-limited), 512 MiB copy (memory-bound),
1M-element sigmoid (launch-scale), softmax 4096x8192 bf16, and the adversarial control kernel good.cu
through the candidate launcher (the path candidates take; cubins from $SOLFORGE_ADV_CUBINS if set).
Last, the evaluator's caching probe is run PROBE_REPEATS times on honest short kernels and on the
adversarial fingerprint cache (tests/adversarial/cache_by_fingerprint.cu): how often each is called
caching (honest: never; the cache: every time).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "adversarial"))

GEMM = "gemm_bf16_8192"
# name -> (warmup_ms, duty_gap_factor or None for the settings' default, duty_min_call_ms or None,
#          idle_before_s, steady, gemm_only)
METHODS = {
    "default": (25.0, None, None, 0.0, None, False),
    "duty0.5": (25.0, 0.5, 0.0, 0.0, None, False),
    "duty2": (25.0, 2.0, 0.0, 0.0, None, False),
    "plain": (25.0, 0.0, 0.0, 0.0, None, False),
    "duty4": (25.0, 4.0, 0.0, 0.0, None, True),
    "cool1s": (25.0, 0.0, 0.0, 1.0, None, True),
    "steady": (25.0, 0.0, 0.0, 0.0, (20, 0.01, 3000.0), True),
    "warm2s": (2000.0, 0.0, 0.0, 0.0, None, True),
}
THROTTLE_BITS = {0x1: "idle", 0x2: "app_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
                 0x10: "sync_boost", 0x20: "sw_thermal", 0x40: "hw_thermal",
                 0x80: "hw_power_brake", 0x100: "display_clocks"}


def kernels(torch):
    dev = "cuda"
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device=dev)
    b = torch.randn(8192, 8192, dtype=torch.bfloat16, device=dev)
    src = torch.randn(128 << 20, device=dev)  # 512 MiB
    dst = torch.empty_like(src)
    x = torch.randn(1 << 20, device=dev)
    s = torch.randn(4096, 8192, dtype=torch.bfloat16, device=dev)
    out = {
        GEMM: lambda i: torch.mm(a, b),
        "copy_512MiB": lambda i: dst.copy_(src),
        "elementwise_1M": lambda i: torch.sigmoid(x),
        "softmax_4096x8192_bf16": lambda i: torch.softmax(s, dim=-1),
    }
    try:
        tens, plan = launcher_call(torch, "good", 1 << 20)
        out["candidate_sin_chain_1M (launcher)"] = lambda i: plan.run()
    except Exception as e:  # noqa: BLE001
        print(f"launcher kernel unavailable: {e}", file=sys.stderr)
    return out


def launcher_call(torch, name: str, n: int):
    """tests/adversarial/<name>.cu through the candidate launcher on x, y -> out of n floats."""
    import harness

    from solforge.compile.launcher import CandidateRuntime

    cand = harness.cuda_candidate(harness.HERE / f"{name}.cu")
    cr = harness.compiled(cand, name)
    rt = CandidateRuntime(cand, cr.cubins, cr.launch_manifest())
    tens = {"x": torch.randn(n, device="cuda"), "y": torch.randn(n, device="cuda"),
            "out": torch.empty(n, device="cuda")}
    return tens, rt.prepare(tens, {"n": n}, {})


def probe_checks(torch, timer, repeats: int) -> list:
    """The evaluator's caching probe (solforge/evaluate/caching_probe.py) on honest kernels (short
    ones are where it used to misfire) and on the adversarial fingerprint cache, `repeats` times
    each: how often each is called caching."""
    from solforge.evaluate.caching_probe import probe_calls, run_probe
    from solforge.problem.workload import Tolerance

    def chain(ins):
        z = ins["x"]
        for _ in range(64):
            z = torch.sin(z) + ins["y"]
        return {"out": z}

    cases = []
    for n in (1 << 20, 1 << 14):
        ins = {"x": torch.randn(n, device="cuda"), "y": torch.randn(n, device="cuda")}
        outs = {"out": torch.empty(n, device="cuda")}
        cases.append((f"torch sigmoid {n} (honest)", ins, outs,
                      lambda ins=ins, outs=outs: torch.sigmoid(ins["x"], out=outs["out"]),
                      lambda i: {"out": torch.sigmoid(i["x"])}))
    a = torch.randn(2048, 2048, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(2048, 128, dtype=torch.bfloat16, device="cuda")
    gi, go = {"a": a, "b": b}, {"c": torch.empty(2048, 128, dtype=torch.bfloat16, device="cuda")}
    cases.append(("torch mm 2048x2048x128 bf16 (honest)", gi, go,
                  lambda: torch.mm(gi["a"], gi["b"], out=go["c"]),
                  lambda i: {"c": torch.mm(i["a"], i["b"])}))
    for name, label in (("good", "honest"), ("cache_by_fingerprint", "caching")):
        try:
            tens, plan = launcher_call(torch, name, 1 << 20)
        except Exception as e:  # noqa: BLE001
            print(f"probe case {name} unavailable: {e}", file=sys.stderr)
            continue
        ins = {"x": tens["x"], "y": tens["y"]}
        cases.append((f"launcher {name}.cu 1M ({label})", ins, {"out": tens["out"]},
                      plan.run, chain))
    rows = []
    for label, ins, outs, call, ref in cases:
        def make(seed, ins=ins):
            return {k: (torch.randn_like(v) if v.is_floating_point() else v) for k, v in ins.items()}
        caught, first = 0, []
        for r in range(repeats):
            t = timer.measure(lambda i: call(), 20, 25.0)     # the "timing run": values seen
            n = probe_calls(t.median_ms, 5.0, 3, 24)
            res = run_probe(timer, make, ins, outs, call, ref, Tolerance(), n, seed=100 * r)
            caught += bool(res.caching)
            if res.rounds:
                first.append((res.rounds[0].seen_ms, res.rounds[0].fresh_ms, res.rounds[0].noise_ms,
                              len(res.rounds)))
            if res.wrong_output:
                first.append(("wrong output",))
        rows.append({"case": label, "repeats": repeats, "caught": caught, "calls": n,
                     "median_ms": t.median_ms, "rounds": first})
        print(f"  probe {label:40s} caught {caught}/{repeats}", flush=True)
    return rows


class NvmlSampler(threading.Thread):
    """Reads SM clock, power, temperatures and clock-event (throttle) reasons every `period_s`.
    Read-only: never changes a setting."""

    def __init__(self, torch, period_s: float = 0.05):
        super().__init__(daemon=True)
        self.period_s, self.samples, self.error = period_s, [], ""
        self._halt = threading.Event()
        try:
            import pynvml

            pynvml.nvmlInit()
            try:
                idx = torch.cuda._get_nvml_device_index(torch.cuda.current_device())
            except Exception:  # noqa: BLE001
                idx = 0
            self.nv, self.h = pynvml, pynvml.nvmlDeviceGetHandleByIndex(idx)
            try:
                self.power_limit_w = pynvml.nvmlDeviceGetEnforcedPowerLimit(self.h) / 1000.0
            except Exception:  # noqa: BLE001
                self.power_limit_w = None
        except Exception as e:  # noqa: BLE001
            self.nv, self.error, self.power_limit_w = None, f"{type(e).__name__}: {e}", None

    def read(self) -> dict:
        nv, h = self.nv, self.h
        d = {"t": time.perf_counter(), "sm_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)}
        for key, fn in (("power_w", lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0),
                        ("temp_c", lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
                        ("reasons", lambda: _reasons(nv, h)),
                        ("mem_temp_c", lambda: _mem_temp(nv, h))):
            try:
                d[key] = fn()
            except Exception:  # noqa: BLE001
                d[key] = None
        return d

    def run(self):
        while self.nv is not None and not self._halt.is_set():
            try:
                self.samples.append(self.read())
            except Exception as e:  # noqa: BLE001
                self.error = f"{type(e).__name__}: {e}"
                return
            self._halt.wait(self.period_s)

    def stop(self):
        self._halt.set()

    def window(self, t0: float, t1: float) -> dict:
        w = [s for s in list(self.samples) if t0 <= s["t"] <= t1]
        if not w:
            return {}
        def med(k):
            v = [s[k] for s in w if s.get(k) is not None]
            return statistics.median(v) if v else None
        reasons = 0
        for s in w:
            reasons |= s.get("reasons") or 0
        return {"sm_mhz": med("sm_mhz"), "min_sm_mhz": min(s["sm_mhz"] for s in w),
                "power_w": med("power_w"), "temp_c": med("temp_c"), "mem_temp_c": med("mem_temp_c"),
                "reasons": reasons}


def _reasons(nv, h) -> int:
    fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        nv.nvmlDeviceGetCurrentClocksThrottleReasons
    return int(fn(h))


def _mem_temp(nv, h):
    fid = getattr(nv, "NVML_FI_DEV_MEMORY_TEMP", 82)
    v = nv.nvmlDeviceGetFieldValues(h, [fid])[0]
    if getattr(v, "nvmlReturn", 1) != 0:
        return None
    return int(v.value.uiVal)


def reason_names(mask: int) -> str:
    names = [n for b, n in THROTTLE_BITS.items() if mask & b]
    return "+".join(names) if names else "-"


def measure(torch, timer, name, fn, method, reps, sampler):
    warmup_ms, gap, min_ms, idle_s, steady, _ = METHODS[method]
    timer.duty_gap_factor = timer.default_gap if gap is None else gap
    timer.duty_min_call_ms = timer.default_min if min_ms is None else min_ms
    torch.cuda.synchronize()
    if idle_s:
        time.sleep(idle_s)
    t0 = time.perf_counter()
    t = timer.measure(fn, reps, warmup_ms, budget_s=10.0, steady=steady)
    t1 = time.perf_counter()
    return {"method": method, "kernel": name, "median_ms": t.median_ms, "p10_ms": t.p10_ms,
            "p90_ms": t.p90_ms, "spread": t.spread, "n": t.n, "timing_method": t.method,
            "warmup_calls": timer.last_warmup_calls, "gap_ms": timer.last_gap_s * 1e3,
            "wall_s": t1 - t0, "nvml": sampler.window(t0, t1), "samples_ms": t.samples_ms}


def heat(torch, timer, fn, seconds, sampler):
    """Back-to-back flushed GEMMs for `seconds`, each timed with events: the drift a long, busy
    measurement sees, bucketed per second."""
    rows, t_start = [], time.perf_counter()
    while time.perf_counter() - t_start < seconds:
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        timer.flush()
        e0.record()
        fn(0)
        e1.record()
        e1.synchronize()
        rows.append((time.perf_counter() - t_start, e0.elapsed_time(e1)))
    buckets = []
    for sec in range(int(seconds)):
        ms = [m for t, m in rows if sec <= t < sec + 1]
        if not ms:
            continue
        nv = sampler.window(t_start + sec, t_start + sec + 1)
        buckets.append({"second": sec, "calls": len(ms), "median_ms": statistics.median(ms), **nv})
    return buckets


def fmt_nv(nv: dict) -> str:
    if not nv:
        return "-"
    mt = nv.get("mem_temp_c")
    return (f"{nv['sm_mhz']:.0f}/{nv['min_sm_mhz']:.0f} MHz {nv['power_w'] or 0:.0f} W "
            f"{nv['temp_c'] or 0:.0f}C{'' if mt is None else f' mem {mt}C'} "
            f"{reason_names(nv['reasons'])}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=REPO / "data/results/timing_spread/timing_spread_h200.txt")
    ap.add_argument("--json", type=Path, default=None, help="raw samples and NVML trace")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--heat-s", type=float, default=15.0,
                    help="seconds of back-to-back GEMM between the two passes")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--only", default="", help="comma-separated kernel names (default: all)")
    ap.add_argument("--probe-repeats", type=int, default=3,
                    help="caching-probe checks per case after pass 2 (0: none)")
    args = ap.parse_args()
    import torch

    from solforge.evaluate import hardware
    from solforge.evaluate.timing import Timer

    t_script = time.perf_counter()
    timer = Timer(torch.device("cuda"))
    timer.default_gap, timer.default_min = timer.duty_gap_factor, timer.duty_min_call_ms
    ks = kernels(torch)
    if args.only:
        ks = {k: v for k, v in ks.items() if k in args.only.split(",")}
    methods = [m for m in args.methods.split(",") if m in METHODS]
    sampler = NvmlSampler(torch)
    sampler.start()
    for fn in ks.values():          # first calls (cuBLAS handles, module loads) out of the way
        fn(0)
    torch.cuda.synchronize()
    time.sleep(1.0)
    idle = sampler.window(time.perf_counter() - 1.0, time.perf_counter())

    def one_pass():
        res = []
        for m in methods:
            for name, fn in ks.items():
                if METHODS[m][5] and name != GEMM:
                    continue
                res.append(measure(torch, timer, name, fn, m, args.reps, sampler))
                print(f"  {m:8s} {name:36s} {res[-1]['median_ms']:.5f} ms  "
                      f"{fmt_nv(res[-1]['nvml'])}", flush=True)
        return res

    print("pass 1 (cool card)", flush=True)
    cool = one_pass()
    trace = []
    if GEMM in ks and args.heat_s > 0:
        timer.duty_gap_factor = 0.0
        print(f"heat: {args.heat_s:g} s of back-to-back GEMM", flush=True)
        trace = heat(torch, timer, ks[GEMM], args.heat_s, sampler)
    print("pass 2 (after the heat)", flush=True)
    hot = one_pass()
    probes = []
    if args.probe_repeats > 0:
        timer.duty_gap_factor, timer.duty_min_call_ms = timer.default_gap, timer.default_min
        print("caching probe checks", flush=True)
        probes = probe_checks(torch, timer, args.probe_repeats)
    sampler.stop()
    hw = hardware.capture(timing_method=cool[0]["timing_method"] if cool else "")

    lines = [f"# timing repeatability: each kernel measured twice, once on a cool card and once right "
             f"after {args.heat_s:g} s of back-to-back bf16 GEMM",
             f"# ({args.reps} reps per measurement, L2 flushed, CUPTI span); GPU {hw.gpu_name}, driver "
             f"{hw.driver}, torch {hw.torch_version}, power limit {sampler.power_limit_w} W",
             f"# settings default: duty_gap_factor {timer.default_gap:g}, duty_min_call_ms "
             f"{timer.default_min:g}; timing method {hw.timing_method} {timer.cupti_error}",
             f"# idle before pass 1: {fmt_nv(idle)}   nvml: {sampler.error or 'ok'}",
             f"{'method':8s} {'kernel':36s} {'cool_ms':>9s} {'hot_ms':>9s} {'diff_%':>6s} "
             f"{'p10-p90/med':>11s} {'ok_3%':>5s}  nvml cool | hot (median/min SM clock, power, "
             f"temp, clock-event reasons)"]
    worst: dict[str, float] = {}
    for c, h in zip(cool, hot):
        m1, m2 = c["median_ms"], h["median_ms"]
        d = abs(m1 - m2) / min(m1, m2) * 100
        worst[c["method"]] = max(worst.get(c["method"], 0.0), d)
        sp = max(c["spread"], h["spread"])
        lines.append(f"{c['method']:8s} {c['kernel']:36s} {m1:9.5f} {m2:9.5f} {d:6.2f} {sp:11.3f} "
                     f"{'yes' if d <= 3 else 'NO':>5s}  {fmt_nv(c['nvml'])} | {fmt_nv(h['nvml'])}"
                     f"  [warm-up {c['warmup_calls']}/{h['warmup_calls']} calls, gap "
                     f"{c['gap_ms']:.3f}/{h['gap_ms']:.3f} ms]")
    lines.append("# worst difference per method: " +
                 ", ".join(f"{m} {w:.2f}%" for m, w in worst.items()))
    if trace:
        lines.append("# heat trace (per second of back-to-back GEMM): second, calls, median ms, nvml")
        for b in trace:
            lines.append(f"#   {b['second']:3d} {b['calls']:5d} {b['median_ms']:.4f} "
                         f"{fmt_nv({k: b.get(k) for k in ('sm_mhz', 'min_sm_mhz', 'power_w', 'temp_c', 'mem_temp_c', 'reasons')}) if b.get('sm_mhz') else '-'}")
    if probes:
        lines.append("# caching probe (evaluator's caching_probe.run_probe): case, probes calling it "
                     "caching, calls per side, first round's seen/fresh/noise ms and rounds per probe")
        for p in probes:
            rs = "; ".join("/".join(f"{x:.4f}" if isinstance(x, float) else str(x) for x in r)
                           for r in p["rounds"])
            lines.append(f"#   {p['case']:40s} {p['caught']}/{p['repeats']}  n={p['calls']}  {rs}")
    lines.append(f"# script wall {time.perf_counter() - t_script:.1f} s")
    text = "\n".join(lines) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    if args.json:
        args.json.write_text(json.dumps({"cool": cool, "hot": hot, "heat_trace": trace, "probes": probes,
                                         "idle": idle, "hardware": dataclasses.asdict(hw),
                                         "nvml_samples": sampler.samples}, default=str))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
