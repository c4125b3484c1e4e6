"""Loops over segments whose bounds are read back from the device (`for i in range(len(cu) - 1):
s, e = cu[i].item(), cu[i + 1].item()`): traced for a few iterations, rolled into a loop of the
symbolic count with the cat of its outputs collected, and checked on the CPU (g++ emulation)
against the reference, on problems written here."""

from __future__ import annotations

import shutil

import pytest

from solforge.compiler.check import check_problem

from .test_compiler import T, make_problem, with_custom_inputs

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")]

# boundaries 0 = b_0 <= ... <= b_{S-1} = L, some equal (an empty segment) when there is room
GET_INPUTS = """
import torch
def get_inputs(axes_and_scalars, device):
    L, S = axes_and_scalars["L"], axes_and_scalars["S"]
    inner = torch.randint(0, L + 1, (S - 2,), generator=torch.Generator().manual_seed(L * 7 + S))
    if S > 3:
        inner[1] = inner[0]
    cu = torch.cat([torch.tensor([0]), inner.sort().values, torch.tensor([L])]).to(torch.int64)
    return {"x": torch.randn(4, L, 8, device=device), "cu": cu.to(device)}
"""

SEGMENT_ATTENTION = GET_INPUTS + """
def run(x, cu):
    outs = []
    for i in range(cu.shape[0] - 1):
        s = cu[i].item()
        e = cu[i + 1].item()
        if e - s == 0:
            continue
        q = x[:, s:e]
        a = torch.softmax(torch.matmul(q, q.transpose(1, 2)) * 0.25, dim=-1)
        outs.append(torch.matmul(a, q) + 1.0)
    y = torch.cat(outs, dim=1)
    return y.reshape(4, x.shape[1], 8) * 2.0
"""


def _custom(tmp_path, name: str, reference: str, workloads: list):

    make_problem(tmp_path, name, {"L": {"type": "var"}, "S": {"type": "var"}},
                 {"x": T(4, "L", 8), "cu": {"shape": ["S"], "dtype": "int64"}}, {"y": T(4, "L", 8)},
                 reference, workloads)
    return with_custom_inputs(tmp_path, name)


def _compiled_and_emulated(p) -> dict:
    """The plan compiles, and its CPU emulation matches the reference at the smallest workload."""
    from solforge.compiler.api import compile_problem

    out = compile_problem(p)
    assert out.ok, out.reason
    r = check_problem(p, cap=8)
    assert r["ok"], r
    return r


def test_segment_loop_rolled_collected_and_emulated(tmp_path):
    from solforge.compiler.api import compile_problem

    from .test_compiler import _compile_ok

    p = _custom(tmp_path, "segattn", SEGMENT_ATTENTION, [{"L": 7, "S": 4}, {"L": 8, "S": 6}])
    out = compile_problem(p)
    assert out.ok, out.reason
    names = [launch.kernel for launch in out.candidate.launches]
    # one body, launched for the largest count (S - 1 = 5), each launch told its iteration
    assert len(set(names)) < len(names) - 8
    assert sum(n.endswith("_collect") for n in names) == 5
    src = out.candidate.sources["kernel.cu"]
    assert "<= 5LL" in src and "__trap()" in src   # a larger count fails on the device
    _compile_ok(out.candidate)   # NVRTC, sm_90a
    r = check_problem(p, cap=8)
    assert r["ok"], r


def test_segment_loop_reducing_over_a_tested_length_is_refused(tmp_path):
    """The branch on a segment being empty takes the non-empty side; a value reduced over the
    segment's length (here a mean over its rows: NaN when empty) would then differ from the
    skipped branch, so the plan is refused in one line. (A sum only added is 0 when empty, the
    same as skipping: that one is served, test_empty_sums.py.)"""
    from solforge.compiler.api import compile_problem

    ref = GET_INPUTS + """
def run(x, cu):
    y = x * 0.0
    for i in range(cu.shape[0] - 1):
        s = cu[i].item()
        e = cu[i + 1].item()
        if e - s == 0:
            continue
        y = y + x[:, s:e].mean(dim=1, keepdim=True)
    return y
"""
    out = compile_problem(_custom(tmp_path, "segsum", ref, [{"L": 7, "S": 4}, {"L": 8, "S": 6}]))
    assert not out.ok and "\n" not in out.reason


