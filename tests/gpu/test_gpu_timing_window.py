"""SOL-ExecBench's window on the GPU: a call queued right behind its L2 flush times a single kernel
as the synchronized window does, hides the host's launch gaps of a many-launch call, and reads the
same through cupti-python as through kineto; the eager T_b timing runs NVIDIA's way."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)

from solforge.evaluate import timing  # noqa: E402


def _timer(**kw):
    return timing.Timer("cuda", duty_gap_factor=0.0, duty_min_call_ms=0.5, **kw)


def test_single_kernel_reads_the_same_queued_or_synced():
    x = torch.randn(8 << 20, device="cuda")
    call = lambda i: x.mul_(1.0)  # noqa: E731
    q = _timer(queued=True).measure(call, 50, warmup_calls=10)
    s = _timer(queued=False).measure(call, 50, warmup_calls=10)
    assert q.method == s.method == "cupti"
    assert q.median_ms == pytest.approx(s.median_ms, rel=0.10), (q.median_ms, s.median_ms)


def test_queued_window_hides_launch_gaps_of_many_small_launches():
    x = torch.randn(1024, device="cuda")

    def call(i):
        for _ in range(24):
            x.add_(1.0)

    q = _timer(queued=True).measure(call, 30, warmup_calls=10)
    s = _timer(queued=False).measure(call, 30, warmup_calls=10)
    assert q.kernels_per_call == s.kernels_per_call == 24
    assert q.median_ms < s.median_ms, (q.median_ms, s.median_ms)


def test_cupti_python_and_kineto_agree():
    if timing.CuptiPython.get() is None:
        pytest.skip(f"cupti-python not installed: {timing.CuptiPython.error}")
    x = torch.randn(8 << 20, device="cuda")
    call = lambda i: x.mul_(1.0)  # noqa: E731
    a = _timer(backend="cupti-python").measure(call, 50, warmup_calls=10)
    b = _timer(backend="kineto").measure(call, 50, warmup_calls=10)
    assert (a.backend, b.backend) == ("cupti-python", "kineto")
    assert a.kernels_per_call == b.kernels_per_call == 1
    assert a.median_ms == pytest.approx(b.median_ms, rel=0.10), (a.median_ms, b.median_ms)


def test_eager_reference_timed_like_nvidia():
    from solforge.evaluate.baseline import measure_like_nvidia

    a = torch.randn(256, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.ones(4096, device="cuda", dtype=torch.bfloat16)

    def ref(x, weight):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()).bfloat16()

    ref(a, w)                    # the baseline's first touch (time_problem): no cold call in the window
    torch.cuda.synchronize()
    state: dict = {}
    t = measure_like_nvidia(state, torch.device("cuda"), ref, [[a, w], [a.clone(), w.clone()]],
                            reps=20, budget_s=1.0)
    assert t.method == "cupti" and t.n == timing.NVIDIA_REPS and t.median_ms > 0
    assert state["nvidia_timer"].queued
    assert state["nvidia_timer"].flush_buf.numel() == timing.flush_size(
        torch.cuda.get_device_properties(0).L2_cache_size, "nvidia")


def test_a_gpu_bound_reference_is_busy_for_its_whole_span():
    """Timing.busy_ms: one large matmul a call keeps the GPU busy from the span's start to its end
    (busy within 10% of the span), where a chain of tiny kernels does not (the test below)."""
    from solforge.evaluate.baseline import measure_like_nvidia

    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    torch.mm(a, b)
    torch.cuda.synchronize()
    t = measure_like_nvidia({}, torch.device("cuda"), torch.mm, [[a, b], [a.clone(), b.clone()]],
                            reps=20, budget_s=1.0)
    assert t.busy_ms is not None and 0.9 * t.median_ms <= t.busy_ms <= 1.001 * t.median_ms


def test_eager_t_b_pools_several_readings_of_a_host_bound_reference():
    """measure_eager: a chain of small kernels (host-bound, under eager_windows_below_ms) gets
    eager_windows readings pooled; windows=1 (a hurried run) one."""
    from solforge import settings
    from solforge.evaluate.baseline import measure_eager

    x = torch.randn(64, 128, device="cuda")

    def ref(a):
        for _ in range(8):
            a = torch.sin(a) + 1.0
        return a

    ref(x)
    torch.cuda.synchronize()
    state: dict = {}
    cfg = settings.get()
    t = measure_eager(state, torch.device("cuda"), ref, [[x], [x.clone()]], reps=20, budget_s=1.0)
    assert t.median_ms < cfg.eager_windows_below_ms
    assert t.n == cfg.eager_windows * timing.NVIDIA_REPS
    assert t.note.endswith("ms") and f"{cfg.eager_windows} readings" in t.note
    # 16 tiny kernels a call: the span is mostly the host launching them, the GPU busy a fraction
    assert t.busy_ms is not None and 0 < t.busy_ms < 0.7 * t.median_ms
    one = measure_eager(state, torch.device("cuda"), ref, [[x], [x.clone()]], reps=20, budget_s=1.0,
                        windows=1)
    assert one.n == timing.NVIDIA_REPS and "readings" not in one.note


@pytest.mark.parametrize("backend", ["kineto", "cupti-gpu"])
def test_one_session_reads_what_one_session_per_measurement_reads(backend):
    """Timer.batched: a measurement, work between, a measurement with setup, in one session; each
    reads what it reads on its own (same kernel counts, medians within 10%)."""
    if backend != "kineto" and timing.CuptiPython.get() is None:
        pytest.skip(f"cupti-python not installed: {timing.CuptiPython.error}")
    x = torch.randn(8 << 20, device="cuda")
    y = torch.randn(1 << 20, device="cuda")
    call = lambda i: x.mul_(1.0)  # noqa: E731
    small = lambda i: y.add_(1.0)  # noqa: E731
    alone = _timer(backend=backend)
    a, b = alone.measure(call, 30, warmup_calls=10), alone.measure(
        small, 12, warmup_ms=0, min_warmup_calls=0, setup=lambda i: y.normal_())
    shared = _timer(backend=backend)
    got = {}

    def body():
        got["a"] = shared.measure(call, 30, warmup_calls=10)
        x.sum().item()                       # work between the measurements: in no window
        got["b"] = shared.measure(small, 12, warmup_ms=0, min_warmup_calls=0,
                                  setup=lambda i: y.normal_())

    if backend != "kineto":
        # cupti-python read no records of one session over several measurements on the H200:
        # batched refuses it before running body, and the caller times per measurement
        with pytest.raises(timing.BatchUnavailable):
            shared.batched(body)
        assert not got
        return
    shared.batched(body)
    ga, gb = got["a"].result(), got["b"].result()
    assert (ga.n, gb.n) == (a.n, b.n) and ga.kernels_per_call == a.kernels_per_call == 1
    assert gb.kernels_per_call == b.kernels_per_call == 1
    assert ga.median_ms == pytest.approx(a.median_ms, rel=0.10), (ga.median_ms, a.median_ms)
    assert gb.median_ms == pytest.approx(b.median_ms, rel=0.25), (gb.median_ms, b.median_ms)
