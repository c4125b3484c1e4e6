"""attention_decode family: it claims FlashInfer-Bench 012/013 (paged GQA decode, page size 1) and
nothing else; every param point compiles with NVRTC for sm_90a without local-memory spills; the
launch spec (grid, workspace, scalar args) evaluates within the H200's limits on every workload; and
a CPU emulation of the kernel's algorithm (chunk scheduler over kv_indptr, per-warp column split,
online softmax base 2, bf16 P, warp merge, one-chunk direct path, workspace layout, combine) matches
the reference on awkward index tensors (empty requests, lengths straddling chunks, a real gather,
kv_indptr not starting at 0). The mma/ldmatrix fragment formulas are the attention_prefill
kernel's, checked by test_kernels_attention_prefill.py::test_warp_fragments_compute_qkt_and_pv."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

from solforge.candidate import Candidate, eval_expr, launch_env
from solforge.kernels import FamilyError, all_families, families_for, get_family
from solforge.kernels.attention_decode import COMBINE_WARPS, SMEM_LIMIT, smem_bytes
from solforge.problem.loader import load_problem_dir
from tests.unit.family_checks import check_compiled, claimed
from tests.unit.test_kernels_attention_prefill import _check

SUBSET = "FlashInfer-Bench"
CLAIMED = ["012_gqa_paged_decode_h32_kv4_d128_ps1", "013_gqa_paged_decode_h32_kv8_d128_ps1"]
CU = Path(__file__).resolve().parents[2] / "kernels_cuda" / "attention_decode" / "attention_decode.cu"


@pytest.fixture(scope="module")
def problems(sol_execbench_dir):
    return {n: load_problem_dir(sol_execbench_dir / SUBSET / n) for n in CLAIMED}


def test_claims_exactly_012_and_013(sol_execbench_dir):
    assert claimed(get_family("attention_decode"), sol_execbench_dir) == CLAIMED


def test_not_offered_before_a_gpu_check(problems):
    """family.json keeps "offered": false until an H200 run finds every variant correct on every
    workload; families_for then leaves it out."""
    fam = get_family("attention_decode")
    assert fam in all_families()
    if not fam.offered:
        for p in problems.values():
            assert fam not in families_for(p)


def test_changed_reference_is_not_claimed(problems):
    defn = problems[CLAIMED[0]].definition
    data = defn.model_dump()
    data["reference"] = defn.reference.replace("/ math.log(2.0)", "")   # natural-log lse
    assert not get_family("attention_decode").matches(type(defn).model_validate(data))


def test_bad_params_rejected(problems):
    fam, p = get_family("attention_decode"), problems[CLAIMED[0]]
    for bad in ({"CHUNK": 256, "BLOCK_N": 64, "NWARPS": 8, "STAGES": 2},    # 8 columns per warp
                {"CHUNK": 256, "BLOCK_N": 48, "NWARPS": 1, "STAGES": 2},
                {"CHUNK": 32, "BLOCK_N": 64, "NWARPS": 4, "STAGES": 2},     # chunk < step
                {"CHUNK": 256, "BLOCK_N": 64, "NWARPS": 4, "STAGES": 1},
                {"CHUNK": 256, "BLOCK_N": 64, "NWARPS": 4}):
        with pytest.raises(FamilyError):
            fam.instantiate(p, bad)


def _n_slots(nkv, batch, chunk):
    return nkv // chunk + batch


@pytest.mark.parametrize("name", CLAIMED)
def test_every_point_compiles_without_spills_and_launches_fit(problems, name, tmp_path):
    fam, p = get_family("attention_decode"), problems[name]
    space = fam.param_space(p)
    assert len(space) >= 4
    h_qo, h_kv = 32, fam.analyze(p.definition).fixed["NUM_KV_HEADS"]
    for params in space:
        cand = fam.instantiate(p, params)
        Candidate.model_validate_json(cand.model_dump_json())
        split, comb = cand.launches
        assert (split.kernel, comb.kernel) == ("gqa_decode_split", "gqa_decode_combine")
        assert cand.workspace_zero == "0"
        for w in p.workloads:
            env = launch_env(w.axes, w.scalars(), cand.params)
            batch, nkv = w.axes["len_indptr"] - 1, w.axes["num_kv_indices"]
            assert batch == w.axes["batch_size"]
            slots = _n_slots(nkv, batch, params["CHUNK"])
            gx, gy = (eval_expr(g, env) for g in split.grid)
            assert gx == slots and 1 <= gx < 2**31 - 1 and gy == h_kv
            assert eval_expr(split.block[0], env) == params["NWARPS"] * 32
            smem = eval_expr(split.smem, env)
            assert smem == smem_bytes(params["BLOCK_N"], params["STAGES"], params["NWARPS"], h_qo // h_kv)
            assert 0 < smem <= SMEM_LIMIT
            assert [eval_expr(a.split(":", 1)[1], env) for a in split.args[-3:-1]] == [batch, slots]
            assert split.args[-1] == "float32:sm_scale"
            assert eval_expr(comb.grid[0], env) == batch and eval_expr(comb.block[0], env) == COMBINE_WARPS * 32
            assert eval_expr(comb.args[-1].split(":", 1)[1], env) == slots
            assert eval_expr(cand.workspace, env) == slots * h_qo * 129 * 4
        check_compiled(cand, tmp_path, ("HMMA.16816.F32.BF16", "LDSM", "LDGSTS"), kernels=2, what=params)


def test_warp_column_slices_keep_the_swizzle():
    """The warp's K/V base (warp * WN rows into the tile) plus swz(relative row) addresses the same
    element as swz(absolute row) used by the loads, because WN is a multiple of 16."""
    def swz(row, chunk):
        return row * 128 + ((chunk ^ (row & 7)) << 3)
    for wn in (16, 32, 64):
        for warp in range(4):
            for r in range(wn):
                for c in range(16):
                    assert warp * wn * 128 + swz(r, c) == swz(warp * wn + r, c)
    src = CU.read_text()
    assert "warp * WN * HEAD_DIM" in src and "static_assert(WN % 16 == 0" in src


# ── CPU emulation of the kernel ──────────────────────────────────────────────────────────────────
def _bf16(x):
    return x.to(torch.bfloat16).to(torch.float32)


def emulate(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, *, chunk, block_n, nwarps,
            num_kv_heads):
    """gqa_decode_split + gqa_decode_combine, CTA by CTA and warp by warp, with the kernel's index
    formulas. Outputs and workspace start as NaN: a row or slot not written shows up."""
    batch, h_qo, d = q.shape
    group, wn = h_qo // num_kv_heads, block_n // nwarps
    nkv = kv_indices.shape[0]
    n_slots = nkv // chunk + batch                        # grid.x
    out = torch.full((batch, h_qo, d), float("nan"))
    lse = torch.full((batch, h_qo), float("nan"))
    ws = torch.full((n_slots * h_qo * (d + 1),), float("nan"))
    scale2 = sm_scale * 1.4426950408889634
    kf, vf = k_cache[:, 0].float(), v_cache[:, 0].float()
    ip = kv_indptr.tolist()
    off = lambda b: ip[b] // chunk + b
    for t in range(n_slots):
        lo, hi = 0, batch - 1
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if off(mid) <= t:
                lo = mid
            else:
                hi = mid - 1
        b = lo
        kv_start, kv_len = ip[b], ip[b + 1] - ip[b]
        n_chunks = (kv_len + chunk - 1) // chunk
        j = t - off(b)
        if j < 0 or j >= n_chunks:
            continue
        c0, n_tok = kv_start + j * chunk, min(chunk, kv_len - j * chunk)
        assert n_tok >= 1
        n_blocks = (n_tok + block_n - 1) // block_n
        for kvh in range(num_kv_heads):
            qt = torch.zeros(16, d)
            qt[:group] = q[b, kvh * group:(kvh + 1) * group].float()
            wm, wl, wo = [], [], []
            for warp in range(nwarps):
                m = torch.full((16,), -math.inf)
                l = torch.zeros(16)
                o = torch.zeros(16, d)
                for blk in range(n_blocks):
                    col0 = blk * block_n + warp * wn
                    if col0 >= n_tok:
                        continue
                    cols = torch.arange(col0, col0 + wn)
                    ok = cols < n_tok
                    pages = torch.where(ok, kv_indices[(c0 + cols.clamp(max=n_tok - 1))].long(), 0)
                    kt = torch.where(ok[:, None], kf[pages, kvh], 0.0)
                    vt = torch.where(ok[:, None], vf[pages, kvh], 0.0)
                    s = torch.where(ok[None, :], (qt @ kt.T) * scale2, -math.inf)
                    mx = torch.maximum(m, s.max(1).values)
                    base = torch.where(mx == -math.inf, 0.0, mx)
                    alpha = torch.exp2(m - base)
                    p = torch.exp2(s - base[:, None])
                    l = l * alpha + p.sum(1)
                    o = o * alpha[:, None] + _bf16(p) @ vt
                    m = mx
                wm.append(m); wl.append(l); wo.append(o)
            wm, wl, wo = torch.stack(wm), torch.stack(wl), torch.stack(wo)
            M = wm.max(0).values
            f = torch.where(wm == -math.inf, 0.0, torch.exp2(wm - M))
            L = (f * wl).sum(0)
            acc = (f[:, :, None] * wo).sum(0)
            inv = torch.where(L > 0, 1.0 / L, 0.0)
            lse2 = torch.where(L > 0, M + torch.log2(L), -math.inf)
            for r in range(group):
                h = kvh * group + r
                if n_chunks == 1:
                    out[b, h] = _bf16(acc[r] * inv[r])
                    lse[b, h] = lse2[r]
                else:
                    base_o = (t * h_qo + h) * d
                    ws[base_o:base_o + d] = acc[r] * inv[r]
                    ws[n_slots * h_qo * d + t * h_qo + h] = lse2[r]
    for b in range(batch):                                  # gqa_decode_combine
        kv_len = ip[b + 1] - ip[b]
        n_chunks = (kv_len + chunk - 1) // chunk if kv_len > 0 else 0
        if n_chunks == 1:
            continue
        o0 = off(b)
        for h in range(h_qo):
            lc = torch.stack([ws[n_slots * h_qo * d + (o0 + c) * h_qo + h] for c in range(n_chunks)]) \
                if n_chunks else torch.empty(0)
            M = lc.max() if n_chunks else torch.tensor(-math.inf)
            acc, L = torch.zeros(d), torch.tensor(0.0)
            if M != -math.inf:
                for c in range(n_chunks):
                    slot = (o0 + c) * h_qo + h
                    fc = 0.0 if lc[c] == -math.inf else torch.exp2(lc[c] - M)
                    acc = acc + fc * ws[slot * d:(slot + 1) * d]
                    L = L + fc
            out[b, h] = _bf16(acc / L) if L > 0 else 0.0
            lse[b, h] = M + torch.log2(L) if L > 0 else -math.inf
    return out, lse


def _reference(defn):
    ns: dict = {}
    exec(compile(defn.reference, "<reference>", "exec"), ns)
    return ns["run"]


def _case(kv_lens, h_qo, h_kv, seed, start=0):
    g = torch.Generator().manual_seed(seed)
    batch, total_kv = len(kv_lens), sum(kv_lens)
    num_pages = total_kv + start + 9
    q = torch.randn(batch, h_qo, 128, generator=g).to(torch.bfloat16)
    k = (2 * torch.randn(num_pages, 1, h_kv, 128, generator=g)).to(torch.bfloat16)
    v = torch.randn(num_pages, 1, h_kv, 128, generator=g).to(torch.bfloat16)
    kvp = torch.tensor([0] + list(torch.tensor(kv_lens).cumsum(0)), dtype=torch.int32)
    idx = torch.randperm(num_pages, generator=g)[:total_kv].to(torch.int32)   # a real gather
    return q, k, v, kvp, idx, 1.0 / math.sqrt(128)


# one token, lengths straddling steps and chunks, an empty request between others, a long one
CASES = [[1], [7, 0, 64, 65], [300, 1, 129], [0, 0, 5], [513, 40, 256, 2]]


def _points(fam, p):
    return fam.param_space(p) + [{"CHUNK": 16, "BLOCK_N": 16, "NWARPS": 1, "STAGES": 2}]


@pytest.mark.parametrize("name", CLAIMED)
def test_emulation_matches_reference_on_every_point(problems, name):
    fam, p = get_family("attention_decode"), problems[name]
    ref = _reference(p.definition)
    h_kv = fam.analyze(p.definition).fixed["NUM_KV_HEADS"]
    for ci, kv_lens in enumerate(CASES):
        args = _case(kv_lens, 32, h_kv, seed=ci)
        ref_out, ref_lse = ref(*args)
        for params in _points(fam, p):
            out, lse = emulate(*args, chunk=params["CHUNK"], block_n=params["BLOCK_N"],
                               nwarps=params["NWARPS"], num_kv_heads=h_kv)
            _check(out, lse, ref_out, ref_lse)


def test_emulation_with_indptr_not_starting_at_zero(problems):
    """The scheduler's off(b) = kv_indptr[b] // CHUNK + b needs no kv_indptr[0] == 0 (the reference
    only asserts kv_indptr[-1] == num_kv_indices)."""
    p = problems[CLAIMED[1]]
    q, k, v, kvp, idx, sc = _case([70, 3, 200], 32, 8, seed=11)
    kvp = kvp.clone()
    kvp[0] = 5                                   # request 0 uses entries 5..69 only
    ref_out, ref_lse = _reference(p.definition)(q, k, v, kvp, idx, sc)
    out, lse = emulate(q, k, v, kvp, idx, sc, chunk=64, block_n=64, nwarps=4, num_kv_heads=8)
    _check(out, lse, ref_out, ref_lse)


def test_emulation_catches_a_wrong_head_map(problems):
    p = problems[CLAIMED[0]]
    q, k, v, kvp, idx, sc = _case([50, 130], 32, 4, seed=3)
    ref_out, ref_lse = _reference(p.definition)(q, k, v, kvp, idx, sc)
    # GROUP 16 over the first two kv heads instead of GROUP 8 over four
    out, lse = emulate(q, k[:, :, :2], v[:, :, :2], kvp, idx, sc, chunk=64, block_n=64, nwarps=4, num_kv_heads=2)
    with pytest.raises(AssertionError):
        _check(out, lse, ref_out, ref_lse)


def test_kernel_source_matches_the_emulated_formulas():
    """The .cu spells the scheduler, the workspace layout and the combine the way emulate() does."""
    src = CU.read_text()
    for pat in (r"return kv_indptr\[b\] / CHUNK \+ b;",
                r"ws \+ \(\(long long\)t \* NUM_QO_HEADS \+ kvh \* GROUP \+ r\) \* HEAD_DIM \+ c8",
                r"ws\[\(long long\)n_slots \* NUM_QO_HEADS \* HEAD_DIM \+ \(long long\)t \* NUM_QO_HEADS \+ kvh \* GROUP \+ r\]",
                r"const int n_tok = min\(CHUNK, kv_len - j \* CHUNK\);",
                r"if \(n_chunks == 1\) return;",
                r"lse\[row\] = L > 0\.f \? M \+ __log2f\(L\) : NEG_INF;"):
        assert re.search(pat, src), pat


def test_warp_fragments_on_a_column_slice():
    """Lane-level ldmatrix/mma emulation (the prefill test's helpers) with the decode kernel's
    addresses: every warp reads the same 16-row Q tile and its own WN columns of the K/V step at
    bk/bv = tile + warp * WN * HEAD_DIM; S and O come out as Q K_w^T and bf16(S) V_w, bank-conflict free."""
    from tests.unit.test_kernels_attention_prefill import D, _frags_to_matrix, _to_smem, warp_pv, warp_qkt

    block_n, nwarps = 64, 2
    wn = block_n // nwarps
    g = torch.Generator().manual_seed(5)
    Q = _bf16(torch.randn(16, D, generator=g))
    Q[8:] = 0.0                                        # GROUP 8: padding rows are zero-filled
    K, V = (_bf16(torch.randn(block_n, D, generator=g)) for _ in range(2))
    sQ, sK, sV = _to_smem(Q), _to_smem(K), _to_smem(V)
    for warp in range(nwarps):
        base = warp * wn * D                           # bk / bv: the warp's WN columns of the step
        s = warp_qkt(sQ, sK, 0, base, wn)
        S = _frags_to_matrix(s, wn)
        Kw, Vw = K[warp * wn:(warp + 1) * wn], V[warp * wn:(warp + 1) * wn]
        assert torch.allclose(S, Q @ Kw.T, atol=1e-3, rtol=1e-4)
        O = _frags_to_matrix(warp_pv(s, sV, base), D)
        assert torch.allclose(O, _bf16(S) @ Vw, atol=1e-2, rtol=1e-3)


def test_fragment_check_uses_the_decode_kernels_formulas():
    from solforge.kernels.attention_common import kernel_source
    from tests.unit.test_kernels_attention_prefill import WARP_FORMULAS

    src = kernel_source("attention_decode", "attention_decode.cu")   # swz etc.: common/attention_mma.cuh
    for expr in WARP_FORMULAS + ("int r = (lane & 7) + ((lane >> 3) & 1) * 8;",
                                 "ldsm_x4(smem_u32(sQ + swz(r, kk * 2 + (lane >> 4)))",
                                 "const __nv_bfloat16* bk = sK + slot * BLOCK_N * HEAD_DIM + warp * WN * HEAD_DIM;",
                                 "const __nv_bfloat16* bv = sV + slot * BLOCK_N * HEAD_DIM + warp * WN * HEAD_DIM;",
                                 "ldsm_x4(smem_u32(bk + swz(r, kk * 2 + ((lane >> 3) & 1)))",
                                 "const int col0 = blk * BLOCK_N + warp * WN;",
                                 "int c = col0 + n * 8 + (lane & 3) * 2;"):
        assert expr in src, expr