def test_split_by_lengths_read_back_filtered_and_emulated(tmp_path):
    """`x.split(lengths.tolist())` with empty segments filtered out by a comprehension, a loop over
    the chunks zipped from two splits, their outputs concatenated along a middle dim."""
    ref = GET_INPUTS + """
def run(x, cu):
    lengths = (cu[1:] - cu[:-1]).tolist()
    lengths = [n for n in lengths if n > 0]
    outs = []
    for q, k in zip(x.split(lengths, dim=1), (x * 0.5).split(lengths, dim=1)):
        a = torch.softmax(torch.matmul(q, k.transpose(1, 2)), dim=-1)
        outs.append(torch.matmul(a, k))
    return torch.cat(outs, dim=1) - x
"""
    _compiled_and_emulated(_custom(tmp_path, "segsplit", ref, [{"L": 7, "S": 4}, {"L": 8, "S": 6}]))


def test_split_by_lengths_of_one_segment(tmp_path):
    """A workload with one segment (cu = [0, L]): the lengths tensor's size is 1 there, which the
    trace makes static; its tolist is one value read back and the split by it the whole dim, so
    that workload is served too (emulated at it: the check takes the smallest workload)."""
    ref = GET_INPUTS + """
def run(x, cu):
    lengths = cu[1:] - cu[:-1]
    outs = []
    for q, k in zip(torch.split(x, lengths.tolist(), dim=1), torch.split(x * 0.5, lengths.tolist(), dim=1)):
        a = torch.softmax(torch.matmul(q, k.transpose(1, 2)), dim=-1)
        outs.append(torch.matmul(a, k))
    return torch.cat(outs, dim=1) - x
"""
    r = _compiled_and_emulated(_custom(tmp_path, "oneseg", ref, [{"L": 7, "S": 2}, {"L": 8, "S": 6}]))
    assert r["axes"]["S"] == 2


def test_size_read_back_without_a_bound_gets_a_checked_guess(tmp_path):
    """`m = idx.max().item() + 1; zeros(m, C).index_add_(0, idx, x)`: no shape bounds m, so the
    plan sizes the buffer at a guess and checks the value on the device."""
    from solforge.compiler.api import compile_problem

    name = "guess"
    make_problem(tmp_path, name, {"R": {"type": "var"}, "C": {"type": "const", "value": 4}},
                 {"x": T("R", "C"), "idx": {"shape": ["R"], "dtype": "int64"}}, {"y": T("C")},
                 """
                 import torch
                 def get_inputs(axes_and_scalars, device):
                     r = axes_and_scalars["R"]
                     return {"x": torch.randn(r, 4, device=device),
                             "idx": torch.randint(0, r, (r,), device=device)}
                 def run(x, idx):
                     m = idx.max().item() + 1
                     z = torch.zeros(m, x.shape[1], dtype=x.dtype, device=x.device)
                     z.index_add_(0, idx, x)
                     return torch.arange(m, dtype=x.dtype, device=x.device) @ z
                 """, [{"R": 5}, {"R": 9}])
    p = with_custom_inputs(tmp_path, name)
    out = compile_problem(p)
    assert out.ok, out.reason
    assert "bound_check" in out.candidate.sources["kernel.cu"]
    r = check_problem(p, cap=8)
    assert r["ok"], r


