"""HybridMode's shortcuts (fastpaths.py, build_fast.py) give exactly what torch / HybridMode give."""

import itertools
import math
import os
from pathlib import Path

import pytest
import torch

from solforge.problem.loader import load_problem_dir

from solforge.roofline import build_fast
from solforge.roofline.estimate import CountStatus, _exec_reference, trace_workload
from solforge.roofline.fastpaths import MIN_PERMUTED_NUMEL, ViewNonzero, index_meta, masked_fill, shape_meta
from solforge.roofline.trace import HybridMode, Origins


@pytest.mark.parametrize("shape,indices", [
    ((50, 8), [(7,)]),
    ((6, 5, 4), [None, (3,)]),
    ((6, 5, 4), [(2, 3), (3,)]),
    ((6, 5, 4), [None, (4, 1), (1, 2)]),
    ((6, 5, 4, 3), [(2,), (2,)]),
])
def test_index_meta_matches_torch_meta_kernel(shape, indices):
    x = torch.empty(shape, device="meta")
    idx = [None if s is None else torch.randint(0, 3, s) for s in indices]
    ours = index_meta(x, idx)
    theirs = torch.ops.aten.index.Tensor(x, [None if i is None else i.to("meta") for i in idx])
    assert ours is not None
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype and ours.stride() == theirs.stride()


def test_index_meta_declines_masks_gaps_and_strided_inputs():
    x = torch.empty(6, 5, 4, device="meta")
    assert index_meta(x, [torch.ones(6, dtype=torch.bool)]) is None
    assert index_meta(x, [torch.zeros(2, dtype=torch.long), None, torch.zeros(2, dtype=torch.long)]) is None
    assert index_meta(x.transpose(0, 1), [torch.zeros(2, dtype=torch.long)]) is None


def test_view_nonzero_equals_torch_nonzero_on_views_of_a_permuted_mask():
    g = torch.Generator().manual_seed(0)
    sel = torch.randint(0, 64, (2048, 10), generator=g)
    onehot = torch.nn.functional.one_hot(sel, 64)  # [T, k, E], contiguous, > MIN_PERMUTED_NUMEL
    assert onehot.numel() >= MIN_PERMUTED_NUMEL
    vn = ViewNonzero()
    checked = 0
    for order in itertools.permutations(range(3)):
        v = onehot.permute(order)
        views = [v[0], v[5], v[-1], v[:, 3], v[2, :, 7], v[1].unsqueeze(0), v[3, None]]
        for view in views:
            assert torch.equal(vn.nonzero(view), torch.nonzero(view))
            checked += 1
    # an in-place write into the base is seen (kept positions are keyed by the base's version)
    v = onehot.permute(2, 1, 0)
    assert torch.equal(vn.nonzero(v[3]), torch.nonzero(v[3]))
    onehot[:, :, 3] = 1 - onehot[:, :, 3]
    assert torch.equal(vn.nonzero(v[3]), torch.nonzero(v[3]))
    # not whole dims (a partial slice), a bool mask, a small base: torch's own answer
    assert torch.equal(vn.nonzero(v[3, :, 10:20]), torch.nonzero(v[3, :, 10:20]))
    b = onehot.bool().permute(1, 2, 0)
    assert torch.equal(vn.nonzero(b[4]), torch.nonzero(b[4]))
    small = torch.nn.functional.one_hot(sel[:8], 64).permute(2, 1, 0)
    assert torch.equal(vn.nonzero(small[6]), torch.nonzero(small[6]))
    assert checked == 42


