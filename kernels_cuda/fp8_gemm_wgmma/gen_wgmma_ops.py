#!/usr/bin/env python3
"""Regenerate the e4m3 wgmma wrappers between the GENERATED markers of fp8_gemm_wgmma.cu.

wgmma.mma_async m64nNk32 .e4m3.e4m3 names all N/2 fp32 accumulators of a thread as separate asm
operands; this writes one wrapper per N the family uses. FP8 wgmma takes no transpose immediates
(both operands K-major): `d, a-desc, b-desc, scale-d, imm-scale-a, imm-scale-b`.
Run: python kernels_cuda/fp8_gemm_wgmma/gen_wgmma_ops.py
"""

from pathlib import Path

NS = (64, 128)
BEGIN, END = "// BEGIN GENERATED wgmma wrappers", "// END GENERATED wgmma wrappers"


def wrapper(n: int) -> str:
    r = n // 2  # accumulator registers per thread
    regs = ", ".join(f"%{i}" for i in range(r))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(r))
    return (
        f"template <> __device__ __forceinline__ void wgmma_e4m3<{n}>(float (&d)[{n // 2}], "
        f"unsigned long long da, unsigned long long db, int scale_d) {{\n"
        f"    asm volatile(\n"
        f'        "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{r + 2}, 0;\\n"\n'
        f'        "wgmma.mma_async.sync.aligned.m64n{n}k32.f32.e4m3.e4m3 "\n'
        f'        "{{{regs}}}, "\n'
        f'        "%{r}, %{r + 1}, p, 1, 1;\\n}}\\n"\n'
        f"        : {outs}\n"
        f'        : "l"(da), "l"(db), "r"(scale_d)\n'
        f'        : "memory");\n'
        f"}}\n")


def main() -> None:
    path = Path(__file__).with_name("fp8_gemm_wgmma.cu")
    text = path.read_text()
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    body = "\n".join(wrapper(n) for n in NS)
    path.write_text(f"{head}{BEGIN} (gen_wgmma_ops.py; do not edit by hand)\n{body}{END}{tail}")


if __name__ == "__main__":
    main()
