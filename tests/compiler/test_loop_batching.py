"""A Python loop over a symbolic size traced as one batched body; a loop whose meaning batching
would change (the index in arithmetic, a value leaving the loop) is traced as a loop of the
symbolic count (counted_loops.py) or unrolled: one variant per size, each with one matmul per
iteration."""

from __future__ import annotations

import pytest

from solforge.compiler.trace import trace_definition

from .test_compiler import T, make_problem


def _problem(tmp_path, name, body, batches=(2, 5)):
    return make_problem(tmp_path, name, {"B": {"type": "var"}, "M": {"type": "const", "value": 4},
                                         "K": {"type": "const", "value": 8},
                                         "N": {"type": "const", "value": 6}},
                        {"x": T("B", "M", "K"), "w": T("N", "K")}, {"y": T("B", "M", "N")},
                        "import torch\n" + body, [{"B": b} for b in batches])


def _compiled_and_checked(tmp_path, name, body, batches, cap):
    """The problem's plan (compiled) after the CPU emulation found it right on the smallest batch."""
    import shutil

    if shutil.which("g++") is None:
        pytest.skip("needs a host C++ compiler")
    from solforge.compiler.api import compile_problem
    from solforge.compiler.check import check_problem

    p = _problem(tmp_path, name, body, batches=batches)
    out = compile_problem(p)
    assert out.ok, out.reason
    r = check_problem(p, cap=cap, candidate=out.candidate)
    assert r["ok"], r
    return out


def _one_rolled_loop(out) -> None:
    assert "variants" not in out.segments and out.ops.get("solforge.loop") == 1, (out.segments, out.ops)


def _trace(tmp_path, name, body):
    p = _problem(tmp_path, name, body)
    return trace_definition(p.definition, list(p.workloads))


def test_slice_writes_become_one_matmul_for_every_batch_size(tmp_path):
    tr = _trace(tmp_path, "ok", """
def run(x, w):
    out = torch.empty(x.shape[0], x.shape[1], w.shape[0])
    for b in range(x.shape[0]):
        out[b] = torch.relu(x[b]) @ w.t()
    return out
""")
    assert tr.ok, tr.reason
    ops = [n["op"] for n in tr.ir["nodes"]]
    assert ops.count("aten.mm.default") + ops.count("aten.bmm.default") == 1, ops


def _unrolled(tr):
    """Either refused, one variant per B, each with B matmuls, or one loop of B iterations with one
    matmul each (counted_loops.py), never a batched body."""
    import re

    if not tr.ok:
        return
    loops = [n for n in tr.ir.get("nodes", []) if n["op"] == "solforge.loop"]
    if loops and "variants" not in tr.ir:
        assert [n.get("count_expr") for n in loops] == ["B"] * len(loops), loops
        for n in loops:
            assert [b["op"] for b in n["body"]].count("aten.mm.default") == 1, n["body"]
        return
    assert "variants" in tr.ir, tr.ir
    for v in tr.ir["variants"]:
        # the workload size (of B = 2, 5) whose guards the variant holds: an equality, or the
        # graph's own guards (B > 2 && B > 3 && B > 4 for the unrolled five iterations)
        pred = re.sub(r"\(double\)z_B", "B", v["pred"]).replace("&&", " and ")
        held = [b for b in (2, 5) if eval(pred, {"B": b})]  # noqa: S307 - our own generated guard
        assert len(held) == 1, (v["pred"], held)
        assert _matmuls(v["ir"]["nodes"], held[0]) == held[0], (held, v["ir"]["nodes"])


def _matmuls(nodes, b: int) -> int:
    """Matmuls the nodes run at B = b: a loop (rolling.py, counted_loops.py) counts its body once
    per iteration."""
    n_mm = 0
    for n in nodes:
        if n["op"] == "solforge.loop":
            reps = eval(n["count_expr"], {"B": b}) if n.get("count_expr") else n["count"]  # noqa: S307
            n_mm += reps * _matmuls(n["body"], b)
        elif n["op"] == "aten.mm.default":
            n_mm += 1
    return n_mm


def test_a_value_leaving_the_loop_is_unrolled(tmp_path):
    tr = _trace(tmp_path, "acc", """
def run(x, w):
    acc = torch.zeros(x.shape[1], w.shape[0])
    for b in range(x.shape[0]):
        acc = acc + x[b] @ w.t()
    return acc.unsqueeze(0).expand(x.shape[0], -1, -1) * 1.0
""")
    _unrolled(tr)