_BUILDER = '''
import torch
def get_inputs(axes, device):
    n = axes["n"]
    sel = torch.zeros(n, 4, dtype=torch.int64, device=device)
    for i in range(n):
        sel[i] = torch.randperm(32, device=device)[:4]
    grid = torch.zeros(2, n, 3, dtype=torch.int64, device=device)
    for b in range(2):
        for i in range(n):
            grid[b, i, 0] = i // 7
    w = torch.randn(n, 4096, dtype=torch.bfloat16, device=device) * 0.02   # big: fake
    q = torch.randn(n, 8, device=device).to(torch.float8_e4m3fn)           # small fp8 data
    deq = q.to(torch.float32) * 2.0                                        # tagged fp8 origin
    r = torch.softmax(torch.randn(n, 4, dtype=torch.bfloat16).float(), -1).to(torch.bfloat16)
    return {"sel": sel, "grid": grid, "w": w, "deq": deq, "r": r}
'''


def _build(fast: bool, n: int):
    mod: dict = {}
    exec(_BUILDER, mod)  # noqa: S102
    origins = Origins()
    if fast:
        out, how = build_fast.build_fast(lambda: mod["get_inputs"]({"n": n}, torch.device("cpu")), origins, 3)
    else:
        torch.manual_seed(3)
        with HybridMode(counting=False, origins=origins):
            out, how = mod["get_inputs"]({"n": n}, torch.device("cpu")), "hybrid"
    return out, how, origins


def test_fast_build_gives_what_hybrid_mode_builds():
    fast, how, o_fast = _build(True, 40)
    slow, _, o_slow = _build(False, 40)
    assert how == "fast"
    for k in slow:
        a, b = fast[k], slow[k]
        assert (a.shape, a.dtype, a.is_meta) == (b.shape, b.dtype, b.is_meta), k
        if not a.is_meta:
            assert torch.equal(a.float(), b.float()), k  # same RNG stream, same values
        assert o_fast.rank(a) == o_slow.rank(b), k  # same precision origin (fp8 data stays fp8)
    assert fast["w"].is_meta and o_fast.rank(fast["deq"]) == 1


def test_fast_build_falls_back_when_a_native_call_makes_a_big_tensor():
    src = '''
import torch
def get_inputs(axes, device):
    idx = torch.arange(8, device=device)
    big = idx.float().repeat(100000)   # small real input, big float result: HybridMode keeps it fake
    return {"big": big, "idx": idx}
'''
    mod: dict = {}
    exec(src, mod)  # noqa: S102
    out, how = build_fast.build_fast(lambda: mod["get_inputs"]({}, torch.device("cpu")), Origins(), 0)
    assert how.startswith("Fallback") and out["big"].is_meta


def test_masked_fill_equals_index_put_with_a_mask():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 64, 32, generator=g)
    for dtype in (torch.uint8, torch.float32, torch.bfloat16):
        a = (x * 4).to(dtype)
        b = a.clone()
        mask = (x > 0.25) & (x < 0.75)
        val = torch.tensor(7, dtype=dtype)
        out = masked_fill((a, [mask], val), {})
        torch.ops.aten.index_put_(b, [mask], val)
        assert out is a and torch.equal(a, b)
    y = torch.zeros(4, 64, 32)
    assert masked_fill((y, [mask], torch.tensor(1.0), True), {}) is None  # accumulate
    assert masked_fill((y, [mask[0]], torch.tensor(1.0)), {}) is None  # a mask of part of the dims
    assert masked_fill((y, [mask], torch.ones(3)), {}) is None  # a values tensor


def test_fast_build_mask_assignment_equals_setitem():
    src = '''
import torch
def get_inputs(axes, device):
    x = torch.randn(1, 64, 4096, device=device)            # big: fake, masks from filled values
    r = torch.zeros_like(x, dtype=torch.uint8)
    r[(x >= 0.0) & (x <= 0.25)] = 3
    r[x > 1.0] = 7
    packed = r[..., ::2] + r[..., 1::2] * 16
    return {"packed": packed.view(torch.float4_e2m1fn_x2), "r": r}
'''
    mod: dict = {}
    exec(src, mod)  # noqa: S102
    fast, how = build_fast.build_fast(lambda: mod["get_inputs"]({}, torch.device("cpu")), Origins(), 0)
    torch.manual_seed(0)
    with HybridMode(counting=False, origins=Origins()):
        slow = mod["get_inputs"]({}, torch.device("cpu"))
    assert how == "fast"
    assert not fast["r"].is_meta and torch.equal(fast["r"], slow["r"]) and int(fast["r"].max()) == 7
    a, b = fast["packed"], slow["packed"]
    # HybridMode fakes the float4 view (torch's detach after it, on a big float): so must the fast build
    assert (a.is_meta, a.shape, a.dtype) == (b.is_meta, b.shape, b.dtype) == (True, b.shape, b.dtype)


