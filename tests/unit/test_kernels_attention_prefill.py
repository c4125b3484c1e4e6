"""attention_prefill family: it claims FlashInfer-Bench 014/015 (paged GQA causal prefill, page
size 1) and nothing else; every param point compiles with NVRTC for sm_90a without local-memory
spills; the launch spec evaluates within the H200's limits on every workload; and a CPU emulation
of the kernel's algorithm (same scheduler, tiling, masking shortcut, online softmax, bf16 P, epilogue)
matches the reference, which catches indexing bugs before any GPU run."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from solforge.candidate import Candidate, eval_expr, launch_env
from solforge.kernels import FamilyError, all_families, families_for, get_family
from solforge.kernels.attention_prefill import SMEM_LIMIT, UNCHECKED, ZTOK
from solforge.problem.loader import load_problem_dir
from tests.unit.family_checks import check_compiled, claimed

SUBSET = "FlashInfer-Bench"
CLAIMED = ["014_gqa_paged_prefill_causal_h32_kv4_d128_ps1",
           "015_gqa_paged_prefill_causal_h32_kv8_d128_ps1"]


@pytest.fixture(scope="module")
def problems(sol_execbench_dir):
    return {n: load_problem_dir(sol_execbench_dir / SUBSET / n) for n in CLAIMED}


# ── matching ─────────────────────────────────────────────────────────────────────────────────────
def test_claims_exactly_014_and_015(sol_execbench_dir):
    assert claimed(get_family("attention_prefill"), sol_execbench_dir) == CLAIMED


RESULTS = Path(__file__).resolve().parents[2] / "data" / "results" / "kernels_attention"


def gpu_evidence(rows_path: Path, problem) -> str:
    """'' when the bench rows hold every workload of the problem for every variant measured (at
    least 2), all correct; else what is missing or wrong."""
    import json

    rows = [json.loads(l) for l in rows_path.read_text().splitlines() if l.strip()]
    rows = [r for r in rows if r["problem"] == problem.name]
    want = {w.uuid for w in problem.workloads}
    by: dict = {}
    for r in rows:
        by.setdefault(json.dumps(r["params"], sort_keys=True), []).append(r)  # ids are per run
    if len(by) < 2:
        return f"{len(by)} variant(s) measured"
    for vid, rs in by.items():
        if {r["uuid"] for r in rs} != want:
            return f"{vid}: {len(want - {r['uuid'] for r in rs})} workloads not measured"
        bad = [r["workload"] for r in rs if not r.get("ok")]
        if bad:
            return f"{vid}: wrong on workloads {bad}"
    return ""


def test_gate_opened_only_with_gpu_evidence(problems):
    """The search is offered this family only if a GPU run found every variant correct on every
    workload of both problems (the rows are committed next to the results)."""
    fam = get_family("attention_prefill")
    assert fam in all_families()
    evidence = {n: gpu_evidence(RESULTS / "attention_prefill_h200_rows.jsonl", p) for n, p in problems.items()}
    if fam.offered:
        assert evidence == {n: "" for n in problems}, evidence
        import json

        rows = [json.loads(l) for l in (RESULTS / "attention_prefill_h200_rows.jsonl").read_text().splitlines()]
        for p in problems.values():
            assert fam in families_for(p)
            checked = [r["params"] for r in rows if r["problem"] == p.name]
            # every point the search may pick was among the GPU-checked variants
            assert all(params in checked for params in fam.param_space(p)), p.name
    else:
        for p in problems.values():
            assert fam not in families_for(p)


def test_gpu_evidence_catches_a_wrong_row(problems, tmp_path):
    import json

    src = (RESULTS / "attention_prefill_h200_rows.jsonl").read_text().splitlines()
    p = problems[CLAIMED[1]]
    assert gpu_evidence(RESULTS / "attention_prefill_h200_rows.jsonl", p) == ""
    rows = [json.loads(l) for l in src]
    i = next(k for k, r in enumerate(rows) if r["problem"] == p.name)
    rows[i]["ok"] = False
    (tmp_path / "bad.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    assert "wrong on workloads" in gpu_evidence(tmp_path / "bad.jsonl", p)
    keep = [r for r in rows if not (r["problem"] == p.name and r["workload"] == 5)]
    (tmp_path / "short.jsonl").write_text("\n".join(json.dumps(r) for r in keep))
    assert "not measured" in gpu_evidence(tmp_path / "short.jsonl", p)


def test_changed_reference_is_not_claimed(problems):
    defn = problems[CLAIMED[1]].definition
    data = defn.model_dump()
    # a non-causal variant (no delta-aligned limit) must not be served by a causal kernel
    data["reference"] = defn.reference.replace("min(q_idx + 1 + delta, num_kv_tokens)", "num_kv_tokens")
    assert not get_family("attention_prefill").matches(type(defn).model_validate(data))


def test_bad_params_rejected(problems):
    fam, p = get_family("attention_prefill"), problems[CLAIMED[0]]
    for bad in ({"BLOCK_M": 48, "BLOCK_N": 64, "STAGES": 2},     # not 16 rows per warp
                {"BLOCK_M": 64, "BLOCK_N": 24, "STAGES": 2},
                {"BLOCK_M": 64, "BLOCK_N": 64, "STAGES": 1},
                {"BLOCK_M": 128, "BLOCK_N": 128, "STAGES": 4},   # 288 KB of smem
                {"BLOCK_M": 64}):
        with pytest.raises(FamilyError):
            fam.instantiate(p, bad)


# ── compile + launch spec ────────────────────────────────────────────────────────────────────────
@pytest.mark.parametrize("name", CLAIMED)
def test_every_point_compiles_without_spills_and_launches_fit(problems, name, tmp_path):
    fam, p = get_family("attention_prefill"), problems[name]
    space = fam.param_space(p)
    assert len(space) >= 4
    space = space + [u for u in UNCHECKED if u not in space]  # staged for the next GPU check
    for params in space:
        cand = fam.instantiate(p, params)
        Candidate.model_validate_json(cand.model_dump_json())
        fused = bool(params.get("ZFUSE"))
        if fused:
            (launch,) = cand.launches
        else:
            zero, launch = cand.launches
            assert zero.kernel == "gqa_prefill_zero_rows"
        assert launch.kernel == "gqa_paged_prefill_causal"
        for w in p.workloads:
            env = launch_env(w.axes, w.scalars(), cand.params)
            gx, gy = (eval_expr(g, env) for g in launch.grid)
            if fused:   # zero CTAs after the n_attn attention tiles: ZTOK tokens each
                total_q, n_attn = (eval_expr(a.split(":", 1)[1], env) for a in launch.args[-2:])
                assert total_q == w.axes["total_q"] and (gx - n_attn) * ZTOK >= total_q > (gx - n_attn - 1) * ZTOK
                gx = n_attn
            else:
                assert eval_expr(zero.grid[0], env) * 8 >= w.axes["total_q"]   # one warp per token
                assert eval_expr(zero.block[0], env) == 256
                assert eval_expr(zero.args[-1].split(":", 1)[1], env) == w.axes["total_q"]
            block, smem = eval_expr(launch.block[0], env), eval_expr(launch.smem, env)
            batch = w.axes["len_indptr"] - 1
            group = cand.params["NUM_QO_HEADS"] // cand.params["NUM_KV_HEADS"]
            # every request's tiles fit under off(b) = floor(min(qo[b], kv[b])*G/BM) + b
            valid = min(w.axes["total_q"], w.axes["num_kv_indices"])
            assert gx >= (valid * group) // params["BLOCK_M"] + batch
            assert 1 <= gx < 2**31 - 1 and gy == cand.params["NUM_KV_HEADS"] <= 65535
            assert block == params["BLOCK_M"] // 16 * 32 <= 1024
            assert 0 < smem <= SMEM_LIMIT
            assert eval_expr(launch.args[-4 if fused else -2].split(":", 1)[1], env) == batch
        check_compiled(cand, tmp_path, ("HMMA.16816.F32.BF16", "LDSM", "LDGSTS"), what=params)


# ── CPU emulation of the kernel ──────────────────────────────────────────────────────────────────
def _bf16(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.bfloat16).to(torch.float32)


def _zero_rows_fused(out, lse, qo, kvp, *, group, num_kv_heads, nwarps, ztok):
    """ZFUSE=1's zero-row CTAs (zero_rows_part): CTA (zx, kvh), warp w takes tokens zx*ZTOK + w,
    + NWARPS, ... below (zx+1)*ZTOK; request by binary search once, then walked forward."""
    total_q, batch = out.shape[0], len(qo) - 1
    for kvh in range(num_kv_heads):
        for zx in range((total_q + ztok - 1) // ztok):
            for warp in range(nwarps):
                t_begin, t_end = zx * ztok + warp, min(total_q, (zx + 1) * ztok)
                if batch <= 0 or t_begin >= t_end:
                    continue
                lo, hi = 0, batch - 1
                while lo < hi:
                    mid = (lo + hi + 1) >> 1
                    if qo[mid] <= t_begin:
                        lo = mid
                    else:
                        hi = mid - 1
                b, q_end = lo, qo[lo + 1]
                zero_end = q_end - max(0, min(q_end - qo[b], kvp[b + 1] - kvp[b]))
                for tok in range(t_begin, t_end, nwarps):
                    while tok >= q_end:
                        b += 1
                        q_start, q_end = q_end, qo[b + 1]
                        zero_end = q_end - max(0, min(q_end - q_start, kvp[b + 1] - kvp[b]))
                    if tok < zero_end:
                        heads = slice(kvh * group, (kvh + 1) * group)
                        out[tok, heads], lse[tok, heads] = 0.0, -math.inf


def emulate(q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, sm_scale, *, block_m, block_n,
            num_kv_heads, delta_shift=0, zfuse=False):
    """The kernel's loop structure on the CPU: CTA grid and scheduler, tile rows (token, head),
    the zero shortcut, kv blocks with zero-filled tails, the per-warp mask shortcut, base-2 online
    softmax with the -inf base guard, P rounded to bf16, the epilogue. One warp = 16 rows."""
    total_q, h_qo, d = q.shape
    group = h_qo // num_kv_heads
    tile_q = block_m // group
    qo, kvp = qo_indptr.tolist(), kv_indptr.tolist()
    batch = len(qo) - 1
    out = torch.full((total_q, h_qo, d), float("nan"))     # poisoned: unwritten rows show up
    lse = torch.full((total_q, h_qo), float("nan"))
    kf, vf = k_cache[:, 0].float(), v_cache[:, 0].float()
    qf = q.float()
    scale2 = sm_scale * 1.4426950408889634
    if zfuse:
        _zero_rows_fused(out, lse, qo, kvp, group=group, num_kv_heads=num_kv_heads,
                         nwarps=block_m // 16, ztok=ZTOK)
    # launch 1, gqa_prefill_zero_rows: one warp per token, binary search for its request
    for tok in ([] if zfuse else range(total_q)):
        lo, hi = 0, batch - 1
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if qo[mid] <= tok:
                lo = mid
            else:
                hi = mid - 1
        q_len, kv_len = qo[lo + 1] - qo[lo], kvp[lo + 1] - kvp[lo]
        if tok - qo[lo] < q_len - max(0, min(q_len, kv_len)):
            out[tok], lse[tok] = 0.0, -math.inf
    # launch 2, gqa_paged_prefill_causal
    grid_x = max(1, min(total_q, kvp[-1]) * group // block_m + batch)
    off = [min(qo[b], kvp[b]) * group // block_m + b for b in range(batch)]
    seen = set()
    for kvh in range(num_kv_heads):
        for t in range(grid_x):
            lo, hi = 0, batch - 1                      # the kernel's binary search
            while lo < hi:
                mid = (lo + hi + 1) >> 1
                if off[mid] <= t:
                    lo = mid
                else:
                    hi = mid - 1
            b = lo
            q_start, q_len = qo[b], qo[b + 1] - qo[b]
            kv_start, kv_len = kvp[b], kvp[b + 1] - kvp[b]
            valid = max(0, min(q_len, kv_len))
            n_tiles = (valid * group + block_m - 1) // block_m
            j = t - off[b]
            if j < 0 or j >= n_tiles:
                continue
            tile = n_tiles - 1 - j
            assert (b, tile, kvh) not in seen
            seen.add((b, tile, kvh))
            delta = kv_len - q_len + delta_shift
            tok0 = (q_len - valid) + tile * tile_q
            tok_last = min(tok0 + tile_q, q_len) - 1
            kv_end = min(kv_len, tok_last + delta + 1)
            rows_valid = (tok_last - tok0 + 1) * group
            rows = torch.arange(block_m)
            tok = q_start + tok0 + rows // group
            head = kvh * group + rows % group
            ok = rows < rows_valid
            if kv_end <= 0:
                out[tok[ok], head[ok]] = 0.0
                lse[tok[ok], head[ok]] = -math.inf
                continue
            qt = torch.zeros(block_m, d)
            qt[ok] = qf[tok[ok], head[ok]]
            n_blocks = (kv_end + block_n - 1) // block_n
            ks = torch.zeros(n_blocks * block_n, d)
            vs = torch.zeros(n_blocks * block_n, d)
            pages = kv_indices[kv_start:kv_start + kv_end].long()
            ks[:kv_end], vs[:kv_end] = kf[pages, kvh], vf[pages, kvh]
            for w in range(block_m // 16):
                r = rows[w * 16:(w + 1) * 16]
                lim = torch.clamp(tok0 + r // group + delta + 1, max=kv_len)
                warp_min_lim = min(kv_len, tok0 + (w * 16) // group + delta + 1)
                m = torch.full((16,), -math.inf)
                l = torch.zeros(16)
                o = torch.zeros(16, d)
                for blk in range(n_blocks):
                    n0 = blk * block_n
                    s = qt[r] @ ks[n0:n0 + block_n].T
                    if n0 + block_n > warp_min_lim:
                        cols = n0 + torch.arange(block_n)
                        s = torch.where(cols[None, :] < lim[:, None], s * scale2, -math.inf)
                    else:
                        s = s * scale2
                    mx = torch.maximum(m, s.max(dim=1).values)
                    base = torch.where(mx == -math.inf, torch.zeros(()), mx)
                    alpha = torch.exp2(m - base)
                    m = mx
                    p = torch.exp2(s - base[:, None])
                    l = l * alpha + p.sum(dim=1)
                    o = o * alpha[:, None] + _bf16(p) @ vs[n0:n0 + block_n]
                inv = torch.where(l > 0, 1.0 / torch.where(l > 0, l, torch.ones(())), torch.zeros(()))
                good = ok[r]
                out[tok[r][good], head[r][good]] = _bf16(o * inv[:, None])[good]
                lse_w = torch.where(l > 0, m + torch.log2(torch.where(l > 0, l, torch.ones(()))),
                                    torch.full((), -math.inf))
                lse[tok[r][good], head[r][good]] = lse_w[good]
    return out.to(torch.bfloat16), lse


def _reference(defn):
    ns: dict = {}
    exec(compile(defn.reference, "<reference>", "exec"), ns)
    return ns["run"]


def _case(q_lens, kv_lens, h_qo, h_kv, seed):
    g = torch.Generator().manual_seed(seed)
    total_q, total_kv = sum(q_lens), sum(kv_lens)
    num_pages = total_kv + 7
    q = torch.randn(total_q, h_qo, 128, generator=g).to(torch.bfloat16)
    k = torch.randn(num_pages, 1, h_kv, 128, generator=g).to(torch.bfloat16)
    v = torch.randn(num_pages, 1, h_kv, 128, generator=g).to(torch.bfloat16)
    qo = torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0)), dtype=torch.int32)
    kvp = torch.tensor([0] + list(torch.tensor(kv_lens).cumsum(0)), dtype=torch.int32)
    idx = torch.randperm(num_pages, generator=g)[:total_kv].to(torch.int32)   # a real gather
    return q, k, v, qo, kvp, idx, 1.0 / math.sqrt(128)


# q_len < kv_len (prefix cached), == (fresh prefill), > (rows that see nothing), lengths that
# straddle tiles and kv blocks, a single token, a request without kv
CASES = [([5, 1, 19], [70, 1, 19]), ([9, 3], [4, 3]), ([1, 23], [130, 40]), ([4, 6, 2], [0, 8, 1])]


def _check(out, lse, ref_out, ref_lse):
    assert not torch.isnan(out.float()).any() and not torch.isnan(lse).any()  # every row written
    inf_ref = torch.isinf(ref_lse)
    assert torch.equal(torch.isinf(lse), inf_ref)
    assert torch.allclose(lse[~inf_ref], ref_lse[~inf_ref], atol=2e-3, rtol=1e-3), \
        (lse - ref_lse)[~inf_ref].abs().max()
    assert torch.allclose(out.float(), ref_out.float(), atol=1e-2, rtol=1e-2), \
        (out.float() - ref_out.float()).abs().max()


@pytest.mark.parametrize("name", CLAIMED)
def test_emulation_matches_reference_on_every_point(problems, name):
    fam, p = get_family("attention_prefill"), problems[name]
    ref = _reference(p.definition)
    h_kv = fam.analyze(p.definition).fixed["NUM_KV_HEADS"]
    for ci, (q_lens, kv_lens) in enumerate(CASES):
        args = _case(q_lens, kv_lens, 32, h_kv, seed=ci)
        ref_out, ref_lse = ref(*args)
        for params in fam.param_space(p) + UNCHECKED:
            out, lse = emulate(*args, block_m=params["BLOCK_M"], block_n=params["BLOCK_N"],
                               num_kv_heads=h_kv, zfuse=bool(params.get("ZFUSE")))
            _check(out, lse, ref_out, ref_lse)


def test_fused_zero_rows_cover_long_zero_runs():
    """ZFUSE's zero CTAs across ZTOK boundaries, empty requests and a request of only zero rows:
    exactly the rows gqa_prefill_zero_rows writes (the rest stays poisoned)."""
    import re

    src = (Path(__file__).resolve().parents[2] / "kernels_cuda" / "attention_prefill" / "attention_prefill.cu").read_text()
    assert int(re.search(r"#define ZTOK (\d+)", src).group(1)) == ZTOK   # grid and kernel agree
    q_lens, kv_lens = [150, 0, 3, 70, 1], [2, 5, 0, 69, 1]
    qo = [0] + list(torch.tensor(q_lens).cumsum(0).tolist())
    kvp = [0] + list(torch.tensor(kv_lens).cumsum(0).tolist())
    total_q, h = qo[-1], 32
    want = torch.zeros(total_q, dtype=torch.bool)
    for b, (ql, kl) in enumerate(zip(q_lens, kv_lens)):
        want[qo[b]:qo[b] + ql - max(0, min(ql, kl))] = True
    for nwarps in (4, 8):
        out = torch.full((total_q, h, 4), float("nan"))
        lse = torch.full((total_q, h), float("nan"))
        _zero_rows_fused(out, lse, qo, kvp, group=4, num_kv_heads=8, nwarps=nwarps, ztok=ZTOK)
        written = ~torch.isnan(lse)
        assert torch.equal(written, want[:, None].expand(-1, h)), nwarps
        assert (out[want] == 0).all() and torch.isinf(lse[want]).all()


def test_zfuse_off_compiles_to_the_gpu_checked_code(problems):
    """The ZFUSE additions are all inside `#if ZFUSE`: without them the source compiles to the same
    cubin, so the GPU evidence of the ZFUSE=0 points still holds for today's source."""
    import re

    from solforge.kernels.build import compile_cuda_candidate

    fam, p = get_family("attention_prefill"), problems[CLAIMED[1]]
    cand = fam.instantiate(p, fam.param_space(p)[0])
    src = cand.sources["attention_prefill.cu"]
    stripped = re.sub(r"\n#if ZFUSE\n.*?\n#endif\n", "\n", src, flags=re.S)
    stripped = re.sub(r"#ifndef ZFUSE\n#define ZFUSE 0\n#endif\n#define ZTOK[^\n]*\n", "", stripped)
    assert stripped != src and "zero_rows_part" not in stripped and "ZTOK" not in re.sub(r"//[^\n]*", "", stripped)
    a, _ = compile_cuda_candidate(cand)
    b, _ = compile_cuda_candidate(cand.model_copy(update={"sources": {"attention_prefill.cu": stripped}}))
    assert a == b


