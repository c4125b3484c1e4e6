"""The flash attention segment template (solforge/compiler/templates/attention.py): specs written
here compile with NVRTC for sm_90a with the launch args matching the kernels' parameters, the main
variants without local memory, and the CPU model of the kernel's block loop
(attention_emulate.py, which evaluates the generated launch expressions) matches torch on small
shapes with tails in Sq, Sk and the head dims."""

from __future__ import annotations

import math

import pytest
import torch

from solforge.candidate import Candidate
from solforge.compile import compile_candidate
from solforge.compiler.templates.attention import (AttentionSpec, AttentionSpecError, TensorLayout, check_params,
                                                   default_params, generate, param_space, smem_bytes)
from solforge.compiler.templates.attention_emulate import emulate


def _bhsd(arg, h, s, d, dt, layout="bhsd"):
    if layout == "bshd":   # (B, S, H, D) memory read as (b, h, s, d)
        return TensorLayout(arg=arg, strides=(f"{s} * {h} * {d}", str(d), f"{h} * {d}", "1"), dtype=dt)
    return TensorLayout(arg=arg, strides=(f"{h} * {s} * {d}", f"{s} * {d}", str(d), "1"), dtype=dt)


def make_spec(dt="bfloat16", D=64, DV=None, G=1, layout="bhsd", causal=False, offset="0", window=None,
              softcap=None, bias=False, mask=None, lse=False, round_scores=False, out_dt=None):
    DV = DV or D
    hkv = f"(H // {G})"
    extra = {}
    if bias:
        extra["bias"] = TensorLayout(arg="bias", strides=("0", "SQ * SK", "SK", "1"), dtype=dt)   # (1, H, SQ, SK)
    if mask:
        extra["mask"] = TensorLayout(arg="mask", strides=("SQ * SK", "0", "SK", "1"), dtype="bool")  # (B, 1, SQ, SK)
        extra["mask_keep"] = mask == "keep"
    if lse:
        extra["lse"] = TensorLayout(arg="lse", strides=("H * SQ", "SQ", "1"), dtype="float32")
    return AttentionSpec(q=_bhsd("q", "H", "SQ", D, dt, layout), k=_bhsd("k", hkv, "SK", D, dt, layout),
                         v=_bhsd("v", hkv, "SK", DV, dt, layout),
                         o=_bhsd("o", "H", "SQ", DV, out_dt or dt, layout), batch="B", heads="H", seq_q="SQ",
                         seq_k="SK", head_dim=D, head_dim_v=DV, group=G, scale="scale", causal=causal,
                         causal_offset=offset, window=window, softcap=softcap, round_scores=round_scores, **extra)


def _candidate(spec, params=None) -> Candidate:
    low = generate(spec, params)
    return Candidate(problem="t/attention", sources=low.sources, params=low.params, launches=low.launches,
                     workspace=low.scratch_bytes)


# ── compile ──────────────────────────────────────────────────────────────────────────────────
COMPILE = [
    ("bf16_d128", dict(D=128), None),
    ("bf16_d64_gqa4_causal_lse", dict(D=64, G=4, causal=True, lse=True), None),
    ("fp16_d256_gqa2", dict(dt="float16", D=256, G=2), None),
    ("bf16_d72_bias_mask_softcap_round", dict(D=72, bias=True, mask="fill", softcap="30.0", round_scores=True), None),
    ("bf16_d40_window_keep", dict(D=40, causal=True, window="64", mask="keep"), None),
    ("bf16_dv_ne_dqk", dict(D=192, DV=128), None),
    ("bf16_decode_split", dict(D=128, G=8, causal=True, offset="SK - SQ"), dict(BLOCK_M=16, BLOCK_N=64, STAGES=3, NSPLIT=8)),
    ("bf16_split_lse", dict(D=64, lse=True), dict(BLOCK_M=32, BLOCK_N=32, STAGES=2, NSPLIT=4)),
    ("bf16_bm128", dict(D=128, causal=True), dict(BLOCK_M=128, BLOCK_N=32, STAGES=3, NSPLIT=1)),
    ("fp32_d64", dict(dt="float32", D=64), None),
    ("fp32_d128_gqa4_causal", dict(dt="float32", D=128, G=4, causal=True, layout="bshd"), None),
    ("fp32_d256", dict(dt="float32", D=256), None),
    ("fp32_d36_bias_mask_softcap_lse", dict(dt="float32", D=36, bias=True, mask="fill", softcap="50.0", lse=True), None),
    ("fp32_split", dict(dt="float32", D=80, G=2), dict(BLOCK_M=16, BLOCK_N=32, STAGES=2, NSPLIT=8)),
    ("bf16_out_fp32", dict(D=64, out_dt="float32"), None),
    ("fp32_d512_dvsplit", dict(dt="float32", D=512), None),          # default: DV_SPLIT 2, BLOCK_M 32
    ("bf16_d512_dvsplit_causal", dict(D=512, causal=True), None),
]
# the variants the compiler offers first: no local memory (spills) allowed
NO_SPILL = {"bf16_d128", "bf16_d64_gqa4_causal_lse", "fp16_d256_gqa2", "fp32_d64", "fp32_d128_gqa4_causal",
            "bf16_decode_split", "fp32_d256", "bf16_bm128", "fp32_d512_dvsplit", "bf16_d512_dvsplit_causal"}


