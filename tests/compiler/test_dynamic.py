"""Data-dependent sizes (nonzero, boolean masks, a Python loop over experts that skips empty ones):
traced with unbacked sizes, lowered at their upper bounds with the count read on the device, and
checked on the CPU (g++ emulation) against the reference, on problems written here."""

from __future__ import annotations

import shutil

import pytest

from solforge.compiler.check import check_problem

from .test_compiler import B, T, make_problem, with_custom_inputs

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")]

MOE = """
import torch
import torch.nn.functional as F
def run(x, logits, w_up, w_down):
    E = w_up.shape[0]
    probs = torch.softmax(logits, dim=-1)
    topv, ids = torch.topk(probs, 2, dim=-1)
    topv = topv / topv.sum(dim=-1, keepdim=True)
    out = torch.zeros_like(x)
    mask = F.one_hot(ids, num_classes=E).permute(2, 1, 0)
    for e in range(E):
        slot, tok = torch.where(mask[e])
        if tok.numel() == 0:
            continue
        h = F.silu(x[tok] @ w_up[e].t()) @ w_down[e].t()
        out.index_add_(0, tok, (h * topv[tok, slot].unsqueeze(-1)).to(x.dtype))
    return out
"""


def _moe(tmp_path, name, dtype=T, E=4):
    return make_problem(tmp_path, name, {"M": {"type": "var"}, "H": {"type": "const", "value": 8},
                                         "I": {"type": "const", "value": 16},
                                         "E": {"type": "const", "value": E}},
                        {"x": dtype("M", "H"), "logits": T("M", "E"), "w_up": dtype("E", "I", "H"),
                         "w_down": dtype("E", "H", "I")}, {"y": dtype("M", "H")}, MOE,
                        [{"M": 5}, {"M": 11}])


def test_moe_loop_over_experts_fp32(tmp_path):
    from solforge.compiler.api import compile_problem

    from .test_compiler import _compile_ok

    p = _moe(tmp_path, "moe32")
    out = compile_problem(p)
    assert out.ok, out.reason
    assert out.segments.get("nonzero") == 4
    # grids and the workspace are at the upper bound: no launch expression names a counted size
    assert "dyn" not in repr(out.candidate.launches) + out.candidate.workspace
    # the loop over experts is rolled: one body of kernels, launched once per expert
    names = [l.kernel for l in out.candidate.launches]
    assert len(set(names)) < len(names) - 8
    assert out.candidate.sources["kernel.cu"].count("_nonzero(") == 1
    # the accumulator is scattered into in place: no copy of it per expert
    assert not any(n.endswith("_carry") for n in names)
    _compile_ok(out.candidate)   # NVRTC, sm_90a
    r = check_problem(p, cap=8)
    assert r["ok"], r


def test_moe_loop_over_experts_bf16_with_empty_experts(tmp_path):
    """More experts than routed slots at M=2: some experts get no token, so the branch the trace
    decided size-obliviously runs on an empty count."""
    r = check_problem(_moe(tmp_path, "moe16", dtype=B, E=8), cap=2)
    assert r["ok"], r


def test_boolean_mask_select_and_assign(tmp_path):
    p = make_problem(tmp_path, "mask", {"R": {"type": "var"}, "C": {"type": "const", "value": 6}},
                     {"x": T("R", "C"), "v": T("R", "C")},
                     {"y": T("R", "C"), "s": T("C"), "m": T("R", "C"), "b": T(1)},
                     """
                     import torch
                     def run(x, v):
                         keep = x > 0.2
                         picked = x[keep]                      # a data-dependent count
                         y = torch.zeros_like(x)
                         y[keep] = picked * 2.0 + v[keep]      # index_put with the same mask
                         rows = torch.nonzero(x[:, 0] > 0)[:, 0]
                         s = x[rows].sum(dim=0)
                         m = torch.zeros_like(x)
                         m[x < 0] = torch.masked_select(v, x < 0)
                         b = torch.masked_select(v, x[:, :1] < 0).sum().reshape(1)  # broadcast mask
                         return y, s, m, b
                     """, [{"R": 7}, {"R": 12}])
    r = check_problem(p, cap=8)
    assert r["ok"], r