def test_a_second_loop_over_the_first_loops_values_recomputes_them(tmp_path):
    """The second loop zips a list the first one filled (a backward pass over saved attention
    weights): each of its iterations recomputes the first loop's values it reads, so both roll."""
    from solforge.compiler.api import compile_problem

    ref = GET_INPUTS + """
def run(x, cu):
    lengths = (cu[1:] - cu[:-1]).tolist()
    ws, outs = [], []
    for q in x.split(lengths, dim=1):
        w = torch.softmax(torch.matmul(q, q.transpose(1, 2)), dim=-1)
        ws.append(w)
        outs.append(torch.matmul(w, q))
    y = torch.cat(outs, dim=1)
    grads = []
    for w, g in zip(ws, (y * 2.0).split(lengths, dim=1)):
        grads.append(torch.matmul(w.transpose(1, 2), g))
    return torch.cat(grads, dim=1) + y
"""
    p = _custom(tmp_path, "segtwice", ref, [{"L": 7, "S": 4}, {"L": 8, "S": 6}])
    out = compile_problem(p)
    assert out.ok, out.reason
    assert sum(launch.kernel.endswith("_collect") for launch in out.candidate.launches) == 2 * 5
    r = check_problem(p, cap=8)
    assert r["ok"], r


@pytest.mark.parametrize("body", [
    "    acc = torch.zeros(x.shape[1], w.shape[0])\n"
    "    for b in range(x.shape[0]):\n"
    "        acc = acc + x[b] @ w.t()\n"
    "    return acc.unsqueeze(0).expand(x.shape[0], -1, -1) * 1.0\n",
    "    out = torch.empty(x.shape[0], x.shape[1], w.shape[0])\n"
    "    for b in range(x.shape[0]):\n"
    "        out[b] = x[b] @ w.t() * (b + 1)\n"
    "    return out\n"])
def test_a_loop_over_a_batch_size_vmap_cannot_batch(tmp_path, body):
    """An accumulator carried through the iterations, or the index in arithmetic with a write of
    the row (`out[b] = ... * (b + 1)`, an affine constant of the loop): one loop of the symbolic
    count each, not a variant per size; emulated."""
    from solforge.compiler.api import compile_problem

    p = make_problem(tmp_path, "batchloop", {"B": {"type": "var"}, "M": {"type": "const", "value": 4},
                                             "K": {"type": "const", "value": 8},
                                             "N": {"type": "const", "value": 6}},
                     {"x": T("B", "M", "K"), "w": T("N", "K")}, {"y": T("B", "M", "N")},
                     "import torch\ndef run(x, w):\n" + body, [{"B": 2}, {"B": 7}])
    out = compile_problem(p)
    assert out.ok, out.reason
    assert "variants" not in out.segments and out.ops.get("solforge.loop") == 1, out.segments
    r = check_problem(p, cap=8)
    assert r["ok"], r


def test_segment_bounds_read_through_numpy_lower_as_item_reads(tmp_path):
    """`cu.cpu().numpy()` then `int(b[i])`: each element read is the tensor's own `.item()`, so the
    plan is the one the `.item()` reference gets, and it matches the reference on the CPU."""
    from solforge.compiler.api import compile_problem

    via_numpy = SEGMENT_ATTENTION.replace(
        "    outs = []\n", "    outs = []\n    b = cu.cpu().numpy()\n").replace(
        "s = cu[i].item()", "s = int(b[i])").replace("e = cu[i + 1].item()", "e = int(b[i + 1])")
    assert via_numpy.count("numpy") == 1 and "int(b[i + 1])" in via_numpy
    wl = [{"L": 7, "S": 4}, {"L": 8, "S": 6}]
    items = compile_problem(_custom(tmp_path / "a", "segitem", SEGMENT_ATTENTION, wl))
    p = _custom(tmp_path / "b", "segnumpy", via_numpy, wl)
    numpy_out = compile_problem(p)
    assert numpy_out.ok, numpy_out.reason
    assert [x.kernel for x in numpy_out.candidate.launches] == [x.kernel for x in items.candidate.launches]
    _compiled_and_emulated(p)


SEGMENT_PROJECTION = GET_INPUTS.replace(
    '{"x": torch.randn(4, L, 8, device=device), "cu": cu.to(device)}',
    '{"x": torch.randn(L, 64, device=device), "cu": cu.to(device), '
    '"w": torch.randn(64, 64, device=device)}') + """
def run(x, cu, w):
    outs = []
    for i in range(cu.shape[0] - 1):
        s = cu[i].item()
        e = cu[i + 1].item()
        if e - s == 0:
            continue
        outs.append(torch.relu(x[s:e] @ w))
    return torch.cat(outs, dim=0)
"""