@pytest.mark.parametrize("op,shapes,transpose", [
    ("mm", [(7, 5), (5, 3)], False),
    ("mm", [(7, 5), (3, 5)], True),
    ("bmm", [(2, 7, 5), (2, 5, 3)], False),
    ("bmm", [(2, 7, 5), (2, 3, 5)], True),
    ("addmm", [(3,), (7, 5), (5, 3)], False),
    ("addmm", [(7, 3), (7, 5), (3, 5)], True),
    ("baddbmm", [(2, 7, 3), (2, 7, 5), (2, 5, 3)], False),
])
def test_shape_meta_matches_torch_meta_kernels(op, shapes, transpose):
    ts = [torch.empty(s, device="meta", dtype=torch.bfloat16) for s in shapes]
    if transpose:
        ts[-1] = ts[-1].transpose(-1, -2)
    func = getattr(torch.ops.aten, op).default
    ours = shape_meta(func, tuple(ts), {})
    theirs = func(*ts)
    assert ours is not None
    assert (ours.shape, ours.dtype, ours.stride()) == (theirs.shape, theirs.dtype, theirs.stride())


def test_shape_meta_leaves_malformed_calls_to_the_kernel():
    a, b = torch.empty(7, 5, device="meta"), torch.empty(4, 3, device="meta")
    assert shape_meta(torch.ops.aten.mm.default, (a, b), {}) is None  # K differs: the kernel raises
    c = torch.empty(5, 3, device="meta", dtype=torch.bfloat16)
    assert shape_meta(torch.ops.aten.mm.default, (a, c), {}) is None  # dtypes differ
    assert shape_meta(torch.ops.aten.addmm.default, (torch.empty(2, 3, device="meta"), a,
                                                     torch.empty(5, 3, device="meta")), {}) is None


SHARED = Path(os.environ.get("SOLFORGE_SHARED_DIR", Path(__file__).resolve().parents[3] / "shared"))

# builders with per-element loops (012: randperm per token, 034: a grid per position), NVFP4 encoders
# (masks and float4 views in the builder and the reference), an MoE loop over a permuted one_hot
FAST_BUILD_SAMPLE = ["L2/012_moe_expert_batched_execution_with_capacity_factor",
                     "L2/034_vision_language_cross_attention_fusion",
                     "Quant/026_nvfp4_mamba2_out_projection",
                     "L1/044_moe_expert_computation"]


@pytest.mark.parametrize("name", FAST_BUILD_SAMPLE)
def test_fast_build_counts_equal_hybrid_build_counts_on_shared_problems(name, monkeypatch):
    d = SHARED / "sol_execbench" / name
    if not d.exists():
        pytest.skip(f"{d} not present")
    p = load_problem_dir(d, d.parent.name)
    module = _exec_reference(p.definition.reference, p.definition.name)
    j = min(range(len(p.workloads)), key=lambda i: math.prod(
        v for v in p.workloads[i].axes.values() if isinstance(v, int) and v > 0))
    fast, _ = trace_workload(p.workloads[j], j, module)
    monkeypatch.setattr(build_fast, "ENABLED", False)
    slow, _ = trace_workload(p.workloads[j], j, module)
    assert fast.status is slow.status is CountStatus.OK, (fast.reason, slow.reason)
    assert fast.flops == slow.flops and fast.ops == slow.ops
    assert (fast.input_bytes, fast.output_bytes) == (slow.input_bytes, slow.output_bytes)