def test_emulation_catches_a_shifted_causal_limit(problems):
    """The check can fail: the same emulation with the causal limit off by one does not pass."""
    p = problems[CLAIMED[1]]
    args = _case(*CASES[0], 32, 8, seed=0)
    ref_out, ref_lse = _reference(p.definition)(*args)
    out, lse = emulate(*args, block_m=64, block_n=32, num_kv_heads=8, delta_shift=1)
    with pytest.raises(AssertionError):
        _check(out, lse, ref_out, ref_lse)


# ── lane-level check of one warp's fragments ─────────────────────────────────────────────────────
# The address formulas below are the kernel's (attention_prefill.cu: swz, the ldsm_x4 row/chunk of
# Q, K and V, the P packing); ldmatrix and mma.m16n8k16 follow the PTX ISA fragment layouts.
D = 128


def _swz(row: int, chunk: int) -> int:
    return row * D + ((chunk ^ (row & 7)) << 3)


def _to_smem(tile: torch.Tensor) -> torch.Tensor:
    s = torch.full((tile.shape[0] * D,), float("nan"))
    for r in range(tile.shape[0]):
        for c in range(D // 8):
            s[_swz(r, c):_swz(r, c) + 8] = tile[r, c * 8:(c + 1) * 8]
    return s


def _ldsm_x4(smem, addr, trans=False):
    """regs[lane][i] = (lo, hi) of matrix i; lanes 8i..8i+7 give matrix i's row addresses."""
    regs = [[None] * 4 for _ in range(32)]
    for i in range(4):
        m = torch.stack([smem[addr[8 * i + j]:addr[8 * i + j] + 8] for j in range(8)])
        banks = {(addr[8 * i + j] * 2 // 16) % 8 for j in range(8)}
        assert len(banks) == 8, "ldmatrix phase with a shared-memory bank conflict"
        for t in range(32):
            g, c = t // 4, t % 4
            regs[t][i] = (m[2 * c, g], m[2 * c + 1, g]) if trans else (m[g, 2 * c], m[g, 2 * c + 1])
    return regs


def _mma(acc, a, b0, b1):
    """acc[lane] (4 floats) += A (16x16 from a[lane] 4 pairs) @ B (16x8 from b0/b1[lane] pairs)."""
    A, B = torch.zeros(16, 16), torch.zeros(16, 8)
    for t in range(32):
        g, c = t // 4, t % 4
        for reg, (r, k) in enumerate(((g, 2 * c), (g + 8, 2 * c), (g, 2 * c + 8), (g + 8, 2 * c + 8))):
            A[r, k], A[r, k + 1] = a[t][reg]
        B[2 * c, g], B[2 * c + 1, g] = b0[t]
        B[2 * c + 8, g], B[2 * c + 9, g] = b1[t]
    C = A @ B
    for t in range(32):
        g, c = t // 4, t % 4
        acc[t] = [acc[t][0] + C[g, 2 * c], acc[t][1] + C[g, 2 * c + 1],
                  acc[t][2] + C[g + 8, 2 * c], acc[t][3] + C[g + 8, 2 * c + 1]]


def _frags_to_matrix(frags, cols):
    out = torch.zeros(16, cols)
    for t in range(32):
        g, c = t // 4, t % 4
        for n, f in enumerate(frags[t]):
            out[g, n * 8 + 2 * c], out[g, n * 8 + 2 * c + 1] = f[0], f[1]
            out[g + 8, n * 8 + 2 * c], out[g + 8, n * 8 + 2 * c + 1] = f[2], f[3]
    return out


# the kernel lines warp_qkt / warp_pv spell the same way for both attention kernels (each kernel's
# test adds its own Q row and K/V tile bases)
WARP_FORMULAS = ("row * HEAD_DIM + ((chunk ^ (row & 7)) << 3)",
                 "int r = n * 16 + (lane & 7) + (lane >> 4) * 8;",
                 "int r = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;",
                 "ldsm_x4_t(smem_u32(bv + swz(r, d * 2 + (lane >> 4)))",
                 "pa[1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);",
                 "pa[2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);")


def warp_qkt(sQ, sK, q_row0: int, k_base: int, n_cols: int):
    """One warp's S fragments (per lane) as the kernel computes them: Q rows [q_row0, q_row0 + 16)
    and K rows [0, n_cols) of the tile at element offset k_base, both through ldmatrix, mma.sync."""
    lanes = range(32)
    qf = [_ldsm_x4(sQ, [_swz(q_row0 + (l & 7) + ((l >> 3) & 1) * 8, kk * 2 + (l >> 4)) for l in lanes])
          for kk in range(D // 16)]
    s = [[[0.0] * 4 for _ in range(n_cols // 8)] for _ in lanes]
    for kk in range(D // 16):
        for n in range(n_cols // 16):
            b = _ldsm_x4(sK, [k_base + _swz(n * 16 + (l & 7) + (l >> 4) * 8, kk * 2 + ((l >> 3) & 1))
                              for l in lanes])
            for pair, (i0, i1) in enumerate(((0, 1), (2, 3))):
                acc = [s[t][2 * n + pair] for t in lanes]
                _mma(acc, [qf[kk][t] for t in lanes], [b[t][i0] for t in lanes], [b[t][i1] for t in lanes])
                for t in lanes:
                    s[t][2 * n + pair] = acc[t]
    return s


def warp_pv(s, sV, v_base: int):
    """One warp's O fragments: P (bf16 from the S registers `s`, packed as the kernel's pa) @ the
    V rows of the tile at element offset v_base, V through ldmatrix.trans."""
    lanes = range(32)
    p = [[[_bf16(torch.tensor(float(x))) for x in f] for f in s[t]] for t in lanes]
    o = [[[0.0] * 4 for _ in range(D // 8)] for _ in lanes]
    for kk in range(len(s[0]) // 2):
        pa = [[(p[t][2 * kk][0], p[t][2 * kk][1]), (p[t][2 * kk][2], p[t][2 * kk][3]),
               (p[t][2 * kk + 1][0], p[t][2 * kk + 1][1]), (p[t][2 * kk + 1][2], p[t][2 * kk + 1][3])]
              for t in lanes]
        for d in range(D // 16):
            b = _ldsm_x4(sV, [v_base + _swz(kk * 16 + (l & 7) + ((l >> 3) & 1) * 8, d * 2 + (l >> 4))
                              for l in lanes], trans=True)
            for pair, (i0, i1) in enumerate(((0, 1), (2, 3))):
                acc = [o[t][2 * d + pair] for t in lanes]
                _mma(acc, pa, [b[t][i0] for t in lanes], [b[t][i1] for t in lanes])
                for t in lanes:
                    o[t][2 * d + pair] = acc[t]
    return o


def test_warp_fragments_compute_qkt_and_pv():
    block_n, warp = 32, 1
    g = torch.Generator().manual_seed(3)
    Q, K, V = (_bf16(torch.randn(n, D, generator=g)) for n in (32, block_n, block_n))
    sQ, sK, sV = _to_smem(Q), _to_smem(K), _to_smem(V)
    s = warp_qkt(sQ, sK, warp * 16, 0, block_n)
    S = _frags_to_matrix(s, block_n)
    Qw = Q[warp * 16:(warp + 1) * 16]
    assert torch.allclose(S, Qw @ K.T, atol=1e-3, rtol=1e-4)
    O = _frags_to_matrix(warp_pv(s, sV, 0), D)
    assert torch.allclose(O, _bf16(S) @ V, atol=1e-2, rtol=1e-3)


def test_fragment_check_uses_the_kernels_formulas():
    """The lane-level test above is only worth something while its formulas are the kernel's."""
    from solforge.kernels.attention_common import kernel_source

    src = kernel_source("attention_prefill", "attention_prefill.cu")   # swz etc.: common/attention_mma.cuh
    for expr in WARP_FORMULAS + ("int r = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;",
                                 "swz(r, kk * 2 + (lane >> 4))",
                                 "swz(r, kk * 2 + ((lane >> 3) & 1))"):
        assert expr in src, expr
