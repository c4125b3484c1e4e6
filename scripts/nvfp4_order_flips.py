#!/usr/bin/env python3
"""How often does a change of fp32 summation order flip Quant/032's verdict? (CPU, a model)

032's output hinges on amax|h| (scripts/nvfp4_amax_sensitivity.py: one bf16 ulp on the largest |h|
leaves ~47% of the outputs within tolerance), and h = silu(g) * u where g and u are bf16-rounded
fp32 GEMM sums. So a kernel passes an input set only if bf16(g) and bf16(u) at the argmax of |h|
round like the reference's cuBLAS GEMM. This script models the GEMM accumulation orders and counts
how often two of them round g or u differently:

  nat    the 16 products of each scale block summed exactly, then added to an fp32 accumulator, block
         after block (an mma k-step; cuBLAS's bf16 GEMM k-steps, and the kernel with KNAT=1)
  perm   the same with the kernel's K permutation (KNAT=0): k-step s of a 64-wide chunk holds
         elements 4s..4s+3 of each of the chunk's 4 blocks
  splitk two halves of K summed as `nat`, then added in fp32 (a split-K / stream-K GEMM)
  seq    one product at a time in fp32 (a scalar loop)
  split2bf16 / split3bf16   split-K with the partial sums rounded to bf16 before the fp32 reduction
         (what cuBLAS may do with torch's default allow_bf16_reduced_precision_reduction = True)
  hwnat / hwperm   a tensor-core-like k-step (Fasi et al. 2021's model of NVIDIA MMA units): the
         accumulator and the 16 exact products aligned to the largest of them, each truncated to
         ALIGN bits below its leading bit, summed exactly, the result truncated to fp32 -- in the
         natural and in the permuted grouping

The products are code x E4M3 scale squared: <= 12 significant bits on a coarse grid, so most fp32
sums are exact in any order, and so is a k-step whose 16 products share one pair of scales (the
natural order). A permuted k-step mixes 4 blocks with different scales: with alignment truncation,
bits of the small-scale products are lost there and the sum depends on the grouping. The GPU check
(scripts/nvfp4_diagnose.py) says what the H200 does; this is the model.

Reference inputs: 032's get_inputs on the CPU (T=256, seeds 0..N-1), activations quantized as on
CUDA (solforge.kernels.nvfp4_moe.reference_as_on_cuda). Per seed: the TOP largest-|h| elements and
RAND random elements.

    .venv/bin/python scripts/nvfp4_order_flips.py --tokens 2560 --seeds 6 --rand 2048 --top 32 > data/results/nvfp4_order_flips.txt
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

E2M1 = [0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=12)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--top", type=int, default=32)
    ap.add_argument("--rand", type=int, default=4096)
    ap.add_argument("--align", type=int, default=24, help="bits kept below the largest term's leading bit")
    a = ap.parse_args()

    import numpy as np
    import torch

    from solforge.kernels.nvfp4_moe import reference_as_on_cuda
    from solforge.problem.loader import load_problem_dir

    torch.set_num_threads(2)
    p = load_problem_dir(REPO.parent / "shared" / "sol_execbench" / "Quant" / "032_nvfp4_moe_expert_linear_with_gating")
    ns: dict = {}
    exec(compile(reference_as_on_cuda(p.definition.reference), "reference032", "exec"), ns)
    lut = torch.tensor(E2M1, dtype=torch.float32)

    def deq(codes, scales) -> np.ndarray:   # FP4 codes x E4M3 block scales, exact in fp32
        b = codes.view(torch.uint8)[0]
        v = torch.stack([lut[(b & 15).long()], lut[(b >> 4).long()]], -1).reshape(b.shape[0], -1)
        return (v * scales[0].float().repeat_interleave(16, 1)).numpy()

    k = 2048
    # perm: k-step s of chunk c takes elements 4s..4s+3 of each of the chunk's blocks q = 0..3
    perm = np.array([64 * c + 16 * q + 4 * s + j for c in range(k // 64) for s in range(4)
                     for q in range(4) for j in range(4)])
    f32 = np.float32

    def blocked(prod: np.ndarray) -> np.ndarray:   # (E, K) exact products -> fp32 sum of exact 16-sums
        g = prod.reshape(prod.shape[0], -1, 16).sum(-1)   # float64: exact (products have <= 14 bits)
        acc = np.zeros(prod.shape[0], f32)
        for i in range(g.shape[1]):
            acc = (acc.astype(np.float64) + g[:, i]).astype(f32)
        return acc

    def bf16(v: np.ndarray) -> np.ndarray:
        return torch.from_numpy(np.ascontiguousarray(v, f32)).to(torch.bfloat16).float().numpy()

    def trunc(v: np.ndarray, q: np.ndarray) -> np.ndarray:   # toward zero, to multiples of q
        return np.trunc(v / q) * q

    def to_f32_rz(v: np.ndarray) -> np.ndarray:
        e = np.floor(np.log2(np.where(v == 0, 1.0, np.abs(v))))
        return trunc(v, 2.0 ** (e - 23)).astype(f32)

    def hw(prod: np.ndarray) -> np.ndarray:
        acc = np.zeros(prod.shape[0], np.float64)
        for i in range(prod.shape[1] // 16):
            terms = np.concatenate([acc[:, None], prod[:, 16 * i:16 * i + 16]], 1)
            big = np.abs(terms).max(1, keepdims=True)
            q = 2.0 ** (np.floor(np.log2(np.where(big == 0, 1.0, big))) - (a.align - 1))
            acc = to_f32_rz(trunc(terms, q).sum(1)).astype(np.float64)
        return acc.astype(f32)

    def orders(prod: np.ndarray) -> dict:
        half = prod.shape[1] // 2
        seq = np.zeros(prod.shape[0], f32)
        for i in range(prod.shape[1]):
            seq = seq + prod[:, i].astype(f32)
        return {"exact": prod.sum(1), "nat": blocked(prod), "perm": blocked(prod[:, perm]),
                "splitk": (blocked(prod[:, :half]) + blocked(prod[:, half:])).astype(f32), "seq": seq,
                "hwnat": hw(prod), "hwperm": hw(prod[:, perm]),
                "split2bf16": sum(bf16(blocked(p)) for p in np.split(prod, 2, axis=1)).astype(f32),
                "split3bf16": sum(bf16(blocked(p)) for p in np.array_split(prod, [688, 1376], axis=1)).astype(f32)}


    pairs = [("exact", "nat"), ("nat", "perm"), ("nat", "splitk"), ("nat", "seq"), ("exact", "hwnat"),
             ("hwnat", "hwperm"), ("nat", "split2bf16"), ("nat", "split3bf16")]
    stats = {kind: {pr: [0, 0.0, 0] for pr in pairs} for kind in ("top", "rand", "argmax")}
    print(f"032 GEMM accumulation orders, T={a.tokens}, {a.seeds} seeds: share of g/u values whose bf16 "
          f"rounding differs between two orders (flips), and the expected share E[|diff| / bf16 ulp]")
    for seed in range(a.seeds):
        torch.manual_seed(seed)
        inp = ns["get_inputs"]({"num_tokens": a.tokens, "hidden_size": 2048, "intermediate_size": 5120},
                               torch.device("cpu"))
        q, s, gdx = ns["BlockWiseScalerNVFP4"]().quantize(inp["hidden_states"].float().unsqueeze(0))
        x = deq(q, s).astype(np.float64)
        w = {n: deq(inp[f"{n}_weight_fp4"], inp[f"{n}_scale"]).astype(np.float64) for n in ("gate", "up")}
        g = bf16((x @ w["gate"].T).astype(f32)) * (f32(gdx.item()) * f32(inp["gate_global_decode"]))
        u = bf16((x @ w["up"].T).astype(f32)) * (f32(gdx.item()) * f32(inp["up_global_decode"]))
        h = np.abs(g / (1 + np.exp(-g)) * u).ravel()
        rng = np.random.default_rng(seed)
        sel = {"argmax": np.argsort(h)[-1:], "top": np.argsort(h)[-a.top:],
               "rand": rng.choice(h.size, a.rand, replace=False)}
        for kind, idx in sel.items():
            t, n = np.divmod(idx, 5120)
            flip_any = np.zeros((len(pairs), idx.size), bool)
            for name in ("gate", "up"):
                sums = orders(x[t] * w[name][n])
                for pi, (o1, o2) in enumerate(pairs):
                    b1, b2 = bf16(sums[o1]), bf16(sums[o2])
                    ulp = np.spacing(np.abs(b1).astype(f32) + f32(1e-30)) * 2.0 ** 16   # bf16 ulp
                    flip_any[pi] |= b1 != b2
                    st = stats[kind][(o1, o2)]
                    st[1] += float((np.abs(sums[o1].astype(np.float64) - sums[o2]) / ulp).sum())
                    st[2] += idx.size
            for pi, pr in enumerate(pairs):
                stats[kind][pr][0] += int(flip_any[pi].sum())
        print(f"  seed {seed}: amax|h| {h.max():.4f}; argmax flips g or u so far (cumulative): " + ", ".join(
            f"{o1}/{o2} {int(stats['argmax'][(o1, o2)][0])}" for o1, o2 in pairs), flush=True)
    for kind, label in (("argmax", "the argmax of |h| (decides the verdict)"),
                        ("top", f"the top {a.top} |h| per seed"), ("rand", "random elements")):
        print(f"{label}:")
        for o1, o2 in pairs:
            flips, exp_sum, n_vals = stats[kind][(o1, o2)]
            n_elems = n_vals // 2
            print(f"  {o1:>6} vs {o2:<10}: g or u flipped at {flips} of {n_elems} elements "
                  f"({flips / n_elems:.2e}); expected per value {exp_sum / n_vals:.2e}")


if __name__ == "__main__":
    main()