@pytest.mark.parametrize("name,kw,params", COMPILE, ids=[c[0] for c in COMPILE])
def test_compiles_sm90a(name, kw, params, tmp_path):
    spec = make_spec(**kw)
    cand = _candidate(spec, params)
    res = compile_candidate(cand, arch="sm_90a")
    assert res.ok, res.log[-3000:]
    nsplit = generate(spec, params).config["NSPLIT"]
    want_kernels = {"attn_fwd"} | ({"attn_combine"} if nsplit > 1 else set())
    assert {ln.kernel for ln in cand.launches} == want_kernels
    if name in NO_SPILL:
        from tests.unit.family_checks import usage_and_sass
        dumps = usage_and_sass(next(iter(res.cubins.values())), tmp_path)
        if dumps is None:
            pytest.skip("no cuobjdump in the wheels")
        usage, sass = dumps
        assert usage.count("LOCAL:0") == len(want_kernels) and "STACK:0" in usage, usage
        assert "LDL" not in sass and "STL" not in sass
        mma = "HMMA.16816" if kw.get("dt", "bfloat16") != "float32" else "HMMA.1688.F32.TF32"
        assert mma in sass, f"{mma} not in the SASS"


def test_params_checked():
    spec = make_spec(D=256)
    with pytest.raises(AttentionSpecError):
        check_params(spec, {"BLOCK_M": 48, "BLOCK_N": 64, "STAGES": 2, "NSPLIT": 1})
    with pytest.raises(AttentionSpecError):   # 256-wide O accumulator with a 128-wide S tile
        check_params(spec, {"BLOCK_M": 64, "BLOCK_N": 128, "STAGES": 2, "NSPLIT": 1})
    space = param_space(spec)
    assert space and all(smem_bytes(spec, p) <= 227 * 1024 for p in space)
    with pytest.raises(AttentionSpecError):
        generate(make_spec(D=520))
    assert default_params(make_spec(dt="float32", D=512))["DV_SPLIT"] == 2
    with pytest.raises(AttentionSpecError):
        generate(AttentionSpec(**{**make_spec().__dict__, "k": TensorLayout("k", ("0", "0", "0", "1"), "float16")}))


# ── CPU model of the block loop vs torch ─────────────────────────────────────────────────────
def _reference(spec_kw, q, k, v, bias, mask, scale, sq, sk):
    G = spec_kw.get("G", 1)
    dt = q.dtype
    s = q.double() @ k.double().repeat_interleave(G, 1).transpose(-1, -2)
    rnd = (lambda x: x.to(dt).double()) if spec_kw.get("round_scores") else (lambda x: x)
    s = rnd(rnd(s) * scale)
    if spec_kw.get("softcap"):
        c = float(spec_kw["softcap"])
        s = rnd(rnd(torch.tanh(rnd(s / c))) * c)
    if bias is not None:
        s = rnd(s + bias.double())
    i = torch.arange(sq)[:, None]
    j = torch.arange(sk)[None, :]
    off = sk - sq if spec_kw.get("offset") == "SK - SQ" else 0
    keep = torch.ones(sq, sk, dtype=torch.bool)
    if spec_kw.get("causal"):
        keep &= j <= i + off
    if spec_kw.get("window"):
        keep &= i + off - j < int(spec_kw["window"])
    s = s.masked_fill(~keep, -math.inf)
    if mask is not None:
        s = s.masked_fill(~mask if spec_kw["mask"] == "keep" else mask, -math.inf)
    return torch.softmax(s, -1) @ v.double().repeat_interleave(G, 1), torch.logsumexp(s, -1)


