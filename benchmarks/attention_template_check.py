#!/usr/bin/env python3
"""GPU check of the compiler's flash attention segment (solforge/compiler/templates/attention.py).

  prepare (CPU, NVRTC)  builds every case's AttentionSpec, generates and compiles it for sm_90a and
                        stages the cubins under --dir (default .carry/attn_check) with cases.json.
  run (GPU)             per case, several random shapes (seeded): fresh inputs in the case's layout
                        (permuted, packed-QKV, transposed-K, broadcast bias/mask views), the segment
                        launched through solforge.compile.launcher, compared with a float64 torch
                        reference of the same math (GQA repeat, causal/window/softcap/bias/mask, lse);
                        prints max abs error, whether it is within the case's tolerance, our time and
                        torch's (explicit eager attention in the case's dtype, and SDPA where it can
                        express the case). A failing or crashing case prints one line and the run goes on.
  all                   prepare then run (a box with NVRTC).
  emulate (CPU)         run's checks on small shapes with the CPU model of the kernel
                        (solforge/compiler/templates/attention_emulate.py) in place of the cubins.

    python benchmarks/attention_template_check.py prepare            # here
    python benchmarks/attention_template_check.py run --out OUT      # on the H200 (carry .carry/attn_check)

Writes rows.jsonl and table.txt to --out when given.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# ───────────────────────────────────────────── cases ─────────────────────────────────────────────
# layout: how Q/K/V/O sit in memory. bhsd: (B, H, S, D) contiguous; bshd: (B, S, H, D) (the
# view(...).transpose(1, 2) of a projection); packed: one (B, S, Hq + 2 Hkv, D) tensor holding q, k, v
# (a fused QKV projection's split); kT: K stored (B, Hkv, D, S) (dim stride != 1: element loads).
# causal: None, "tl" (j <= i) or "br" (j <= i + SK - SQ). regime: prefill (SQ = SK), cross (SQ != SK)
# or decode (SQ in 1..4, long SK).
BASE = dict(dtype="bfloat16", D=128, DV=None, G=1, layout="bhsd", causal=None, window=None, softcap=None,
            bias=None, mask=None, lse=False, round_scores=False, regime="prefill", params=None)
CASES = [
    dict(name="bf16_d128_mha"),
    dict(name="bf16_d128_gqa4_causal", G=4, causal="tl", layout="bshd"),
    dict(name="bf16_d64_gqa8_causal_br_cross", D=64, G=8, causal="br", regime="cross"),
    dict(name="fp16_d128_causal_lse", dtype="float16", causal="tl", lse=True),
    dict(name="bf16_d256_gqa2", D=256, G=2, layout="bshd"),
    dict(name="bf16_d96_packed", D=96, layout="packed", causal="tl"),
    dict(name="bf16_d72_odd_bias_full", D=72, bias="full"),
    dict(name="bf16_d100_slowload", D=100, G=2, causal="tl"),
    dict(name="bf16_d40_mask_fill", D=40, mask="fill"),
    dict(name="bf16_d64_mask_keep_gqa", D=64, G=4, mask="keep", layout="bshd"),
    dict(name="bf16_d128_softcap_causal", softcap="30.0", causal="tl", round_scores=True),
    dict(name="bf16_d128_window", causal="tl", window="100", G=2),
    dict(name="bf16_d128_bias_bcast_round", bias="bcast", round_scores=True),
    dict(name="bf16_kT_layout", D=64, layout="kT"),
    dict(name="bf16_dv_ne_dqk", D=192, DV=128, G=1),
    dict(name="bf16_decode_gqa8_split", G=8, regime="decode", causal="br", params=dict(BLOCK_M=16, BLOCK_N=64, STAGES=3, NSPLIT=8)),
    dict(name="bf16_decode_mha_split_lse", regime="decode", lse=True, params=dict(BLOCK_M=16, BLOCK_N=64, STAGES=2, NSPLIT=4)),
    dict(name="fp16_decode_gqa4_split_d256", dtype="float16", D=256, G=4, regime="decode", params=dict(BLOCK_M=16, BLOCK_N=32, STAGES=2, NSPLIT=16)),
    dict(name="bf16_bm128_bn32_st3", params=dict(BLOCK_M=128, BLOCK_N=32, STAGES=3, NSPLIT=1), causal="tl"),
    dict(name="fp32_d64_mha", dtype="float32", D=64),
    dict(name="fp32_d128_gqa4_causal", dtype="float32", G=4, causal="tl", layout="bshd"),
    dict(name="fp32_d64_mask_fill_lse", dtype="float32", D=64, mask="fill", lse=True),
    dict(name="fp32_d80_bias_row", dtype="float32", D=80, bias="row"),
    dict(name="fp32_d36_packed", dtype="float32", D=36, layout="packed"),
    dict(name="fp32_d128_softcap", dtype="float32", softcap="50.0"),
    dict(name="fp32_d256_cross", dtype="float32", D=256, regime="cross"),
    dict(name="fp32_decode_split", dtype="float32", D=64, G=4, regime="decode", params=dict(BLOCK_M=16, BLOCK_N=32, STAGES=2, NSPLIT=8)),
    dict(name="fp32_kT_causal_br", dtype="float32", D=64, layout="kT", causal="br", regime="cross"),
    dict(name="fp32_d512_single_head", dtype="float32", D=512),          # VAE-style: default DV_SPLIT 2
    dict(name="bf16_d512_causal", D=512, causal="tl"),
    dict(name="bf16_d80_dvsplit2", D=80, params=dict(BLOCK_M=64, BLOCK_N=64, STAGES=2, NSPLIT=1, DV_SPLIT=2)),
    dict(name="fp32_decode_split_dvsplit", dtype="float32", D=64, G=2, regime="decode", lse=True,
         params=dict(BLOCK_M=16, BLOCK_N=32, STAGES=2, NSPLIT=4, DV_SPLIT=2)),
]
TOL = {"float32": (5e-5, 5e-5), "float16": (4e-3, 1e-2), "bfloat16": (2e-2, 2e-2)}   # (atol, rtol)


def full_case(c: dict) -> dict:
    c = {**BASE, **c}
    c["DV"] = c["DV"] or c["D"]
    return c


def layouts(c: dict) -> dict:
    """Per tensor: (storage shape as expressions, strides over (b, h, s, d), offset) for q, k, v, o."""
    D, DV = c["D"], c["DV"]
    hkv = f"(H // {c['G']})"
    if c["layout"] == "packed":   # (B, S, H + 2 Hkv, D): q heads, then k heads, then v heads
        assert D == DV
        tot = f"(H + 2 * {hkv})"
        st = (f"SQ * {tot} * {D}", str(D), f"{tot} * {D}", "1")
        return {"qkv": ["B", "SQ", tot, D], "q": (None, st, "0"), "k": (None, st, f"H * {D}"),
                "v": (None, st, f"(H + {hkv}) * {D}"),
                "o": (["B", "SQ", "H", DV], (f"SQ * H * {DV}", str(DV), f"H * {DV}", "1"), "0")}
    if c["layout"] == "bshd":
        def mk(s, h, d):
            return ([("B"), s, h, d], (f"{s} * {h} * {d}", str(d), f"{h} * {d}", "1"), "0")
    else:
        def mk(s, h, d):
            return (["B", h, s, d], (f"{h} * {s} * {d}", f"{s} * {d}", str(d), "1"), "0")
    out = {"q": mk("SQ", "H", D), "k": mk("SK", hkv, D), "v": mk("SK", hkv, DV), "o": mk("SQ", "H", DV)}
    if c["layout"] == "kT":   # K stored (B, Hkv, D, SK)
        out["k"] = (["B", hkv, D, "SK"], (f"{hkv} * {D} * SK", f"{D} * SK", "1", "SK"), "0")
    return out


def aux_layouts(c: dict) -> dict:
    out = {}
    if c["bias"] == "full":
        out["bias"] = (["B", "H", "SQ", "SK"], ("H * SQ * SK", "SQ * SK", "SK", "1"))
    elif c["bias"] == "bcast":   # (1, 1, SQ, SK), e.g. a relative-position or ALiBi-like table
        out["bias"] = (["SQ", "SK"], ("0", "0", "SK", "1"))
    elif c["bias"] == "row":     # (B, 1, 1, SK): key padding as an additive bias
        out["bias"] = (["B", "SK"], ("SK", "0", "0", "1"))
    if c["mask"]:                # (B, 1, SQ, SK) bool
        out["mask"] = (["B", "SQ", "SK"], ("SQ * SK", "0", "SK", "1"))
    if c["lse"]:
        out["lse"] = (["B", "H", "SQ"], ("H * SQ", "SQ", "1"))
    return out


def make_spec(c: dict):
    from solforge.compiler.templates.attention import AttentionSpec, TensorLayout
    lay = layouts(c)
    t = {}
    for n in ("q", "k", "v", "o"):
        shape, st, off = lay[n]
        arg = "qkv" if c["layout"] == "packed" and n != "o" else n
        t[n] = TensorLayout(arg=arg, strides=tuple(st), dtype=c["dtype"], offset=off)
    aux = aux_layouts(c)
    extra = {}
    if "bias" in aux:
        extra["bias"] = TensorLayout(arg="bias", strides=aux["bias"][1], dtype=c["dtype"])
    if "mask" in aux:
        extra["mask"] = TensorLayout(arg="mask", strides=aux["mask"][1], dtype="bool")
        extra["mask_keep"] = c["mask"] == "keep"
    if "lse" in aux:
        extra["lse"] = TensorLayout(arg="lse", strides=aux["lse"][1], dtype="float32")
    return AttentionSpec(q=t["q"], k=t["k"], v=t["v"], o=t["o"], batch="B", heads="H", seq_q="SQ", seq_k="SK",
                         head_dim=c["D"], head_dim_v=c["DV"], group=c["G"], scale="scale",
                         causal=c["causal"] is not None,
                         causal_offset="SK - SQ" if c["causal"] == "br" else "0",
                         window=c["window"], softcap=c["softcap"], round_scores=c["round_scores"], **extra)


def prepare(stage_dir: Path) -> None:
    from solforge.candidate import Candidate
    from solforge.compile import compile_candidate, stage
    from solforge.compiler.templates.attention import default_params, generate
    stage_dir.mkdir(parents=True, exist_ok=True)
    done = []
    for raw in CASES:
        c = full_case(raw)
        try:
            spec = make_spec(c)
            params = c["params"] or default_params(spec, decode_like=c["regime"] == "decode")
            low = generate(spec, params)
            # workspace_zero 0: the split partials are written before they are read (run() fills the
            # workspace with NaN bytes to check that)
            cand = Candidate(problem=f"attn_check/{c['name']}", sources=low.sources, params=low.params,
                             launches=low.launches, workspace=low.scratch_bytes, workspace_zero="0")
            res = compile_candidate(cand, arch="sm_90a")
            if not res.ok:
                print(f"{c['name']}: compile {res.status.value}: {res.log[-800:]}")
                continue
            stage(cand, res, stage_dir / c["name"])
            done.append({**c, "params": params})
            print(f"{c['name']}: staged {params}")
        except Exception as e:  # noqa: BLE001 - one line per case, the run goes on
            print(f"{c['name']}: prepare failed: {type(e).__name__}: {e}")
    (stage_dir / "cases.json").write_text(json.dumps(done, indent=1))


# ────────────────────────────────────────────── run ──────────────────────────────────────────────
def sample_axes(c: dict, rng: random.Random) -> dict:
    hkv = rng.choice([1, 2, 3, 4])
    H = hkv * c["G"]
    B = rng.choice([1, 2, 3])
    if c["regime"] == "decode":
        SQ, SK = rng.choice([1, 1, 2, 4]), rng.randint(1, 4000)
    elif c["regime"] == "cross":
        SQ, SK = rng.randint(1, 600), rng.randint(1, 900)
    else:
        SQ = rng.randint(1, 700)
        SK = SQ
    if c["layout"] == "packed":
        SK = SQ
    return {"B": B, "H": H, "SQ": SQ, "SK": SK}


def _eval(expr, env):
    # the launcher's copy of axis_expr: solforge.problem's __init__ needs pydantic, the box may not have it
    from solforge.compile.launcher import _axis_expr
    return int(_axis_expr().evaluate(str(expr), env))


def build_inputs(c: dict, ax: dict, gen, device):
    import torch
    dt = getattr(torch, c["dtype"])
    lay, aux = layouts(c), aux_layouts(c)
    env = dict(ax)
    tensors, views = {}, {}

    def strided(base, st, off):
        return base.as_strided([ax["B"], ax["H"] if n in "qo" else ax["H"] // c["G"],
                                ax["SQ"] if n in "qo" else ax["SK"], c["D"] if n in "qk" else c["DV"]],
                               [_eval(s, env) for s in st], _eval(off, env))

    if c["layout"] == "packed":
        tensors["qkv"] = torch.randn([_eval(s, env) for s in lay["qkv"]], generator=gen, device=device).to(dt)
    for n in ("q", "k", "v", "o"):
        shape, st, off = lay[n]
        if shape is not None:
            mk = torch.randn if n != "o" else torch.empty
            if n == "o":
                tensors[n] = torch.full([_eval(s, env) for s in shape], float("nan"), device=device, dtype=dt)
            else:
                tensors[n] = mk([_eval(s, env) for s in shape], generator=gen, device=device).to(dt)
        views[n] = strided(tensors["qkv" if shape is None else n], st, off)
    if "bias" in aux:
        shape, st = aux["bias"]
        tensors["bias"] = torch.randn([_eval(s, env) for s in shape], generator=gen, device=device).to(dt)
        views["bias"] = tensors["bias"].as_strided([ax["B"], ax["H"], ax["SQ"], ax["SK"]], [_eval(s, env) for s in st])
    if "mask" in aux:
        shape, st = aux["mask"]
        tensors["mask"] = torch.rand([_eval(s, env) for s in shape], generator=gen, device=device) < 0.25
        views["mask"] = tensors["mask"].as_strided([ax["B"], ax["H"], ax["SQ"], ax["SK"]], [_eval(s, env) for s in st])
    if "lse" in aux:
        shape, st = aux["lse"]
        tensors["lse"] = torch.full([_eval(s, env) for s in shape], float("nan"), device=device)
        views["lse"] = tensors["lse"].as_strided([ax["B"], ax["H"], ax["SQ"]], [_eval(s, env) for s in st])
    return tensors, views


def reference(c: dict, ax: dict, views: dict, scale: float):
    """float64 math of the case (rounding to the dtype at the score ops when round_scores)."""
    import torch
    dt = getattr(torch, c["dtype"])
    G = c["G"]
    q = views["q"].double()
    k = views["k"].double().repeat_interleave(G, dim=1)
    v = views["v"].double().repeat_interleave(G, dim=1)
    s = q @ k.transpose(-1, -2)
    rnd = (lambda x: x.to(dt).double()) if c["round_scores"] else (lambda x: x)
    s = rnd(rnd(s) * scale)
    if c["softcap"]:
        cap = float(c["softcap"])
        s = rnd(rnd(torch.tanh(rnd(s / cap))) * cap)
    if "bias" in views:
        s = rnd(s + views["bias"].double())
    i = torch.arange(ax["SQ"], device=s.device)[:, None]
    j = torch.arange(ax["SK"], device=s.device)[None, :]
    off = ax["SK"] - ax["SQ"] if c["causal"] == "br" else 0
    keep = torch.ones(ax["SQ"], ax["SK"], dtype=torch.bool, device=s.device)
    if c["causal"]:
        keep &= j <= i + off
    if c["window"]:
        keep &= (i + off - j) < int(c["window"])
    s = s.masked_fill(~keep, float("-inf"))
    if "mask" in views:
        m = views["mask"]
        s = s.masked_fill(~m if c["mask"] == "keep" else m, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.softmax(s, dim=-1)   # NaN where a row is all -inf, as the kernel's EMPTY_NAN
    return p @ v, lse


def torch_times(c: dict, views: dict, scale: float, reps: int = 10):
    """ms per call of the explicit eager attention in the case's dtype, and of SDPA (None where the
    case has a softcap)."""
    import torch
    import torch.nn.functional as F
    G = c["G"]
    q, k, v = views["q"], views["k"], views["v"]
    bias = views.get("bias")
    mask = views.get("mask")

    def eager():
        kk, vv = k.repeat_interleave(G, dim=1), v.repeat_interleave(G, dim=1)
        s = torch.matmul(q, kk.transpose(-1, -2)) * scale
        if c["softcap"]:
            s = torch.tanh(s / float(c["softcap"])) * float(c["softcap"])
        if bias is not None:
            s = s + bias
        if mask is not None:
            s = s.masked_fill(~mask if c["mask"] == "keep" else mask, float("-inf"))
        if c["causal"]:
            sq, sk = s.shape[-2:]
            off = sk - sq if c["causal"] == "br" else 0
            s = s.masked_fill(torch.ones(sq, sk, dtype=torch.bool, device=s.device).triu(1 + off), float("-inf"))
        return torch.matmul(torch.softmax(s.float(), dim=-1).to(q.dtype), vv)

    def sdpa():
        kk, vv = k.repeat_interleave(G, dim=1), v.repeat_interleave(G, dim=1)
        am = None
        if bias is not None:
            am = bias
        if mask is not None:
            mm = mask if c["mask"] == "keep" else ~mask
            am = mm if am is None else am.masked_fill(~mm, float("-inf"))
        causal = c["causal"] == "tl" and am is None and not c["window"]
        if c["causal"] and not causal:
            return None
        return F.scaled_dot_product_attention(q, kk, vv, attn_mask=am, is_causal=causal, scale=scale)

    out = []
    for fn in (eager, sdpa):
        if fn is sdpa and c["softcap"]:
            out.append(None)
            continue
        try:
            if fn() is None:
                out.append(None)
                continue
            out.append(time_ms(fn, reps))
        except Exception:  # noqa: BLE001 - a torch path that cannot run this case has no time
            out.append(None)
    return out


def time_ms(fn, reps: int) -> float:
    import torch
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(3):
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / reps)
    return best


class _Emulated:
    """The launcher's load_stage/prepare/run/close over the CPU model (the `emulate` command)."""

    def __init__(self, c: dict):
        from solforge.compiler.templates.attention import generate
        self.low = generate(make_spec(c), c["params"])

    def prepare(self, tensors, axes, scalars, workspace=None):
        from solforge.compiler.templates.attention_emulate import emulate
        low = self.low

        class _Plan:
            def run(self):
                emulate(low, tensors, {**axes, **scalars})
        return _Plan()

    def close(self):
        pass