def test_refuses_a_reduction_over_a_size_tested_for_emptiness(tmp_path):
    """The reference skips the empty case: the non-empty branch would take a mean over no rows
    (nan where the reference leaves a zero), so the size-oblivious branch is not value-safe."""
    from solforge.compiler.api import compile_problem

    p = make_problem(tmp_path, "unsafe", {"R": {"type": "var"}, "C": {"type": "const", "value": 4}},
                     {"x": T("R", "C")}, {"y": T("C")},
                     """
                     import torch
                     def run(x):
                         rows = torch.nonzero(x[:, 0] > 0)[:, 0]
                         if rows.numel() == 0:
                             return torch.zeros_like(x[0])
                         return x[rows].mean(dim=0)
                     """, [{"R": 7}, {"R": 12}])
    out = compile_problem(p)
    assert not out.ok
    assert "emptiness" in out.reason, out.reason


def test_long_expert_loop_traced_short_and_extrapolated(tmp_path):
    """12 experts (over rolling.SHORT_OVER): the trace runs a few iterations, rolls them and
    launches the body once per expert; the emulated result covers every expert."""
    from solforge.compiler.api import compile_problem

    p = _moe(tmp_path, "moe12", E=12)
    out = compile_problem(p)
    assert out.ok, out.reason
    assert out.segments.get("nonzero") == 12
    r = check_problem(p, cap=8)
    assert r["ok"], r


def test_loop_index_tested_by_the_reference_is_traced_in_full(tmp_path):
    """`if e < 2` makes the first experts' iterations differ: the shortened trace stops and every
    iteration is traced (the result still matches the reference)."""
    p = make_problem(tmp_path, "steer", {"M": {"type": "var"}, "H": {"type": "const", "value": 4},
                                         "E": {"type": "const", "value": 10}},
                     {"x": T("M", "H"), "w": T("E", "H", "H")}, {"y": T("M", "H")},
                     """
                     import torch
                     def run(x, w):
                         out = torch.zeros_like(x)
                         for e in range(w.shape[0]):
                             h = x @ w[e]
                             out = out + (h * 2.0 if e < 2 else h)
                         return out
                     """, [{"M": 3}, {"M": 6}])
    from solforge.compiler.api import compile_problem

    out = compile_problem(p)
    assert out.ok, out.reason
    assert out.ops.get("aten.mm.default") == 10 and "solforge.loop" not in out.ops
    r = check_problem(p, cap=4)
    assert r["ok"], r


def test_if_mask_any_then_masked_rows(tmp_path):
    """`if mask.any():` tests the mask's count (decided like an emptiness test), then the masked
    rows go through an expert and back with `y[mask] = out`, over 10 experts (a shortened loop)."""
    p = make_problem(tmp_path, "anym", {"M": {"type": "var"}, "H": {"type": "const", "value": 4},
                                        "K": {"type": "const", "value": 2},
                                        "E": {"type": "const", "value": 10}},
                     {"x": T("M", "H"), "ids": {"shape": ["M", "K"], "dtype": "int64"},
                      "w": T("E", "H", "H")}, {"y": T("M", "H")},
                     """
                     import torch
                     def run(x, ids, w):
                         k = ids.shape[1]
                         xr = x.repeat_interleave(k, dim=0)
                         flat = (ids.abs() % w.shape[0]).view(-1)
                         y = torch.zeros_like(xr)
                         for e in range(w.shape[0]):
                             m = flat == e
                             if m.any():
                                 y[m] = torch.relu(xr[m] @ w[e])
                         return y.view(x.shape[0], k, -1).sum(dim=1)
                     """, [{"M": 3}, {"M": 6}])
    from solforge.compiler.api import compile_problem

    out = compile_problem(p)
    assert out.ok, out.reason
    assert "solforge.loop" in out.ops
    r = check_problem(p, cap=4)
    assert r["ok"], r


def test_if_mask_sum_positive_then_where_rows(tmp_path):
    """`if expert_mask[e].sum() > 0:` on a one-hot (integer) mask is the emptiness test of
    `mask.any()`: the non-empty side, then `torch.where` rows through the expert and back with
    index_add_, over 10 experts (a shortened loop). Small M leaves most experts without tokens."""
    p = make_problem(tmp_path, "sumpos", {"M": {"type": "var"}, "H": {"type": "const", "value": 4},
                                          "E": {"type": "const", "value": 10}},
                     {"x": T("M", "H"), "logits": T("M", "E"), "w": T("E", "H", "H")},
                     {"y": T("M", "H")},
                     """
                     import torch
                     import torch.nn.functional as F
                     def run(x, logits, w):
                         topv, ids = torch.topk(torch.softmax(logits, dim=-1), 2, dim=-1)
                         out = torch.zeros_like(x)
                         mask = F.one_hot(ids, num_classes=w.shape[0]).permute(2, 1, 0)
                         for e in range(w.shape[0]):
                             if mask[e].sum() > 0:
                                 slot, tok = torch.where(mask[e])
                                 h = torch.relu(x[tok] @ w[e])
                                 out.index_add_(0, tok, h * topv[tok, slot, None])
                         return out
                     """, [{"M": 3}, {"M": 6}])
    from solforge.compiler.api import compile_problem

    out = compile_problem(p)
    assert out.ok, out.reason
    assert "solforge.loop" in out.ops
    r = check_problem(p, cap=4)
    assert r["ok"], r