EMULATE = [
    ("bf16_gqa3_causal_tails", dict(D=40, G=3, causal=True), None, dict(B=2, H=6, SQ=37, SK=37)),
    ("bf16_bottom_right_cross", dict(D=64, G=2, causal=True, offset="SK - SQ"), None, dict(B=1, H=4, SQ=21, SK=90)),
    ("bf16_empty_rows", dict(D=16, causal=True, offset="SK - SQ"), None, dict(B=1, H=1, SQ=30, SK=10)),   # bottom-right, SQ > SK
    ("fp16_softcap_bias_round", dict(dt="float16", D=24, bias=True, softcap="20.0", round_scores=True), None,
     dict(B=2, H=2, SQ=33, SK=65)),
    ("bf16_mask_fill_bshd", dict(D=32, mask="fill", layout="bshd"), None, dict(B=2, H=3, SQ=17, SK=71)),
    ("bf16_window", dict(D=32, causal=True, window="9"), dict(BLOCK_M=32, BLOCK_N=16, STAGES=2, NSPLIT=1),
     dict(B=1, H=2, SQ=70, SK=70)),
    ("fp32_lse_mask_keep", dict(dt="float32", D=20, mask="keep", lse=True), None, dict(B=2, H=2, SQ=19, SK=45)),
    ("bf16_split_decode_lse", dict(D=64, G=4, causal=True, offset="SK - SQ", lse=True),
     dict(BLOCK_M=16, BLOCK_N=16, STAGES=2, NSPLIT=5), dict(B=2, H=8, SQ=2, SK=150)),
    ("fp32_split_gqa", dict(dt="float32", D=24, G=2), dict(BLOCK_M=16, BLOCK_N=16, STAGES=2, NSPLIT=3),
     dict(B=1, H=4, SQ=5, SK=61)),
    ("bf16_dv_ne_dqk", dict(D=48, DV=24), None, dict(B=1, H=2, SQ=20, SK=33)),
    ("bf16_dv_split_tail", dict(D=48, DV=40, causal=True), dict(BLOCK_M=16, BLOCK_N=16, STAGES=2, NSPLIT=1, DV_SPLIT=2),
     dict(B=1, H=2, SQ=20, SK=33)),
    ("bf16_split_compiled_one_at_run_time", dict(D=16, lse=True), dict(BLOCK_M=16, BLOCK_N=16, STAGES=2, NSPLIT=8),
     dict(B=2, H=8, SQ=300, SK=40)),   # a big grid: the launch picks 1 split, attn_fwd writes the output
    ("fp32_dv_split_nsplit_lse", dict(dt="float32", D=16, DV=24, lse=True),
     dict(BLOCK_M=16, BLOCK_N=16, STAGES=2, NSPLIT=3, DV_SPLIT=2), dict(B=1, H=2, SQ=3, SK=50)),
]


