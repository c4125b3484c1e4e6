#!/usr/bin/env python3
"""GPU check of the compiler's GEMM and convolution templates against torch, one line per case.

Cases are random but seeded: fp16/bf16/fp32 GEMMs with transposed operands (folded into indexing),
batches (also permuted batch layouts), M/N/K tails, alpha, bias, activation epilogues, split-K,
misaligned strides (the cp.async path's run-time fallback), FP8 with per-tensor and blockwise scales
(prologue dequant), and conv1d/2d/3d with stride, padding (causal too), dilation, groups and
depthwise. Each case: max abs error against torch, pass/fail by |out - ref| <= atol + rtol |ref|,
and the time of our launches against torch's op (CUDA events, median of repeats).

  prepare (CPU, NVRTC):  python benchmarks/gemm_template_check.py prepare --dir .carry/gemmt
  run (GPU):             python benchmarks/gemm_template_check.py run --dir .carry/gemmt
  both on one machine:   python benchmarks/gemm_template_check.py all --dir /tmp/gemmt
  large-GEMM speed only: ... prepare --dir .carry/gemms --only speed   (also part of --only gemm)

Speed cases (large 16-bit GEMMs, NN / NT / TN, bf16 and fp16): each shape twice, at the previous
default's point ("old": mma.sync, or the one-warpgroup-loop "wgmma" tier for NT) and at today's
default ("new"); a table after the run puts them side by side.

A failing case (compile, launch, wrong values) prints one line and the run goes on.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TOL = {"float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2), "bfloat16": (2e-2, 2e-2)}
TOL_TF32 = (5e-2, 1e-2)


# ---------------------------------------------------------------------------------------------------
# cases (plain data: the GPU side rebuilds tensors and references from them)
# ---------------------------------------------------------------------------------------------------
SPEED_SHAPES = ((4096, 4096, 4096), (2048, 2048, 2048), (8192, 2048, 1024), (1024, 1024, 1024))
SPEED_LAYOUTS = {"NN": (False, True), "NT": (False, False), "TN": (True, True)}   # describe()'s names


def old_default(ta: bool, tb: bool, m: int, n: int, k: int) -> dict:
    """The 16-bit default before the warp-specialized tier (gemm.py at 0fe6e8a): the one-loop
    "wgmma" tier for K-major operands (NT), mma.sync 128 x 128 otherwise; split-K by _split_for."""
    from solforge.compiler.templates import gemm as G

    if not ta and not tb:
        p = dict(tier="wgmma", BM=128, BN=256, ST=4) if n >= 256 else dict(tier="wgmma", BM=128, BN=128, ST=5)
    else:
        p = dict(tier="mma", BM=128, BN=128, BK=32, WM=2, WN=4, ST=4)
    p["SPLIT"] = G._split_for(-(-m // p["BM"]) * -(-n // p["BN"]), k, p.get("BK", 64))
    return p


def speed_cases() -> list[dict]:
    out = []
    for (m, n, k) in SPEED_SHAPES:
        for dt in ("bfloat16", "float16"):
            for lay, (ta, tb) in SPEED_LAYOUTS.items():
                base = dict(kind="gemm", dtype=dt, M=m, N=n, K=k, batch=1, ta=ta, tb=tb, bias=False, epi="",
                            alpha=None)
                out.append(dict(base, speed="old", params=old_default(ta, tb, m, n, k)))
                out.append(dict(base, speed="new"))
    # a few other points of the new tier at 4096^3 (tile, stages, persistence)
    for lay in ("NN", "NT"):
        ta, tb = SPEED_LAYOUTS[lay]
        for p in (dict(BM=128, BN=256, ST=4, CTAS=0), dict(BM=128, BN=256, ST=3, CTAS=132),
                  dict(BM=128, BN=128, ST=6, CTAS=132)):
            out.append(dict(kind="gemm", dtype="bfloat16", M=4096, N=4096, K=4096, batch=1, ta=ta, tb=tb,
                            bias=False, epi="", alpha=None, speed="alt", params=dict(tier="wgws", SPLIT=1, **p)))
    return out


def gemm_cases(rng: random.Random) -> list[dict]:
    cases = []
    shapes = [(1, 4096, 4096), (7, 1000, 2048), (16, 2048, 4096), (33, 300, 1024), (100, 257, 520),
              (128, 128, 128), (257, 1000, 96), (1024, 1024, 1024), (2048, 4096, 4096), (4096, 4096, 4096),
              (4096, 128, 4096), (8192, 2048, 1024), (5, 17, 40), (1, 1, 16), (300, 64, 4096)]
    for dt in ("bfloat16", "float16", "float32"):
        for (m, n, k) in shapes:
            if dt == "float32" and m * n * k > 2048 ** 3:
                continue
            ta, tb = rng.random() < 0.3, rng.random() < 0.5
            cases.append(dict(kind="gemm", dtype=dt, M=m, N=n, K=k, batch=1, ta=ta, tb=tb,
                              bias=rng.random() < 0.4, epi=rng.choice(["", "", "relu", "gelu"]),
                              alpha=rng.choice([None, None, 0.5])))
    # batched, permuted batch layouts ([B, H] with A stored [B, M, H, K]: attention-like)
    for dt in ("bfloat16", "float16", "float32"):
        for (b, h, m, n, k) in ((2, 8, 128, 128, 64), (4, 16, 77, 64, 64), (1, 32, 1, 256, 128), (3, 5, 33, 65, 47)):
            cases.append(dict(kind="gemm", dtype=dt, M=m, N=n, K=k, batch=b, heads=h, perm=True,
                              ta=False, tb=rng.random() < 0.5, bias=False, epi="", alpha=None))
    # explicit tunables: split-K, small tiles, big tiles, stages
    for p in ({"tier": "mma", "BM": 16, "BN": 64, "BK": 64, "WM": 1, "WN": 4, "ST": 4, "SPLIT": 8},
              {"tier": "mma", "BM": 64, "BN": 64, "BK": 32, "WM": 2, "WN": 2, "ST": 3, "SPLIT": 4},
              {"tier": "mma", "BM": 128, "BN": 256, "BK": 32, "WM": 2, "WN": 4, "ST": 3, "SPLIT": 1},
              {"tier": "mma", "BM": 128, "BN": 128, "BK": 64, "WM": 2, "WN": 4, "ST": 3, "SPLIT": 1},
              {"tier": "mma", "BM": 64, "BN": 128, "BK": 64, "WM": 2, "WN": 2, "ST": 2, "SPLIT": 2}):
        for (m, n, k) in ((8, 4096, 4096), (200, 1000, 1000), (2048, 2048, 2048)):
            cases.append(dict(kind="gemm", dtype="bfloat16", M=m, N=n, K=k, batch=1, ta=rng.random() < 0.3,
                              tb=rng.random() < 0.5, bias=True, epi="", alpha=None, params=p))
    for p in ({"tier": "wgmma", "BM": 128, "BN": 256, "ST": 4, "SPLIT": 1},
              {"tier": "wgmma", "BM": 128, "BN": 128, "ST": 5, "SPLIT": 1},
              {"tier": "wgmma", "BM": 64, "BN": 128, "ST": 4, "SPLIT": 4},
              {"tier": "wgmma", "BM": 64, "BN": 256, "ST": 3, "SPLIT": 2}):
        for (m, n, k) in ((64, 4096, 4096), (1000, 1000, 1000), (4096, 4096, 4096)):
            cases.append(dict(kind="gemm", dtype=rng.choice(["bfloat16", "float16"]), M=m, N=n, K=k, batch=1,
                              ta=False, tb=False, bias=rng.random() < 0.5, epi="", alpha=None, params=p))
    # one kernel with M tiers picked at run time (what the compiler emits when M is a var axis)
    for m in (1, 16, 50, 200, 3000):
        cases.append(dict(kind="gemm", dtype="bfloat16", M=m, N=4096, K=4096, batch=1, ta=False, tb=False,
                          bias=True, epi="", alpha=None, tiers=True))
    for p in ({"tier": "simt", "BM": 32, "BN": 64, "BK": 16, "TM": 4, "TN": 4, "SPLIT": 4},
              {"tier": "simt", "BM": 128, "BN": 128, "BK": 8, "TM": 8, "TN": 8, "SPLIT": 1}):
        cases.append(dict(kind="gemm", dtype="float32", M=64, N=1000, K=3000, batch=1, ta=True, tb=False,
                          bias=True, epi="", alpha=None, params=p))
    # fp32 on tensor cores: 3xTF32 (checked at the fp32 tolerance) and TF32 (looser, see TOL_TF32)
    for passes in (3, 1):
        for (m, n, k) in ((512, 1024, 1024), (4096, 4096, 4096), (33, 2000, 3000)):
            cases.append(dict(kind="gemm", dtype="float32", M=m, N=n, K=k, batch=1, ta=rng.random() < 0.5,
                              tb=rng.random() < 0.5, bias=False, epi="", alpha=None,
                              params={"tier": "tf32", "BM": 128, "BN": 128, "BK": 32, "WM": 4, "WN": 2, "ST": 2,
                                      "PASSES": passes, "SPLIT": 1}))
    # misaligned rows (K odd): the 16-byte path's run-time check falls back to element loads
    for dt in ("bfloat16", "float16"):
        cases.append(dict(kind="gemm", dtype=dt, M=300, N=200, K=129, batch=1, ta=False, tb=False,
                          bias=False, epi="", alpha=None))
        cases.append(dict(kind="gemm", dtype=dt, M=301, N=199, K=130, batch=1, ta=True, tb=True,
                          bias=True, epi="relu", alpha=None))
    # M a count read on the device (an MoE expert's gathered rows): launched for M's upper bound, the
    # kernel clamps M to the count at entry; rows past it must stay untouched, blocks past it return
    for dt, p in (("bfloat16", None), ("bfloat16", {"tier": "mma", "BM": 64, "BN": 64, "BK": 32, "WM": 2,
                                                        "WN": 2, "ST": 4, "SPLIT": 1}),
                  ("bfloat16", {"tier": "wgmma", "BM": 128, "BN": 128, "ST": 4, "SPLIT": 1}),
                  ("float16", {"tier": "wgws", "BM": 128, "BN": 256, "ST": 3, "CTAS": 132, "SPLIT": 1}),
                  ("float32", None),
                  ("float32", {"tier": "tf32", "BM": 128, "BN": 128, "BK": 32, "WM": 4, "WN": 2, "ST": 2,
                               "PASSES": 3, "SPLIT": 1})):
        for (m, rows, n, k) in ((2048, 0, 1024, 512), (2048, 1, 1024, 512), (2048, 300, 2048, 1024),
                                (2048, 2048, 1024, 512)):
            cases.append(dict(kind="gemm", dtype=dt, M=m, rows=rows, N=n, K=k, batch=1, ta=False, tb=False,
                              bias=True, epi="", alpha=None, **({"params": p} if p else {})))
    # FP8 e4m3: per-tensor scales (alpha) and 1x128 / 128x128 block scales (prologue)
    for (m, n, k) in ((16, 2048, 2048), (512, 1024, 4096), (2000, 4096, 1024)):
        cases.append(dict(kind="fp8", scales="tensor", M=m, N=n, K=k))
        cases.append(dict(kind="fp8", scales="block", M=m, N=n, K=k))
    return cases


def conv_cases(rng: random.Random) -> list[dict]:
    cs = []
    for dt in ("float32", "bfloat16", "float16"):
        cs += [
            dict(kind="conv", dtype=dt, nb=2, cin=64, cout=128, size=[56, 56], k=[3, 3], stride=[1, 1],
                 pad=[[1, 1], [1, 1]], dil=[1, 1], groups=1, bias=True),
            dict(kind="conv", dtype=dt, nb=4, cin=32, cout=64, size=[65, 47], k=[3, 3], stride=[2, 2],
                 pad=[[1, 1], [1, 1]], dil=[1, 1], groups=1, bias=False),
            dict(kind="conv", dtype=dt, nb=1, cin=3, cout=96, size=[224, 224], k=[16, 16], stride=[16, 16],
                 pad=[[0, 0], [0, 0]], dil=[1, 1], groups=1, bias=True),
            dict(kind="conv", dtype=dt, nb=2, cin=256, cout=256, size=[1000], k=[4], stride=[1],
                 pad=[[3, 0]], dil=[1], groups=256, bias=True),                           # causal depthwise
            dict(kind="conv", dtype=dt, nb=2, cin=64, cout=64, size=[28, 28], k=[3, 3], stride=[1, 1],
                 pad=[[2, 2], [2, 2]], dil=[2, 2], groups=4, bias=True),                   # grouped, dilated
            dict(kind="conv", dtype=dt, nb=1, cin=16, cout=32, size=[8, 16, 16], k=[3, 3, 3], stride=[1, 2, 2],
                 pad=[[1, 1], [1, 1], [1, 1]], dil=[1, 1, 1], groups=1, bias=True),        # 3-D
            dict(kind="conv", dtype=dt, nb=8, cin=128, cout=256, size=[512], k=[1], stride=[1],
                 pad=[[0, 0]], dil=[1], groups=1, bias=False),                             # 1x1 conv1d
            dict(kind="conv", dtype=dt, nb=2, cin=96, cout=96, size=[40, 40], k=[7, 7], stride=[1, 1],
                 pad=[[3, 3], [3, 3]], dil=[1, 1], groups=96, bias=True),                  # depthwise 2-D
        ]
    return cs


# ---------------------------------------------------------------------------------------------------
# specs (CPU side)
# ---------------------------------------------------------------------------------------------------
def _epi_code(epi: str) -> str:
    return {"": "", "relu": "v = v > 0.f ? v : 0.f;",
            "gelu": "v = 0.5f * v * (1.f + erff(v * 0.70710678118654752f));"}[epi]


def build(case: dict, name: str):
    """(Candidate dict, params used)."""
    from solforge.compiler.templates import conv as C
    from solforge.compiler.templates import gemm as G

    if case["kind"] == "gemm":
        dt = case["dtype"]
        if case.get("perm"):
            # A stored [Bt, M, H, K] (b = bt*H + h), B stored [Bt, H, N, K] or [Bt, H, K, N]; out [Bt, H, M, N]
            a = G.Operand("A", dt, k_stride="1", r_stride="H * K", b_offset="(b / H) * M * H * K + (b % H) * K")
            b = (G.Operand.r_major("B", dt, "N", b_offset="b * K * N") if case["tb"]
                 else G.Operand.k_major("B", dt, "K", b_offset="b * N * K"))
            spec = G.GemmSpec(name=name, a=a, b=b, m="M", n="N", k="K", batch="Bt * H",
                              out=G.Output("C", dt, b_offset="b * M * N"), args=(G.KArg("int", "H", "int32:H"),))
        else:
            a = G.Operand.r_major("A", dt, "M") if case["ta"] else G.Operand.k_major("A", dt, "K")
            b = G.Operand.r_major("B", dt, "N") if case["tb"] else G.Operand.k_major("B", dt, "K")
            from solforge.compiler.templates.gemm_adapter import device_m_init

            counted = case.get("rows") is not None   # the compiler's own entry lines for a counted M
            spec = G.GemmSpec(name=name, a=a, b=b, m="M", n="N", k="K", out=G.Output("C", dt),
                              bias=G.Bias("bias", dt) if case["bias"] else None,
                              alpha=(f"{case['alpha']}f" if case["alpha"] is not None else None),
                              epilogue=_epi_code(case["epi"]) or None,
                              args=(G.KArg("const long long*", "cnt", "cnt"),) if counted else (),
                              init=tuple(device_m_init("p.cnt[0]")) if counted else ())
        if case.get("tiers"):   # M unknown when generated: tiers by M
            params = G.default_params(spec, None, case["N"], case["K"])
        else:
            params = case.get("params") or G.default_params(spec, case["M"], case["N"], case["K"],
                                                             case["batch"] * case.get("heads", 1))
        gen = G.generate(spec, params)
    elif case["kind"] == "fp8":
        if case["scales"] == "tensor":
            a = G.Operand.k_major("A", "float8_e4m3fn", "K")
            b = G.Operand.k_major("B", "float8_e4m3fn", "K")
            spec = G.GemmSpec(name=name, a=a, b=b, m="M", n="N", k="K", out=G.Output("C", "bfloat16"),
                              alpha="sa[0] * sb[0]",
                              args=(G.KArg("const float*", "sa", "sa"), G.KArg("const float*", "sb", "sb")))
        else:
            a = G.Operand.k_major("A", "float8_e4m3fn", "K", prologue="v * sa[(i64)r * (K / 128) + k / 128]")
            b = G.Operand.k_major("B", "float8_e4m3fn", "K",
                                  prologue="v * sb[(i64)(r / 128) * (K / 128) + k / 128]")
            spec = G.GemmSpec(name=name, a=a, b=b, m="M", n="N", k="K", out=G.Output("C", "bfloat16"),
                              args=(G.KArg("const float*", "sa", "sa"), G.KArg("const float*", "sb", "sb")))
        params = case.get("params") or G.default_params(spec, case["M"], case["N"], case["K"])
        gen = G.generate(spec, params)
    else:
        nd = len(case["k"])
        ins = ("D", "H", "W")[3 - nd:]
        spec = C.ConvSpec(name=name, x="x", w="w", out="y", dtype=case["dtype"], batch="NB", c_in=case["cin"],
                          c_out=case["cout"], in_size=ins, kernel=tuple(case["k"]), stride=tuple(case["stride"]),
                          padding=tuple(tuple(p) for p in case["pad"]), dilation=tuple(case["dil"]),
                          groups=case["groups"], bias="bias" if case["bias"] else None)
        params = case.get("params") or C.default_params(spec, case["nb"], tuple(case["size"]))
        gen = C.generate(spec, params)
    cand = dict(problem=f"gemm_template_check/{name}", language="cuda", sources=gen.sources,
                launches=gen.launches, workspace=workspace_expr(gen), workspace_zero="0")
    return cand, params


def workspace_expr(gen) -> str:
    """The candidate's workspace bytes: the template's, but never 0 where a launch passes it.

    A kernel with M tiers takes the workspace pointer when any of its tiers splits K, while the
    template's workspace expression is 0 bytes at an M whose tier does not split (e.g. the last,
    unbounded tier: every M above the largest max_m). The launcher refuses to pass a 0-byte
    workspace, so such a candidate asks for a few bytes it never touches (as the CPU emulator of
    tests/compiler/test_gemm_template.py does)."""
    if any(a.strip() == "workspace" for la in gen.launches for a in la.get("args", [])):
        return f"max(16, {gen.workspace})"
    return gen.workspace


def prepare(out: Path, cases: list[dict], limit: float) -> None:
    from solforge.compile.api import compile_candidate, stage

    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    index = []
    for i, case in enumerate(cases):
        name = f"case{i:03d}"
        if time.time() - t0 > limit:
            print(f"{name}: not prepared (time limit)", flush=True)
            continue
        try:
            cand, params = build(case, name)
            res = compile_candidate(cand, arch="sm_90a")
            if not res.ok:
                print(f"{name}: COMPILE FAIL {res.log.strip().splitlines()[:3]}", flush=True)
                continue
            stage(cand, res, out / name)
            index.append(dict(name=name, case=case, params=params))
            print(f"{name}: staged {describe(case)} params={params}", flush=True)
        except Exception as e:  # one line per case, the run goes on
            print(f"{name}: PREPARE ERROR {type(e).__name__}: {str(e)[:200]}", flush=True)
    (out / "cases.json").write_text(json.dumps(index, indent=1))
    print(f"prepared {len(index)}/{len(cases)} cases in {time.time() - t0:.0f}s -> {out}")


def describe(c: dict) -> str:
    if c["kind"] == "gemm":
        lay = ("T" if c.get("ta") else "N") + ("N" if c.get("tb") else "T")   # torch's A @ B.T is "NT"
        bt = f" batch={c['batch']}x{c['heads']}(perm)" if c.get("perm") else ""
        ex = "".join([" +bias" if c.get("bias") else "", f" {c['epi']}" if c.get("epi") else "",
                      f" alpha={c['alpha']}" if c.get("alpha") is not None else ""])
        tiers = " (M-tiered kernel)" if c.get("tiers") else ""
        if c.get("rows") is not None:
            tiers += f" (M counted on the device: {c['rows']} rows)"
        sp = f" [speed:{c['speed']}]" if c.get("speed") else ""
        return f"gemm {c['dtype']} {lay} M={c['M']} N={c['N']} K={c['K']}{bt}{ex}{tiers}{sp}"
    if c["kind"] == "fp8":
        return f"fp8 e4m3 {c['scales']}-scaled M={c['M']} N={c['N']} K={c['K']}"
    return (f"conv{len(c['k'])}d {c['dtype']} N={c['nb']} C={c['cin']}->{c['cout']} in={c['size']} k={c['k']} "
            f"s={c['stride']} p={c['pad']} d={c['dil']} g={c['groups']}{' +bias' if c['bias'] else ''}")


# ---------------------------------------------------------------------------------------------------
# GPU side
# ---------------------------------------------------------------------------------------------------
def tensors_for(c: dict, gen):
    """(tensors for the launcher, axes, reference output, torch closure to time)."""
    import torch
    import torch.nn.functional as F

    dev = "cuda"

    def rnd(*shape, dtype):
        return (torch.randn(*shape, generator=gen, device=dev, dtype=torch.float32) * 0.5).to(dtype)

    if c["kind"] == "gemm":
        dt = getattr(torch, c["dtype"])
        M, N, K = c["M"], c["N"], c["K"]
        if c.get("perm"):
            Bt, H = c["batch"], c["heads"]
            A = rnd(Bt, M, H, K, dtype=dt)
            B = rnd(Bt, H, K, N, dtype=dt) if c["tb"] else rnd(Bt, H, N, K, dtype=dt)
            Bl = B if c["tb"] else B.transpose(-1, -2)

            def ref():
                return torch.matmul(A.permute(0, 2, 1, 3), Bl)
            return dict(A=A, B=B, C=torch.empty(Bt, H, M, N, device=dev, dtype=dt)), \
                dict(M=M, N=N, K=K, Bt=Bt, H=H), ref
        A = rnd(K, M, dtype=dt) if c["ta"] else rnd(M, K, dtype=dt)
        B = rnd(K, N, dtype=dt) if c["tb"] else rnd(N, K, dtype=dt)
        bias = rnd(N, dtype=dt) if c["bias"] else None
        Al = A.t() if c["ta"] else A
        Bl = B if c["tb"] else B.t()

        def ref():
            if bias is not None and c["alpha"] is None:
                y = torch.addmm(bias, Al, Bl)
            else:
                y = torch.mm(Al, Bl)
                if c["alpha"] is not None:
                    y = y * c["alpha"]
                if bias is not None:
                    y = y + bias
            if c["epi"] == "relu":
                y = torch.relu(y)
            elif c["epi"] == "gelu":
                y = F.gelu(y)
            return y
        t = dict(A=A, B=B, C=torch.empty(M, N, device=dev, dtype=dt))
        if bias is not None:
            t["bias"] = bias
        if c.get("rows") is not None:
            t["cnt"] = torch.tensor([c["rows"]], device=dev, dtype=torch.int64)
            full = ref

            def ref():   # the run fills C with NaN first: rows past the count must keep it
                y = full().clone()
                y[c["rows"]:] = float("nan")
                return y
        return t, dict(M=M, N=N, K=K), ref
    if c["kind"] == "fp8":
        M, N, K = c["M"], c["N"], c["K"]
        A = rnd(M, K, dtype=torch.float32).to(torch.float8_e4m3fn)
        B = rnd(N, K, dtype=torch.float32).to(torch.float8_e4m3fn)
        if c["scales"] == "tensor":
            sa = torch.rand(1, device=dev) + 0.5
            sb = torch.rand(1, device=dev) + 0.5

            def ref():
                return ((A.float() @ B.float().t()) * (sa * sb)).to(torch.bfloat16)
        else:
            sa = torch.rand(M, K // 128, device=dev) + 0.5
            sb = torch.rand(N // 128, K // 128, device=dev) + 0.5

            def ref():
                a = A.float() * sa.repeat_interleave(128, 1)
                b = B.float() * sb.repeat_interleave(128, 0).repeat_interleave(128, 1)
                return (a @ b.t()).to(torch.bfloat16)
        return dict(A=A, B=B, sa=sa, sb=sb, C=torch.empty(M, N, device=dev, dtype=torch.bfloat16)), \
            dict(M=M, N=N, K=K), ref
    dt = getattr(torch, c["dtype"])
    nd = len(c["k"])
    x = rnd(c["nb"], c["cin"], *c["size"], dtype=dt)
    w = rnd(c["cout"], c["cin"] // c["groups"], *c["k"], dtype=dt) * 0.2
    w = w.to(dt)
    b = rnd(c["cout"], dtype=dt) if c["bias"] else None
    pads = []
    for lo, hi in reversed(c["pad"]):
        pads += [lo, hi]
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[nd]

    def ref():
        xp = F.pad(x, pads) if any(pads) else x
        return conv(xp, w, b, stride=c["stride"], dilation=c["dil"], groups=c["groups"])
    y = ref()
    axes = dict(NB=c["nb"], **dict(zip(("D", "H", "W")[3 - nd:], c["size"])))
    t = dict(x=x, w=w, y=torch.empty_like(y))
    if b is not None:
        t["bias"] = b
    return t, axes, ref


def _time(fn, reps: int = 20) -> float:
    import torch

    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(3):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(reps):
            fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1000.0 / reps)
    return sorted(times)[1]


def run(folder: Path, limit: float) -> None:
    import torch

    from solforge.compile.launcher import load_stage

    torch.backends.cuda.matmul.allow_tf32 = False   # PyTorch's default for fp32 matmul
    index = json.loads((folder / "cases.json").read_text())
    print(f"GPU: {torch.cuda.get_device_name()}  cases: {len(index)}", flush=True)
    t0 = time.time()
    n_ok = n_fail = 0
    ratios = []
    speed = {}   # (dtype, layout, M, N, K) -> {"old"/"new"/"alt:..": (us, ok), "torch": us}
    for ent in index:
        name, c = ent["name"], ent["case"]
        if time.time() - t0 > limit:
            print(f"{name}: skipped (time limit)", flush=True)
            continue
        rt = None
        try:
            gen = torch.Generator(device="cuda")
            gen.manual_seed(1234)
            tensors, axes, ref = tensors_for(c, gen)
            rt = load_stage(folder / name)
            out_name = "y" if c["kind"] == "conv" else "C"
            tensors[out_name].fill_(float("nan"))
            plan = rt.prepare(tensors, axes, {})
            plan.run()
            torch.cuda.synchronize()
            expect = ref().float()
            got = tensors[out_name].float()
            dt = c.get("dtype", "bfloat16")
            atol, rtol = TOL.get(dt, (2e-2, 2e-2))
            if c["kind"] == "conv" and dt == "float32":
                atol, rtol = 2e-3, 2e-3   # torch's cuDNN convolution may use TF32
            if (ent["params"] or {}).get("PASSES") == 1:
                atol, rtol = TOL_TF32     # plain TF32: 10-bit operand mantissas
            err = (got - expect).abs()
            untouched = torch.isnan(expect)   # rows a device-counted M leaves alone
            bad = ~((err <= atol + rtol * expect.abs()) | (untouched & torch.isnan(got)))
            ok = not bool(bad.any()) and bool(torch.isfinite(got[~untouched]).all())
            err = err.nan_to_num(0.0) if bool(untouched.any()) else err
            t_ours = _time(plan.run)
            t_torch = _time(ref)
            ratios.append(t_torch / t_ours)
            if c.get("speed"):
                key = (c["dtype"], describe(c).split()[2], c["M"], c["N"], c["K"])
                lab = c["speed"] if c["speed"] != "alt" else "alt " + ",".join(
                    f"{x}{ent['params'][x]}" for x in ("BM", "BN", "ST", "CTAS"))
                speed.setdefault(key, {})[lab] = (t_ours, ok, ent["params"])
                speed[key]["torch"] = t_torch
            n_ok += ok
            n_fail += not ok
            print(f"{name}: {'ok  ' if ok else 'FAIL'} max_abs_err={float(err.max()):.3e} "
                  f"bad={int(bad.sum())}/{bad.numel()} ours={t_ours:.1f}us torch={t_torch:.1f}us "
                  f"x{t_torch / t_ours:.2f}  {describe(c)} {ent['params']}", flush=True)
        except Exception as e:  # one line per case, the run goes on
            n_fail += 1
            print(f"{name}: ERROR {type(e).__name__}: {str(e)[:240]}  {describe(c)}", flush=True)
            if any(w in str(e).lower() for w in ("illegal", "misaligned", "launch failure", "launch_failed")):
                print("sticky CUDA error: the context is unusable, stopping", flush=True)
                break
        finally:
            if rt is not None:
                try:
                    rt.close()
                except Exception:
                    pass
    import math
    if speed:
        print("\nlarge-GEMM speed, old default vs new default (us; x = torch time / ours; TFLOP/s of ours)")
        gains = []
        for key, v in speed.items():
            dt, lay, m, n, k = key
            fl = 2.0 * m * n * k
            row = [f"{dt:8s} {lay} {m}x{n}x{k}", f"torch {v['torch']:7.1f}"]
            for lab in ("old", "new"):
                if lab in v:
                    t, ok, _ = v[lab]
                    row.append(f"{lab} {t:7.1f}{'' if ok else ' FAIL'} x{v['torch'] / t:.2f} "
                               f"{fl / t / 1e6:5.0f}TF")
            if "old" in v and "new" in v:
                gains.append(v["old"][0] / v["new"][0])
                row.append(f"new/old speedup {v['old'][0] / v['new'][0]:.2f}")
            for lab in sorted(x for x in v if x.startswith("alt")):
                t, ok, _ = v[lab]
                row.append(f"[{lab[4:]}] {t:.1f}{'' if ok else ' FAIL'}")
            print("  ".join(row))
            if "new" in v:
                print(f"    new params {v['new'][2]}")
        if gains:
            print(f"geomean new/old speedup {math.exp(sum(map(math.log, gains)) / len(gains)):.3f} "
                  f"over {len(gains)} shapes")
    geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else float("nan")
    print(f"done: {n_ok} ok, {n_fail} failed, geomean torch/ours {geo:.3f} over {len(ratios)} timed, "
          f"{time.time() - t0:.0f}s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["prepare", "run", "all"])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default="", help="comma list of kinds: gemm,fp8,conv; speed: only the "
                    "large-GEMM old-vs-new cases (gemm includes them); devm: only the device-counted M")
    ap.add_argument("--time-limit", type=float, default=500.0)
    a = ap.parse_args()
    folder = Path(a.dir)
    if a.mode in ("prepare", "all"):
        rng = random.Random(a.seed)
        cases = speed_cases() + gemm_cases(rng) + conv_cases(rng)   # speed first: a time limit cuts the rest
        if a.only:
            kinds = set(a.only.split(","))
            cases = [c for c in cases if c["kind"] in kinds or ("speed" in kinds and c.get("speed"))
                     or ("devm" in kinds and c.get("rows") is not None)]
        prepare(folder, cases, a.time_limit)
    if a.mode in ("run", "all"):
        run(folder, a.time_limit)


if __name__ == "__main__":
    try:
        main()
    except Exception:
        traceback.print_exc()
        sys.exit(1)