@pytest.mark.parametrize("experts", [4, 10])
def test_counts_read_back_with_a_running_offset(tmp_path, experts):
    """A count per expert read to the host (`bincount(ids, minlength=E).tolist()`), `if n == 0:
    continue`, and each expert's rows sliced at a running offset (`start += n`): the offset becomes
    a read of the counts' prefix sum, so the loop over 10 experts rolls (4 run unrolled); small M
    leaves most experts empty."""
    p = make_problem(tmp_path, "runoff", {"M": {"type": "var"}, "H": {"type": "const", "value": 4},
                                          "K": {"type": "const", "value": 2},
                                          "E": {"type": "const", "value": experts}},
                     {"x": T("M", "H"), "ids": {"shape": ["M", "K"], "dtype": "int64"},
                      "w": T("E", "H", "H")}, {"y": T("M", "H")},
                     """
                     import torch
                     def run(x, ids, w):
                         k = ids.shape[1]
                         flat = (ids.abs() % w.shape[0]).reshape(-1)
                         order = torch.argsort(flat, stable=True)
                         counts = torch.bincount(flat, minlength=w.shape[0]).tolist()
                         out = torch.zeros_like(x)
                         start = 0
                         for e in range(w.shape[0]):
                             n = counts[e]
                             if n == 0:
                                 continue
                             slots = order[start:start + n]
                             start += n
                             tok = slots // k
                             out.index_add_(0, tok, torch.relu(x[tok] @ w[e]))
                         return out
                     """, [{"M": 3}, {"M": 6}])
    from solforge.compiler.api import compile_problem

    out = compile_problem(p)
    assert out.ok, out.reason
    assert ("solforge.loop" in out.ops) == (experts > 8) and "aten.bincount.default" not in out.ops
    r = check_problem(p, cap=4)
    assert r["ok"], r


@pytest.mark.parametrize("last", ["-1", "x.shape[1]"])
def test_counts_to_numpy_then_cat_of_expert_outputs(tmp_path, last):
    """Counts read through `.cpu().numpy()`, one `int(counts[e])` per expert, the outputs appended
    and concatenated, then scattered back to the sorted positions: the cat is collected by the
    rolled loop of 10 experts. Viewed back as [m, k, H] with H written out, the view pins the
    collected length at m * k rows."""
    p = make_problem(tmp_path, "numcat", {"M": {"type": "var"}, "H": {"type": "const", "value": 4},
                                          "K": {"type": "const", "value": 2},
                                          "E": {"type": "const", "value": 10}},
                     {"x": T("M", "H"), "ids": {"shape": ["M", "K"], "dtype": "int64"},
                      "w": T("E", "H", "H")}, {"y": T("M", "H")},
                     """
                     import torch
                     def run(x, ids, w):
                         m, k = ids.shape
                         flat = ids.abs() % w.shape[0]
                         cnts = torch.zeros((m, w.shape[0]), dtype=torch.int32)
                         cnts.scatter_(1, flat, 1)
                         per_expert = cnts.sum(dim=0).cpu().numpy()
                         idxs = flat.view(-1).argsort()
                         rows = x[idxs // k]
                         outs, start = [], 0
                         for e in range(w.shape[0]):
                             n = int(per_expert[e])
                             if n == 0:
                                 continue
                             outs.append(torch.relu(rows[start:start + n] @ w[e]))
                             start += n
                         allo = torch.cat(outs, dim=0)
                         back = torch.zeros_like(allo)
                         back[idxs] = allo
                         return back.view(m, k, LAST).sum(dim=1)
                     """.replace("LAST", last), [{"M": 3}, {"M": 6}])
    from solforge.compiler.api import compile_problem

    out = compile_problem(p)
    assert out.ok, out.reason
    assert "solforge.loop" in out.ops
    # pinned: the workspace holds a few [m * k, H] buffers, not a slot of every selected row per
    # expert (10 x m * k x H floats); with -1 the view pins nothing
    ws = eval(out.candidate.workspace, {"__builtins__": {}, "max": max, "min": min}, {"M": 1000})
    pinned = any(launch.kernel.endswith("pinned_check") for launch in out.candidate.launches)
    assert pinned == (last != "-1")
    assert (ws < 10 * 1000 * 2 * 4 * 4) == pinned, out.candidate.workspace
    r = check_problem(p, cap=4)
    assert r["ok"], r