def test_segment_loop_with_the_gemm_template_point_compiles(tmp_path):
    """The search's template point (`gemm="template"`) of a plan whose matmul sits in a loop of a
    symbolic count: each body kernel returns early past the count, which a template rendered whole
    cannot, so that matmul takes the lowering's own kernel and the plan compiles (before, the
    template refused this one's sliced rows; Quant/008's launch carried arguments its source did
    not take)."""
    from solforge.compiler.api import compile_problem

    from .test_compiler import _compile_ok

    make_problem(tmp_path, "segproj", {"L": {"type": "var"}, "S": {"type": "var"}},
                 {"x": T("L", 64), "cu": {"shape": ["S"], "dtype": "int64"}, "w": T(64, 64)},
                 {"y": T("L", 64)}, SEGMENT_PROJECTION, [{"L": 7, "S": 4}, {"L": 8, "S": 6}])
    p = with_custom_inputs(tmp_path, "segproj")
    out = compile_problem(p, gemm="template")
    assert out.ok, out.reason
    _compile_ok(out.candidate)   # NVRTC, sm_90a: every launch's arguments match its kernel


# a selective-scan recurrence: the state carried from step to step, one output per step stacked
# after the loop (Mamba1's reference shape); the stack's length is the loop's symbolic count
SCAN = """
import torch
def run(u, dt, A, B, C):
    batch, seqlen, d = u.shape
    state = torch.zeros(batch, d, A.shape[1], device=u.device)
    ys = []
    for t in range(seqlen):
        decay = torch.exp(dt[:, t, :, None] * A)
        state = state * decay + (dt[:, t] * u[:, t])[:, :, None] * B[:, t, None, :]
        ys.append(torch.einsum("bdn,bn->bd", state, C[:, t]))
    y = torch.{join} + u
    return y, state
"""


def _scan(tmp_path, name: str, join: str, workloads: list):
    return make_problem(
        tmp_path, name, {"b": {"type": "var"}, "L": {"type": "var"}},
        {"u": T("b", "L", 4), "dt": T("b", "L", 4), "A": T(4, 3), "B": T("b", "L", 3),
         "C": T("b", "L", 3)}, {"y": T("b", "L", 4), "state": T("b", 4, 3)},
        SCAN.replace("{join}", join), workloads)


@pytest.mark.parametrize("join", ["stack(ys, dim=1)",
                                  "cat(ys, dim=1).view(batch, seqlen, d)"])
def test_recurrence_outputs_stacked_after_a_loop_of_a_symbolic_count(tmp_path, join):
    from solforge.compiler.api import compile_problem

    from .test_compiler import _compile_ok

    p = _scan(tmp_path, "scan", join, [{"b": 2, "L": 7}, {"b": 1, "L": 13}])
    out = compile_problem(p)
    assert out.ok, out.reason
    names = [launch.kernel for launch in out.candidate.launches]
    # one traced body, launched for the largest count (13), its outputs collected per step:
    # not a plan per sequence length
    assert sum(n.endswith("_collect") for n in names) == 13
    assert len(set(names)) < 40
    _compile_ok(out.candidate)
    r = check_problem(p, cap=8)
    assert r["ok"], r


def test_a_stack_along_a_new_last_dim_is_traced_in_full(tmp_path):
    """stack(ys, dim=-1) is no cat of the values themselves: the loop runs in full in the trace (a
    plan per sequence length), still right."""
    from solforge.compiler.api import compile_problem

    p = _scan(tmp_path, "scan_last", "stack(ys, dim=-1).transpose(1, 2)",
              [{"b": 2, "L": 6}, {"b": 1, "L": 7}])
    out = compile_problem(p)
    assert out.ok, out.reason
    assert not any(launch.kernel.endswith("_collect") for launch in out.candidate.launches)
    r = check_problem(p, cap=8)
    assert r["ok"], r
