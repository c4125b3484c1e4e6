"""Loading a definition's reference as a module, with one clearly labelled substitution.

NVFP4 references call torch._scaled_mm on float4_e2m1fn_x2 operands with swizzled ("blocked") FP8
scale factors. That needs Blackwell's FP4 tensor cores; on Hopper it raises. Where it would, the
reference runs a dequantizing path instead: unpack FP4, undo the scale swizzle, multiply each block
of 16 by its E4M3 scale (exact in bfloat16: 2 mantissa bits x 3 mantissa bits), then a bf16 matmul
with fp32 accumulation. Results carry the label DEQUANT_LABEL so nobody mistakes them for the
original reference.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import torch

DEQUANT_LABEL = "dequantized-reference (FP4+scales -> bf16 matmul; torch._scaled_mm FP4 needs sm_100)"

# E2M1 code -> value (bit 3 is the sign)
_E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def load_reference(defn, folder: Path, name: str = "_solforge_reference") -> ModuleType:
    """Import the reference source from a real file (decorators such as @triton.jit read it back)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    path.write_text(defn.reference)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def needs_fp4_dequant(defn) -> bool:
    if "_scaled_mm" not in defn.reference:
        return False
    if not any(t.dtype.startswith("float4") for t in defn.inputs.values()) and \
            "float4_e2m1fn_x2" not in defn.reference:
        return False
    if not torch.cuda.is_available():
        return True
    return torch.cuda.get_device_capability()[0] < 10


def unpack_fp4(packed: torch.Tensor) -> torch.Tensor:
    """(..., n/2) packed E2M1 (low nibble first) -> (..., n) float32."""
    b = packed.contiguous().view(torch.uint8)
    lut = torch.tensor(_E2M1, dtype=torch.float32, device=b.device)
    lo = lut[(b & 0x0F).long()]
    hi = lut[(b >> 4).long()]
    return torch.stack((lo, hi), dim=-1).reshape(*b.shape[:-1], b.shape[-1] * 2)


def unswizzle_scales(blocked: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Inverse of the (rows, cols) -> 128x4 'blocked' layout torch._scaled_mm takes for FP4 scales:
    view(R/128, 128, C/4, 4).permute(0, 2, 1, 3).reshape(-1, 4, 32, 4).transpose(1, 2)."""
    nrb, ncb = rows // 128, cols // 4
    t = blocked.reshape(nrb * ncb, 32, 4, 4)      # (-1, 32, 4, 4) after transpose(1, 2)
    t = t.transpose(1, 2)                          # (-1, 4, 32, 4)
    t = t.reshape(nrb, ncb, 128, 4)                # blocks (row block, col block, 128, 4)
    return t.permute(0, 2, 1, 3).reshape(rows, cols)


def dequant_scaled_mm(a, b, scale_a, scale_b, bias=None, out_dtype=None, **_):
    """a: (M, K/2) FP4, b: (K/2, N) FP4 (a transposed view of (N, K/2)), scales in blocked layout."""
    m, n = a.shape[0], b.shape[1]
    k = a.shape[1] * 2
    a_val = unpack_fp4(a)                                       # (M, K)
    b_val = unpack_fp4(b.t())                                   # (N, K)
    sa = unswizzle_scales(scale_a.view(torch.float8_e4m3fn), m, k // 16).float()
    sb = unswizzle_scales(scale_b.view(torch.float8_e4m3fn), n, k // 16).float()
    a_deq = (a_val.view(m, k // 16, 16) * sa.unsqueeze(-1)).view(m, k).to(torch.bfloat16)
    b_deq = (b_val.view(n, k // 16, 16) * sb.unsqueeze(-1)).view(n, k).to(torch.bfloat16)
    out = torch.matmul(a_deq, b_deq.t())
    if bias is not None:
        out = out + bias
    return out.to(out_dtype or torch.bfloat16)


class Fp4Shim:
    """Replaces torch._scaled_mm for FP4 operands while active; other dtypes go to the original."""

    def __init__(self):
        self.original = torch._scaled_mm
        self.used = False

    def __call__(self, a, b, *args, **kwargs):
        fp4 = getattr(torch, "float4_e2m1fn_x2", None)
        if fp4 is not None and a.dtype == fp4:
            self.used = True
            names = ("scale_a", "scale_b", "bias", "scale_result", "out_dtype", "use_fast_accum")
            kw = dict(zip(names, args))
            kw.update(kwargs)
            return dequant_scaled_mm(a, b, kw["scale_a"], kw["scale_b"], kw.get("bias"),
                                     kw.get("out_dtype"))
        return self.original(a, b, *args, **kwargs)

    def install(self) -> "Fp4Shim":
        torch._scaled_mm = self
        return self

    def remove(self) -> None:
        torch._scaled_mm = self.original