def run(stage_dir: Path, out: Path | None, shapes: int, seed: int, emulated: bool = False) -> int:
    import torch
    if emulated:   # CPU: the block-by-block model instead of the cubins, small shapes, no timing
        from solforge.compiler.templates.attention import default_params
        device = torch.device("cpu")
        cases = []
        for raw in CASES:
            c = full_case(raw)
            c["params"] = c["params"] or default_params(make_spec(c), decode_like=c["regime"] == "decode")
            cases.append(c)
        load_stage = lambda path: _Emulated(next(c for c in cases if c["name"] == path.name))  # noqa: E731
        global sample_axes, time_ms, torch_times
        full_sample = sample_axes
        sample_axes = lambda c, rng: {**(ax := full_sample(c, rng)), "SQ": min(ax["SQ"], 70),  # noqa: E731
                                      "SK": min(ax["SK"], 150) if c["layout"] != "packed" else min(ax["SQ"], 70)}
        time_ms = lambda fn, reps: 0.0  # noqa: E731
        torch_times = lambda *a: (None, None)  # noqa: E731
    else:
        from solforge.compile.launcher import load_stage
        device = torch.device("cuda")
        cases = json.loads((stage_dir / "cases.json").read_text())
    rng = random.Random(seed)
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    rows, bad = [], 0
    print(f"{torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu model'} torch {torch.__version__}, {len(cases)} cases x {shapes} shapes")
    hdr = f"{'case':34} {'B':>2} {'H':>3} {'SQ':>5} {'SK':>5}  {'max_err':>9} {'lse_err':>9}  ok   {'us':>8} {'eager':>8} {'sdpa':>8}"
    print(hdr)
    for c in cases:
        try:
            rt = load_stage(stage_dir / c["name"])
        except Exception as e:  # noqa: BLE001
            print(f"{c['name']}: load failed: {type(e).__name__}: {e}")
            bad += 1
            continue
        for _ in range(shapes):
            ax = sample_axes(c, rng)
            row = {"case": c["name"], **ax}
            try:
                tensors, views = build_inputs(c, ax, gen, device)
                scale = 1.0 / math.sqrt(c["D"]) * rng.choice([1.0, 2.0])
                ws = None
                if device.type == "cuda":   # NaN bytes: a partial read before it is written shows
                    cand = json.loads((stage_dir / c["name"] / "candidate.json").read_text())
                    nbytes = _eval(cand.get("workspace", "0"), {**ax, "scale": scale})
                    ws = torch.full((nbytes,), 255, dtype=torch.uint8, device=device) if nbytes else None
                plan = rt.prepare(tensors, ax, {"scale": scale}, workspace=ws)
                plan.run()
                if device.type == "cuda":
                    torch.cuda.synchronize()
                ref_o, ref_lse = reference(c, ax, views, scale)
                got = views["o"].double()
                atol, rtol = TOL[c["dtype"]]
                nan_same = bool(torch.equal(torch.isnan(got), torch.isnan(ref_o)))
                fin = ~torch.isnan(ref_o)
                err = (got - ref_o).abs()[fin]
                max_err = float(err.max()) if err.numel() else 0.0
                ok = nan_same and bool(((got - ref_o).abs() <= atol + rtol * ref_o.abs())[fin].all())
                lse_err = None
                if c["lse"]:
                    gl, rl = views["lse"].double(), ref_lse
                    same_inf = torch.equal(torch.isinf(gl), torch.isinf(rl))
                    f2 = torch.isfinite(rl)
                    lse_err = float((gl - rl).abs()[f2].max()) if f2.any() else 0.0
                    ok = ok and same_inf and lse_err <= 1e-3
                us = time_ms(plan.run, 20) * 1000
                eager, sdpa = torch_times(c, views, scale)
                row.update(max_err=max_err, lse_err=lse_err, ok=ok, nan_positions_match=nan_same, us=us,
                           eager_us=eager and eager * 1000, sdpa_us=sdpa and sdpa * 1000)
                bad += not ok
                f = lambda x: f"{x:8.1f}" if x is not None else f"{'-':>8}"
                print(f"{c['name']:34} {ax['B']:>2} {ax['H']:>3} {ax['SQ']:>5} {ax['SK']:>5}  {max_err:9.2e} "
                      f"{(lse_err if lse_err is not None else 0):9.2e}  {'yes' if ok else 'NO '}  {us:8.1f} "
                      f"{f(row['eager_us'])} {f(row['sdpa_us'])}", flush=True)
            except Exception as e:  # noqa: BLE001 - one line, the run goes on
                bad += 1
                row.update(error=f"{type(e).__name__}: {e}")
                print(f"{c['name']:34} {ax}: ERROR {type(e).__name__}: {str(e)[:300]}", flush=True)
                traceback.print_exc(limit=3)
                if device.type == "cuda":
                    torch.cuda.synchronize()
            rows.append(row)
        rt.close()
    print(f"{len(rows) - bad} of {len(rows)} shapes correct")
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["prepare", "run", "all", "emulate"])
    ap.add_argument("--dir", type=Path, default=REPO / ".carry" / "attn_check")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--shapes", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    t0 = time.time()
    if a.cmd in ("prepare", "all"):
        prepare(a.dir)
        print(f"prepare: {time.time() - t0:.0f} s")
    if a.cmd == "emulate":
        return run(a.dir, a.out, a.shapes, a.seed, emulated=True)
    if a.cmd in ("run", "all"):
        return run(a.dir, a.out, a.shapes, a.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