def test_the_index_in_arithmetic_is_unrolled(tmp_path):
    tr = _trace(tmp_path, "arith", """
def run(x, w):
    out = torch.empty(x.shape[0], x.shape[1], w.shape[0])
    for b in range(x.shape[0]):
        out[b] = x[b] @ w.t() * (b + 1)
    return out
""")
    _unrolled(tr)


def test_a_value_carried_into_a_later_loop_is_unrolled(tmp_path):
    tr = _trace(tmp_path, "carry", """
def run(x, w):
    out = torch.empty(x.shape[0], x.shape[1], w.shape[0])
    for b in range(x.shape[0]):
        t = x[b] * 2.0
    for c in range(x.shape[0]):
        out[c] = (t + x[c]) @ w.t()
    return out
""")
    _unrolled(tr)


CARRIED_STATE = """
def run(x, w):
    state = torch.zeros(x.shape[1], x.shape[2])
    out = torch.zeros(x.shape[0], x.shape[1], w.shape[0])
    for b in range(x.shape[0]):
        out[b] = (x[b] + state) @ w.t()
        state = state * 0.5 + torch.tanh(x[b])
    return out
"""


def test_a_state_carried_to_the_next_iteration_is_not_batched(tmp_path):
    """`state = f(state, x[b])` in the body, never read after the loop: the batched body would give
    every iteration the state from before the loop (the chunk recurrence of a delta-rule attention
    came out wrong on the H200 so). The loop is unrolled or rolled, each iteration reading the one
    before."""
    tr = _trace(tmp_path, "carried", CARRIED_STATE)
    _unrolled(tr)


@pytest.mark.slow
def test_a_state_carried_to_the_next_iteration_is_right(tmp_path):
    _compiled_and_checked(tmp_path, "carried_run", CARRIED_STATE, (3, 5), cap=5)


CARRIED_ALONG_DIM_1 = """
def run(x, w):
    xt = x.transpose(0, 1)
    state = torch.zeros(xt.shape[0], xt.shape[2])
    out = torch.zeros(xt.shape[0], xt.shape[1], w.shape[0])
    for c in range(xt.shape[1]):
        out[:, c] = (xt[:, c] + state) @ w.t()
        state = state * 0.5 + torch.tanh(xt[:, c])
    return out.transpose(0, 1)
"""


@pytest.mark.slow
def test_a_state_carried_along_an_inner_dim_rolls_into_one_loop(tmp_path):
    """`x[:, c]` and `out[:, c] = v` with the loop over a symbolic size at dim 1 (a chunk loop):
    read and written through index_select / index_copy, the iterations roll into one loop of the
    symbolic count (no variant per count) and the plan is right past the traced iterations. A
    workload of fewer iterations than the trace runs (2) is what made the plain index go out of
    bounds, and each count a variant of its own."""
    _one_rolled_loop(_compiled_and_checked(tmp_path, "carried_dim1", CARRIED_ALONG_DIM_1, (2, 7), cap=7))


WITH_A_GROWING_CONSTANT_LOOP = """
def run(x, w):
    a = torch.zeros(10, 10)
    for i in range(1, 10):                       # iterations of growing sizes: they do not roll
        a[i, :i] = a[i - 1, :i] * 0.5 + 1.0
    xt = x.transpose(0, 1)
    state = torch.zeros(xt.shape[0], xt.shape[2])
    out = torch.zeros(xt.shape[0], xt.shape[1], w.shape[0])
    for c in range(xt.shape[1]):
        out[:, c] = (xt[:, c] + state) @ w.t() * a.sum()
        state = state * 0.5 + torch.tanh(xt[:, c])
    return out.transpose(0, 1)
"""


@pytest.mark.slow
def test_a_counted_loop_rolls_beside_a_constant_loop_that_does_not(tmp_path):
    """A loop of a symbolic count (carried state, rows by index) after a constant loop of more
    than SHORT_OVER iterations of growing sizes (a chunked delta rule's forward substitution): the
    constant loop is traced in full, the counted one still rolls: one loop node, no variant per
    count (every chunk count was a variant of its own before)."""
    _one_rolled_loop(_compiled_and_checked(tmp_path, "growing_then_counted",
                                           WITH_A_GROWING_CONSTANT_LOOP, (2, 7), cap=7))
