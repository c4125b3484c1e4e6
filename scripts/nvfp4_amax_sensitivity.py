#!/usr/bin/env python3
"""How far one bf16 ulp on the largest |h| element moves Quant/032's output: the reference is
chaotic in amax|h| (h = silu(gate) * up, re-quantized to NVFP4 with a per-tensor global scale).

CPU only: the kernel's numpy emulation from tests/unit/test_kernels_nvfp4_moe.py (the codec part
of nvfp4_moe.cu built with g++), T=256, one seed. Prints the share of outputs within 032's tolerance
when the largest |h| is scaled by (1 + d) before quantization.

    .venv/bin/python scripts/nvfp4_amax_sensitivity.py > data/results/nvfp4_amax_sensitivity.txt
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> None:
    import numpy as np
    import torch

    import tests.unit.test_kernels_nvfp4_moe as T
    from solforge.problem.loader import load_problem_dir

    torch.set_num_threads(2)
    tmp = Path(tempfile.mkdtemp(prefix="nvfp4codec-"))
    m = re.search(r"// BEGIN_NVFP4_CODEC.*?\n(.*)// END_NVFP4_CODEC", T.SRC.read_text(), re.S)
    (tmp / "codec.cpp").write_text(T._HARNESS.replace("%CODEC%", m.group(1)))
    subprocess.run(["g++", "-O1", "-ffp-contract=off", "-std=c++17", "codec.cpp", "-o", "codec"], cwd=tmp,
                   check=True)
    codec = T.Codec(tmp / "codec", tmp)
    p = load_problem_dir(REPO.parent / "shared" / "sol_execbench" / "Quant" / "032_nvfp4_moe_expert_linear_with_gating")
    ns: dict = {}
    exec(compile(p.definition.reference, "reference032", "exec"), ns)
    torch.manual_seed(3)
    inp = ns["get_inputs"]({"num_tokens": 256, "hidden_size": 2048, "intermediate_size": 5120},
                           torch.device("cpu"))
    glob = {q: f"{q}_global_decode" for q in ("gate", "up", "down")}
    x = inp["hidden_states"].float().numpy()
    orig = T._quant_deq

    def run(d: float):
        def quant(codec_, h, perm):
            if d and h.shape[1] == 5120:   # h (not x): scale its largest |value| by (1 + d)
                h = h.copy()
                i = np.unravel_index(np.abs(h).argmax(), h.shape)
                h[i] *= np.float32(1 + d)
            return orig(codec_, h, perm)
        T._quant_deq = quant
        try:
            return T._emulate(codec, inp, x, glob, False)
        finally:
            T._quant_deq = orig

    base, tol = run(0.0), p.workloads[0].workload.tolerance
    print("032, T=256, seed 3: outputs within tolerance (atol 0.005, rtol 0.02; 0.99 required) when the "
          "largest |h| element changes by d before quantization")
    for d in (2.0 ** -8, -(2.0 ** -8), 2.0 ** -16, 2.0 ** -20):
        got = run(d)
        close = np.abs(got - base) <= tol.max_atol + tol.max_rtol * np.abs(base)
        print(f"  d = {d:+.3g}: matched {close.mean():.4f}, bit-equal {(got == base).mean():.4f}", flush=True)


if __name__ == "__main__":
    main()