def test_min_of_a_data_dependent_count_and_a_cap(tmp_path):
    """`n = min(len(positions), cap)` with positions from `torch.where(mask[b])` in a loop over a
    symbolic batch: a symbolic min (no guard on which side is smaller), the first n positions
    overwritten with projected rows."""
    p = make_problem(tmp_path, "capmin", {"B": {"type": "var"}, "S": {"type": "const", "value": 6},
                                          "V": {"type": "const", "value": 2},
                                          "H": {"type": "const", "value": 4}},
                     {"x": T("B", "S", "H"), "mask": {"shape": ["B", "S"], "dtype": "bool"},
                      "v": T("B", "V", "H"), "w": T("H", "H")}, {"y": T("B", "S", "H")},
                     """
                     import torch
                     def run(x, mask, v, w):
                         out = x.clone()
                         proj = v @ w
                         for b in range(x.shape[0]):
                             pos = torch.where(mask[b])[0]
                             if len(pos) > 0:
                                 n = min(len(pos), proj.shape[1])
                                 out[b, pos[:n]] = proj[b, :n]
                         return out
                     """, [{"B": 2}, {"B": 3}])
    from solforge.compiler.api import compile_problem

    out = compile_problem(p)
    assert out.ok, out.reason
    r = check_problem(p, cap=4)
    assert r["ok"], r


HIT = """
import torch
import torch.nn.functional as F
def run(x, logits, w_up, w_down):
    E = w_up.shape[0]
    topv, ids = torch.topk(torch.softmax(logits, dim=-1), 2, dim=-1)
    out = torch.zeros_like(x)
    mask = F.one_hot(ids, num_classes=E).permute(2, 1, 0)
    hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero(as_tuple=False)
    for row in hit:                       # only the experts some token chose
        e = row.item()
        slot, tok = torch.where(mask[e])
        if tok.numel() == 0:
            continue
        h = F.silu(x[tok] @ w_up[e].t()) @ w_down[e].t()
        out.index_add_(0, tok, h * topv[tok, slot, None])
    return out
"""


def test_loop_over_a_data_dependent_number_of_rows(tmp_path):
    """`for row in nonzero(...)`: a loop of at most E iterations (the i-th runs while i < the
    count), each reading its expert index back from the device (`.item()`)."""
    p = make_problem(tmp_path, "hit", {"M": {"type": "var"}, "H": {"type": "const", "value": 8},
                                       "I": {"type": "const", "value": 16},
                                       "E": {"type": "const", "value": 12}},
                     {"x": T("M", "H"), "logits": T("M", "E"), "w_up": T("E", "I", "H"),
                      "w_down": T("E", "H", "I")}, {"y": T("M", "H")}, HIT, [{"M": 3}, {"M": 7}])
    from solforge.compiler.api import compile_problem

    out = compile_problem(p)
    assert out.ok, out.reason
    assert out.segments.get("nonzero") == 12 + 1
    r = check_problem(p, cap=3)   # 3 tokens x 2 slots: at most 6 of the 12 experts are hit
    assert r["ok"], r


def test_a_slice_by_an_int_item(tmp_path):
    """x[:k] with k read back from a tensor: kernels read k from the workspace; a buffer of
    min(R, k % R) rows is allocated at R, the bound the expression proves (guessed_bounds.py)."""
    from solforge.compiler.api import compile_problem

    def prob(name, body):
        return make_problem(tmp_path, name, {"R": {"type": "var"}, "C": {"type": "const", "value": 4}},
                            {"x": T("R", "C"), "n": {"shape": [1], "dtype": "int64"}}, {"y": T("C")},
                            """
                            import torch
                            def run(x, n):
                                k = n.abs().item() % x.shape[0]
                                return """ + body + "\n", [{"R": 5}, {"R": 9}])
    r = check_problem(prob("itemsum", "x[:k].sum(dim=0)"), cap=8)
    assert r["ok"], r
    p = prob("itemcum", "x[:k].cumsum(0).sum(0)")
    out = compile_problem(p)
    assert out.ok, out.reason
    assert "bound_check" not in out.candidate.sources["kernel.cu"]   # proved, not guessed
    r = check_problem(p, cap=8)
    assert r["ok"], r