@pytest.mark.parametrize("name,kw,params,ax", EMULATE, ids=[c[0] for c in EMULATE])
def test_block_loop_model_matches_torch(name, kw, params, ax):
    spec = make_spec(**kw)
    low = generate(spec, params or default_params(spec))
    gen = torch.Generator().manual_seed(0)
    dt = getattr(torch, kw.get("dt", "bfloat16"))
    B, H, SQ, SK = ax["B"], ax["H"], ax["SQ"], ax["SK"]
    G, D, DV = kw.get("G", 1), kw["D"], kw.get("DV") or kw["D"]
    bshd = kw.get("layout") == "bshd"

    def t(h, s, d):
        x = torch.randn(B, s, h, d, generator=gen).to(dt) if bshd else torch.randn(B, h, s, d, generator=gen).to(dt)
        return x, (x.transpose(1, 2) if bshd else x)
    (q, qv), (k, kv), (v, vv) = t(H, SQ, D), t(H // G, SK, D), t(H // G, SK, DV)
    o = torch.full((B, SQ, H, DV) if bshd else (B, H, SQ, DV), float("nan"), dtype=dt)
    tensors = {"q": q, "k": k, "v": v, "o": o}
    bias = mask = None
    if kw.get("bias"):
        tensors["bias"] = torch.randn(1, H, SQ, SK, generator=gen).to(dt)
        bias = tensors["bias"]
    if kw.get("mask"):
        tensors["mask"] = torch.rand(B, 1, SQ, SK, generator=gen) < 0.3
        mask = tensors["mask"]
    if kw.get("lse"):
        tensors["lse"] = torch.full((B, H, SQ), float("nan"))
    scale = 0.37
    emulate(low, tensors, {**ax, "scale": scale})
    ref, ref_lse = _reference(kw, qv, kv, vv, bias, mask, scale, SQ, SK)
    got = (o.transpose(1, 2) if bshd else o).double()
    assert torch.equal(torch.isnan(got), torch.isnan(ref)), "rows with no visible key: NaN in both"
    tol = {torch.float32: 1e-5, torch.float16: 3e-3, torch.bfloat16: 2e-2}[dt]
    torch.testing.assert_close(got.nan_to_num(), ref.nan_to_num(), atol=tol, rtol=tol)
    if kw.get("lse"):
        torch.testing.assert_close(tensors["lse"].double(), ref_lse, atol=1e-4, rtol=1e-4)
    if name == "bf16_empty_rows":
        assert torch.isnan(got).any()


def test_model_catches_a_wrong_stride():
    """The CPU model reads the generated launch args: a layout that lies about K's strides fails."""
    kw = dict(D=16)
    spec = make_spec(**kw)
    bad = AttentionSpec(**{**spec.__dict__, "k": TensorLayout("k", ("H * SK * 16", "SK * 16", "1", "SK"), "bfloat16")})
    gen = torch.Generator().manual_seed(0)
    ax = dict(B=1, H=2, SQ=9, SK=12)
    q, k, v = (torch.randn(1, 2, n, 16, generator=gen).to(torch.bfloat16) for n in (9, 12, 12))
    outs = []
    for sp in (spec, bad):
        o = torch.empty(1, 2, 9, 16, dtype=torch.bfloat16)
        emulate(generate(sp), {"q": q, "k": k, "v": v, "o": o}, {**ax, "scale": 0.25})
        outs.append(o.double())
    ref, _ = _reference(kw, q, k, v, None, None, 0.25, 9, 12)
    torch.testing.assert_close(outs[0], ref, atol=2e-2, rtol=2e-2)
    assert (outs[1] - ref).abs().max() > 0.1


def test_rebind_moves_tensors_into_the_workspace():
    """An intermediate placed in the workspace: its launch argument and offset change, the layout not."""
    from solforge.compiler.templates.attention import rebind
    spec = make_spec(D=32)
    moved = rebind(spec, {"k": ("workspace", "1024"), "o": ("out", "0")}, scratch=("workspace", "4096"))
    assert (moved.k.arg, moved.k.offset, moved.k.strides) == ("workspace", "(0) + (1024)", spec.k.strides)
    assert moved.o.arg == "out" and moved.q == spec.q and moved.scratch_offset == "4096"
    args = generate(moved, dict(BLOCK_M=64, BLOCK_N=32, STAGES=2, NSPLIT=2)).launches[0]["args"]
    assert args[6:8] == ["workspace", "int64:(0) + (1024)"] and args[-3:-1] == ["workspace", "int64:4096"]


def test_two_segments_in_one_candidate():
    """Two attention segments of one plan (e.g. self- and cross-attention of a decoder layer): each
    its own unit, kernel names and configuration; the candidate carries no params of theirs."""
    a = generate(make_spec(D=64, G=4, causal=True), name="attn0")
    b = generate(make_spec(dt="float32", D=24), dict(BLOCK_M=32, BLOCK_N=32, STAGES=2, NSPLIT=2), name="attn1")
    assert a.params == {} and b.params == {} and "#define GROUP 4" in a.sources["attn0.cu"]
    cand = Candidate(problem="t/two", sources={**a.sources, **b.sources}, launches=a.launches + b.launches,
                     workspace=b.scratch_bytes)
    res = compile_candidate(cand, arch="sm_90a")
    assert res.ok, res.log[-2000:]
    assert [ln.kernel for ln in cand.launches] == ["attn0_fwd", "attn0_combine", "attn1_fwd", "attn1_combine"]
    with pytest.raises(AttentionSpecError):
        generate(make_spec(), name="attn-0")


def test_split_count_follows_the_shapes():
    """One candidate for all workloads: decode shapes split the keys, big prefill grids do not."""
    from solforge.problem import axis_expr
    spec = make_spec(D=128, G=8, causal=True, offset="SK - SQ")
    low = generate(spec, dict(BLOCK_M=16, BLOCK_N=64, STAGES=3, NSPLIT=16))
    nsplit = low.launches[0]["args"][-1].split(":", 1)[1]

    def n(**ax):
        return axis_expr.evaluate(nsplit, ax)
    assert n(B=1, H=32, SQ=1, SK=8192) == 16          # 4 CTAs without splitting
    assert n(B=1, H=32, SQ=1, SK=100) == 1            # 2 kv blocks: at most half of them
    assert n(B=64, H=32, SQ=1, SK=8192) == 2          # 256 CTAs already: a little more
    assert n(B=8, H=32, SQ=512, SK=512) == 1          # prefill: no partials
    ws = axis_expr.evaluate(low.scratch_bytes, {"B": 8, "H": 32, "SQ": 512, "SK": 512})
    assert ws == 16                                   # nothing but the placeholder when unsplit