def test_branch_on_an_input_flag_read_back(tmp_path):
    """`if flag.item():` on an input: both sides traced, the variant picked on the device; the
    flag is set by the problem's own inputs, once per side."""
    from solforge.compiler.api import compile_problem

    for name, flag in (("flag_on", 3), ("flag_off", -3)):
        p = make_problem(tmp_path, name, {"R": {"type": "var"}, "C": {"type": "const", "value": 4}},
                         {"x": T("R", "C"), "g": T(1), "n": {"shape": [1], "dtype": "int64"}},
                         {"y": T("R", "C")},
                         f"""
                         import torch
                         def get_inputs(axes_and_scalars, device):
                             r = axes_and_scalars["R"]
                             return {{"x": torch.randn(r, 4, device=device), "g": torch.randn(1, device=device),
                                     "n": torch.tensor([{flag}], device=device)}}
                         def run(x, g, n):
                             y = x * 0.5
                             if n.item() > 0:
                                 y = y + g.item() * x.sum(dim=0)
                             return y
                         """, [{"R": 5}, {"R": 9}])
        p = with_custom_inputs(tmp_path, name)
        out = compile_problem(p)
        assert out.ok, out.reason
        assert out.segments.get("variants") == 2
        r = check_problem(p, cap=8)
        assert r["ok"], r


def test_an_int_item_used_as_a_value(tmp_path):
    """k = int(count.item()) multiplying a tensor: k is read on the device (no longer refused)."""
    p = make_problem(tmp_path, "nzval", {"N": {"type": "var"}}, {"x": T("N")}, {"y": T("N")},
                     """
                     import torch
                     def run(x):
                         k = int((x > 0).sum().item())
                         return x * k
                     """, [{"N": 5}, {"N": 9}])
    r = check_problem(p, cap=8)
    assert r["ok"], r


PATCH_MERGER = """
import torch
def get_inputs(axes_and_scalars, device):
    P, G = axes_and_scalars["P"], axes_and_scalars["G"]
    rows = [[1, 2, 2]] * (G - 1) + [[1, 2, (P - 4 * (G - 1)) // 2]]
    return {"x": torch.randn(P, 4, device=device),
            "grid": torch.tensor(rows, dtype=torch.int64, device=device),
            "w": torch.randn(8, 16, device=device) * 0.25}
def run(x, grid, w):
    outs, off = [], 0
    for i in range(grid.shape[0]):
        t = grid[i, 0].item()
        h = grid[i, 1].item()
        ww = grid[i, 2].item()
        n = t * h * ww
        p = x[off:off + n].view(t, h // 2, 2, ww // 2, 2, 4).permute(0, 1, 3, 2, 4, 5)
        outs.append(p.reshape(t * (h // 2) * (ww // 2), 16))
        off += n
    return torch.nn.functional.linear(torch.cat(outs, dim=0), w)
"""


def test_rows_from_a_product_of_values_read_back_bounded_by_a_view(tmp_path):
    """Per image, t, h and w read back and its t*h*w rows viewed as [t, h/2, 2, w/2, 2, C]: no
    value has a bound of its own, but the view keeps the element count of a slice of at most P
    rows, so t * (h // 2) * (w // 2) is at most P // 4. The buffers of those rows are sized by it,
    the view's element count is checked on the device, and the plan matches the reference."""
    from solforge.compiler.api import compile_problem

    from .test_compiler import with_custom_inputs

    make_problem(tmp_path, "merger", {"P": {"type": "var"}, "G": {"type": "var"},
                                      "M": {"type": "var"}},
                 {"x": T("P", 4), "grid": {"shape": ["G", 3], "dtype": "int64"}, "w": T(8, 16)},
                 {"y": T("M", 8)}, PATCH_MERGER,
                 [{"P": 24, "G": 2, "M": 6}, {"P": 40, "G": 3, "M": 10}])
    p = with_custom_inputs(tmp_path, "merger")
    out = compile_problem(p)
    assert out.ok, out.reason
    assert any(launch.kernel.endswith("view_check") for launch in out.candidate.launches)
    r = check_problem(p, cap=64)
    assert r["ok"], r
