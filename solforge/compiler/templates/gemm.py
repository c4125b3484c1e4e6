"""GEMM segment template: a spec of one (batched) matrix product with its operand indexing, prologues
and epilogue in, CUDA C++ sources and Candidate launches out.

    out(b, row, col) = epilogue( alpha * sum_k pro_A(A(b, row, k)) * pro_B(B(b, col, k)) + bias )

Operands are described by where their elements live, never copied: element (b, r, k) of an operand
is at `b_offset(b) + r * r_stride + k * k_stride` elements from its base pointer (C++ expressions
over the kernel's scalar args), or at a free-form `offset` expression over b, r, k (with a `pred`
for elements that do not exist, e.g. convolution padding). A transposed or permuted operand is just
other strides. B is indexed by (b, n, k): torch's `A @ W.T` with a row-major W[N, K] has
k_stride 1, r_stride K; `A @ X` with X[K, N] has k_stride N, r_stride 1.

The kernels live in kernels_cuda/compiler/sfg_gemm.cuh (mainloops); this module writes one struct
per GEMM (the indexing, prologue and epilogue as C++) and the extern "C" entry points around it.
Tunables are baked into the generated source (template arguments), not candidate params, so any
number of GEMM segments coexist in one candidate without name clashes.

Tiers (params["tier"]):
- "wgws" (sm_90a): both operands 16-bit with 16-byte copies, K-major or MN-major (any plain strided
  layout: x @ W.T, x @ X, transposed A): warp-specialized, a cp.async producer warpgroup and one or
  two wgmma consumer warpgroups on an mbarrier stage ring (loads, MMAs and refills overlap), MN-major
  tiles read through wgmma's transpose bit; CTAS > 0 makes the grid persistent (CTAS CTAs walking
  the tiles); the default for large 16-bit GEMMs.
- "wgmma" (sm_90a): both operands K-major 16-bit with 16-byte copies: every thread loads and
  multiplies, one block barrier per k-tile (the earlier large-GEMM default, kept as a search point).
- "mma": fp16/bf16 operands of any layout, and FP8/int8 operands converted on load; mma.sync
  m16n8k16, fp32 accumulation, cp.async ring for aligned unit-stride operands (ldmatrix.trans for
  row-major tiles), a register path otherwise (gathers, prologues).
- "simt": fp32 operands in fp32 FMA, the default: PyTorch's fp32 matmul is full fp32 (no TF32), and
  256 of the shared workloads check results at atol 1e-5 with rtol 1e-5 or 1e-2, beyond TF32.
- "tf32": fp32 operands on tensor cores, PASSES 3 (3xTF32, fp32-level error) or 1 (TF32, what
  cuDNN uses for fp32 convolutions by default): search options the evaluator accepts or refuses.
params {"tiers": [{..., "max_m": 16}, ..., {...}]} puts several configs in one kernel, picked by M
at run time (the launch expressions follow the same rule): what default_params gives when M is a
var axis, so one candidate serves decode-sized and prefill-sized workloads.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Optional

_CUH = Path(__file__).resolve().parents[3] / "kernels_cuda" / "compiler" / "sfg_gemm.cuh"
HEADER_NAME = "sfg_gemm.cuh"

# torch dtype name -> C++ element type
CTYPES = {
    "float16": "__half", "half": "__half",
    "bfloat16": "__nv_bfloat16",
    "float32": "float", "float": "float",
    "float8_e4m3fn": "__nv_fp8_e4m3", "float8_e5m2": "__nv_fp8_e5m2",
    "int8": "signed char", "uint8": "unsigned char", "int32": "int",
}
SIXTEEN_BIT = {"float16", "half", "bfloat16"}
FP8 = {"float8_e4m3fn", "float8_e5m2"}
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def header_text() -> str:
    return _CUH.read_text()


@dataclass(frozen=True)
class KArg:
    """An extra kernel parameter the spec's C++ expressions may name (a scale pointer, a residual
    tensor, a scalar): C++ type, C identifier, and the Candidate launch arg that fills it (a tensor
    name, "workspace", or "int64:EXPR" / "float32:EXPR" ...)."""
    ctype: str
    name: str
    launch: str


@dataclass(frozen=True)
class Operand:
    """One GEMM operand: element (b, r, k), r along M for A and along N for B.

    tensor: the launch arg of its base pointer (a tensor name or "workspace"); byte_offset: a launch
    expression added to it (an intermediate inside the workspace). Strides and b_offset are C++
    expressions over the kernel's scalar members (M, N, K, batch, the spec's args); b_offset may
    use `b` (the batch index, long long). `offset`, when given, replaces the strided form (over b,
    r, k); `contig` then says which index is unit-stride ("k", "r" or None). `pred`: an extra
    condition for an element to exist (else it reads as 0). `prologue`: a C++ float expression over
    `v` (the element as float), b, r, k (dequant scale, an elementwise op)."""
    tensor: Optional[str]
    dtype: str
    k_stride: str = "1"
    r_stride: str = "0"
    b_offset: str = "0"
    byte_offset: str = "0"
    offset: Optional[str] = None
    contig: Optional[str] = None
    pred: Optional[str] = None
    prologue: Optional[str] = None
    ptr: Optional[str] = None    # tensor None: the struct member holding the base pointer
    load: Optional[str] = None   # C++ statements over b, r, k returning the element as float

    @staticmethod
    def k_major(tensor: str, dtype: str, ld: str, b_offset: str = "0", **kw) -> "Operand":
        """Rows of `ld` elements, k contiguous (A[M, K] row-major; B as W[N, K] row-major)."""
        return Operand(tensor, dtype, k_stride="1", r_stride=ld, b_offset=b_offset, **kw)

    @staticmethod
    def r_major(tensor: str, dtype: str, ld: str, b_offset: str = "0", **kw) -> "Operand":
        """k rows of `ld` elements, r contiguous (A^T stored as [K, M]; B as X[K, N] row-major)."""
        return Operand(tensor, dtype, k_stride=ld, r_stride="1", b_offset=b_offset, **kw)

    def contiguity(self) -> int:
        """1: unit stride along k, 2: along r, 0: neither (register path, threads along k)."""
        if self.offset is not None or self.load is not None:
            return {"k": 1, "r": 2}.get(self.contig or "", 0)
        if _is_one(self.k_stride):
            return 1
        if _is_one(self.r_stride):
            return 2
        return 0

    def element_offset(self) -> str:
        if self.offset is not None:
            return f"(i64)({self.offset})"
        return (f"(i64)({self.b_offset}) + (i64)r * (i64)({self.r_stride}) + "
                f"(i64)k * (i64)({self.k_stride})")


@dataclass(frozen=True)
class Output:
    """Where the result goes: element (b, row, col) at b_offset(b) + row * row_stride + col * col_stride,
    or a free-form `offset` over b, row, col. tensor/byte_offset as for Operand."""
    tensor: str
    dtype: str
    row_stride: str = "N"
    col_stride: str = "1"
    b_offset: str = "0"
    byte_offset: str = "0"
    offset: Optional[str] = None

    def element_offset(self) -> str:
        if self.offset is not None:
            return f"(i64)({self.offset})"
        return (f"(i64)({self.b_offset}) + (i64)row * (i64)({self.row_stride}) + "
                f"(i64)col * (i64)({self.col_stride})")


@dataclass(frozen=True)
class Bias:
    """Added after alpha: kind "col" (bias[col], linear/addmm), "row" (bias[row]) or "full" (a
    tensor over (b, row, col) given by `offset`, e.g. baddbmm's input). `beta` scales it."""
    tensor: str
    dtype: str
    kind: str = "col"
    offset: Optional[str] = None
    byte_offset: str = "0"
    beta: Optional[str] = None

    def element_offset(self) -> str:
        if self.kind == "col":
            return "(i64)col"
        if self.kind == "row":
            return "(i64)row"
        if self.offset is None:
            raise ValueError("a full bias needs its offset expression over b, row, col")
        return f"(i64)({self.offset})"


@dataclass(frozen=True)
class GemmSpec:
    """One (batched) GEMM segment. m, n, k, batch: launch expressions (axes, scalars) of its sizes,
    passed to the kernel as int32 M, N, K, batch. alpha: a C++ float expression. epilogue: C++
    statements run per output element with `float v` (after alpha and bias; assign to change it),
    `long long b`, `int row`, `int col` in scope, before v is stored to `out` (out=None: the hook
    does every store itself, e.g. several outputs). args: every extra pointer or scalar the C++
    expressions name. compute: the tensor-core type ("auto": the operands' 16-bit type, bf16 for
    FP8 operands)."""
    name: str
    a: Operand
    b: Operand
    m: str
    n: str
    k: str
    batch: str = "1"
    out: Optional[Output] = None
    alpha: Optional[str] = None
    bias: Optional[Bias] = None
    epilogue: Optional[str] = None
    args: tuple[KArg, ...] = ()
    compute: str = "auto"
    ws_offset: str = "0"
    helpers: str = ""  # C++ member functions of the generated struct the expressions may call
    init: tuple = ()   # C++ statements run at kernel entry after the members are set (`p.` ...)

    def compute_type(self) -> str:
        """bfloat16 | float16 | float32: what the multiply runs in."""
        if self.compute != "auto":
            return self.compute
        da, db = self.a.dtype, self.b.dtype
        if "float32" in (da, db) or da in ("int32",) or db in ("int32",):
            return "float32"
        for d in (da, db):
            if d in SIXTEEN_BIT:
                return "float16" if d in ("float16", "half") else "bfloat16"
        return "bfloat16"  # fp8 / int8 operands: exact in bf16 (e4m3, e5m2 and int8 all fit)


class Generated(NamedTuple):
    sources: dict          # file name -> text (the .cu unit and the shared header)
    kernels: list          # kernel names, in launch order
    launches: list         # Candidate launch dicts
    workspace: str         # bytes of workspace this GEMM needs past spec.ws_offset ("0": none)


# ---------------------------------------------------------------------------------------------------
# tunables
# ---------------------------------------------------------------------------------------------------
SMEM_LIMIT = 227 * 1024


def _mma_ok(p: dict) -> bool:
    bm, bn, bk, wm, wn, st = (p[x] for x in ("BM", "BN", "BK", "WM", "WN", "ST"))
    nt = 32 * wm * wn
    if bm % (16 * wm) or bn % (16 * wn) or bk % 16 or st < 2 or p.get("SPLIT", 1) < 1:
        return False
    if (bm * bk) % nt or (bn * bk) % nt:
        return False
    if bm * bn // nt > 128:  # accumulators per thread: more spills (128 x 128 on 4 warps: 217 registers)
        return False
    return mma_smem(p) <= SMEM_LIMIT and nt <= 1024


def _simt_ok(p: dict) -> bool:
    bm, bn, bk, tm, tn = (p[x] for x in ("BM", "BN", "BK", "TM", "TN"))
    if bm % tm or bn % tn or tm % 4 or tn % 4:
        return False
    nt = (bm // tm) * (bn // tn)
    return 32 <= nt <= 1024 and (bm * bk) % nt == 0 and (bn * bk) % nt == 0 and simt_smem(p) <= SMEM_LIMIT


def _stage_elems(rows: int, bk: int) -> int:
    return max(rows * (bk + 8), bk * (rows + 8))


def mma_smem(p: dict) -> int:
    return p["ST"] * (_stage_elems(p["BM"], p["BK"]) + _stage_elems(p["BN"], p["BK"])) * 2


def simt_smem(p: dict) -> int:
    return 2 * p["BK"] * ((p["BM"] + 4) + (p["BN"] + 4)) * 4


def wgmma_smem(p: dict) -> int:
    return p["ST"] * (p["BM"] + p["BN"]) * 128 + 1024   # + 1024: the tiles' alignment slack


def wgws_smem(p: dict) -> int:
    # stages, 1024 alignment slack of the swizzled tiles, full + empty mbarriers
    return p["ST"] * (p["BM"] + p["BN"]) * 128 + 1024 + 16 * p["ST"]


NUM_SMS = 132   # the H200's SMs: wave sizes for split-K and the wgws tier's persistent grids by default


def wgws_eligible(spec: GemmSpec) -> bool:
    """The warp-specialized tier: both operands 16-bit with 16-byte copies, unit stride along K or
    along their rows (the transpose bit of wgmma reads the MN-major ones)."""
    comp = spec.compute_type()
    return comp != "float32" and _vec_capable(spec.a, comp) and _vec_capable(spec.b, comp)


def _wgws_ok(p: dict) -> bool:
    return (p["BM"] in (64, 128) and p["BN"] in (64, 128, 256) and 2 <= p["ST"] <= 8
            and p.get("SPLIT", 1) >= 1 and int(p.get("CTAS", 0)) >= 0 and wgws_smem(p) <= SMEM_LIMIT)


def wgmma_eligible(spec: GemmSpec) -> bool:
    """The wgmma tier reads both operands K-major through 16-byte copies."""
    comp = spec.compute_type()
    return (comp != "float32" and _vec_capable(spec.a, comp) and _vec_capable(spec.b, comp)
            and spec.a.contiguity() == 1 and spec.b.contiguity() == 1)


def _wgmma_ok(p: dict) -> bool:
    return (p["BM"] in (64, 128) and p["BN"] in (64, 128, 256) and p["ST"] >= 3 and p.get("SPLIT", 1) >= 1
            and wgmma_smem(p) <= SMEM_LIMIT)


def tf32_smem(p: dict) -> int:
    return 2 * p["BK"] * (p["BM"] + p["BN"]) * 4 + 2 * 4 * 4 * (p["BM"] + p["BN"])  # [rows][BK + 4] x 2


def _tf32_ok(p: dict) -> bool:
    bm, bn, bk, wm, wn = (p[x] for x in ("BM", "BN", "BK", "WM", "WN"))
    nt = 32 * wm * wn
    return (p.get("PASSES") in (1, 3) and bm % (16 * wm) == 0 and bn % (8 * wn) == 0 and bk % 8 == 0
            and (bm * bk) % nt == 0 and (bn * bk) % nt == 0 and bm * bn // nt <= 64 and nt <= 1024
            and tf32_smem(p) <= SMEM_LIMIT)


def valid_params(spec: GemmSpec, p: dict) -> bool:
    if "tiers" in p:
        try:
            return all(valid_params(spec, t) for t in tiers_of(p))
        except ValueError:
            return False
    tier = p.get("tier")
    if tier == "tf32":   # fp32 operands on tensor cores (PASSES 3: 3xTF32, 1: TF32): a search option
        return spec.compute_type() == "float32" and _tf32_ok(p)
    if tier == "wgmma":
        return wgmma_eligible(spec) and _wgmma_ok(p)
    if tier == "wgws":
        return wgws_eligible(spec) and _wgws_ok(p)
    if tier == "mma":
        return spec.compute_type() != "float32" and _mma_ok(p)
    if tier == "simt":
        return _simt_ok(p)
    return False


def _split_for(tiles: Optional[int], k: Optional[int], bk: int, fill: int = 2 * NUM_SMS,
               min_ktiles: int = 4) -> int:
    """Split K (doubling, at most 16) while the split tiles stay within `fill` CTAs (two waves of the
    H200's SMs by default) and each split keeps at least `min_ktiles` k-tiles of bk."""
    if not tiles or not k:
        return 1
    split = 1
    while tiles * split * 2 <= fill and k // (split * 2) >= min_ktiles * bk and split < 16:
        split *= 2
    return split


def default_params(spec: GemmSpec, m: Optional[int] = None, n: Optional[int] = None,
                   k: Optional[int] = None, batch: Optional[int] = None) -> dict:
    """A first guess by size buckets. With M unknown (a var axis), tiers picked by M at run time:
    skinny tiles (and split-K when N and K are known and the grid would be small) for M <= 16 and
    M <= 64, large ones above."""
    if m is None:
        tiers = [dict(_bucket_params(spec, 16, n, k, batch), max_m=16),
                 dict(_bucket_params(spec, 64, n, k, batch), max_m=64)]
        mid = _bucket_params(spec, 256, n, k, batch)
        big = _bucket_params(spec, None, n, k, batch)
        if mid != big:
            tiers.append(dict(mid, max_m=256))
        return {"tiers": tiers + [big]}
    return _bucket_params(spec, m, n, k, batch)


def _bucket_params(spec: GemmSpec, m: Optional[int], n: Optional[int], k: Optional[int],
                   batch: Optional[int]) -> dict:
    bt = batch or 1
    if spec.compute_type() == "float32":
        if m is not None and m <= 32:
            p = dict(tier="simt", BM=32, BN=64, BK=16, TM=4, TN=4)
        elif (m is not None and m <= 256) or (n is not None and n <= 256):
            p = dict(tier="simt", BM=64, BN=64, BK=16, TM=4, TN=4)
        else:
            p = dict(tier="simt", BM=128, BN=128, BK=16, TM=8, TN=8)
    else:
        if m is not None and m <= 16:
            p = dict(tier="mma", BM=16, BN=64, BK=64, WM=1, WN=4, ST=4)
        elif m is not None and m <= 64:
            p = dict(tier="mma", BM=64, BN=64, BK=32, WM=2, WN=2, ST=4)
        elif (n is not None and n <= 64) or not (_vec_capable(spec.a, spec.compute_type())
                                                 and _vec_capable(spec.b, spec.compute_type())):
            # narrow N, or a register-path operand (gather, prologue, FP8) whose loads stay live
            # across the MMAs: 8 warps of 32 x 32
            p = dict(tier="mma", BM=128, BN=64, BK=32, WM=4, WN=2, ST=3)
        elif (wgmma_eligible(spec) and m is not None and n is not None
              and -(-m // 128) * -(-n // 256) * bt >= 2 * NUM_SMS):
            # both operands K-major with two waves or more of 128 x 256 tiles: the cp.async wgmma
            # tier beat the warp-specialized one on the H200 (4096^3 334 us against 469 us,
            # 8192x2048x1024 131 against 151: data/results/compiler_templates/
            # gemm_template_check_h200_2026-12-04_wgws.txt); below that, and for every other layout,
            # wgws won (1.25-1.5x)
            p = dict(tier="wgmma", BM=128, BN=256, ST=4)
        elif wgws_eligible(spec):
            p = _wgws_default(m, n, bt)
        else:
            p = dict(tier="mma", BM=128, BN=128, BK=32, WM=2, WN=4, ST=4)
    tiles = None
    if m is not None and n is not None:
        tiles = -(-m // p["BM"]) * -(-n // p["BN"]) * bt
    if p["tier"] == "wgws":
        # split-K costs a second kernel and an fp32 round trip: only under half a wave of tiles,
        # with at least 8 k-tiles per split
        split = _split_for(tiles, k, 64, fill=NUM_SMS, min_ktiles=8)
        p["SPLIT"] = split
        if split > 1:
            p["CTAS"] = 0
        return p
    p["SPLIT"] = _split_for(tiles, k, p.get("BK", 64))
    return p


def _wgws_default(m: Optional[int], n: Optional[int], bt: int) -> dict:
    """Warp-specialized tile by output size: 128 x 256 (two consumer warpgroups of m64n256, the
    CUTLASS / gemm_wgmma large-GEMM tile) where it still gives most of a wave of CTAs (>= 100 of
    132), else 128 x 128, else 64 x 128 (one consumer warpgroup, two CTAs a SM). Persistent (one CTA
    a SM, CTAS = 132) past one wave of 128-row tiles: the producer runs into the next tile's stages
    while the consumers write the last one."""
    def tiles(bm: int, bn: int) -> Optional[int]:
        return None if m is None or n is None else -(-m // bm) * -(-n // bn) * bt

    cands = [(128, 128, 6), (64, 128, 4)] if n is not None and n <= 128 else \
        [(128, 256, 4), (128, 128, 6), (64, 128, 4)]
    for bm, bn, st in cands:
        t = tiles(bm, bn)
        if t is None or t >= 100:
            break
    p = dict(tier="wgws", BM=bm, BN=bn, ST=st)
    p["CTAS"] = NUM_SMS if bm == 128 and (t is None or t > NUM_SMS) else 0
    return p


def param_space(spec: GemmSpec) -> list[dict]:
    """Every config the search may try for this spec (all valid for it)."""
    out = []
    if spec.compute_type() == "float32":
        # tensor cores for fp32 operands: 3xTF32 keeps fp32-level accuracy, TF32 is what cuDNN's
        # fp32 convolutions use by default; neither is the default (PyTorch's fp32 matmul is exact
        # fp32 and some problems check it at 1e-5): the evaluator decides per problem
        for bm, bn, wm, wn in ((64, 64, 2, 2), (128, 64, 4, 2), (128, 128, 4, 2), (64, 128, 2, 4)):
            for passes in (3, 1):
                for split in (1, 4):
                    p = dict(tier="tf32", BM=bm, BN=bn, BK=32, WM=wm, WN=wn, ST=2, PASSES=passes, SPLIT=split)
                    if _tf32_ok(p):
                        out.append(p)
        for bm, bn, tm, tn in ((32, 64, 4, 4), (64, 64, 4, 4), (64, 128, 4, 8), (128, 64, 8, 4),
                               (128, 128, 8, 8)):
            for bk in (8, 16, 32):
                for split in (1, 2, 4, 8):
                    p = dict(tier="simt", BM=bm, BN=bn, BK=bk, TM=tm, TN=tn, SPLIT=split)
                    if _simt_ok(p):
                        out.append(p)
        return out
    if wgws_eligible(spec):
        for bm, bn in ((128, 256), (128, 128), (64, 256), (64, 128), (128, 64), (64, 64)):
            for st in (3, 4, 5, 6):
                for split in (1, 2, 4, 8):
                    for ctas in ((0, NUM_SMS) if split == 1 else (0,)):
                        p = dict(tier="wgws", BM=bm, BN=bn, ST=st, SPLIT=split, CTAS=ctas)
                        if _wgws_ok(p):
                            out.append(p)
    if wgmma_eligible(spec):
        for bm in (64, 128):
            for bn in (64, 128, 256):
                for st in (3, 4, 5, 6):
                    for split in (1, 2, 4, 8):
                        p = dict(tier="wgmma", BM=bm, BN=bn, ST=st, SPLIT=split)
                        if _wgmma_ok(p):
                            out.append(p)
    for bm, bn, wm, wn in ((16, 64, 1, 4), (16, 128, 1, 4), (32, 64, 2, 2), (64, 64, 2, 2),
                           (64, 128, 2, 2), (128, 64, 4, 1), (128, 64, 2, 2), (128, 128, 2, 4),
                           (128, 256, 2, 4), (256, 128, 4, 2)):
        for bk in (32, 64):
            for st in (2, 3, 4, 5):
                for split in (1, 2, 4, 8, 16):
                    p = dict(tier="mma", BM=bm, BN=bn, BK=bk, WM=wm, WN=wn, ST=st, SPLIT=split)
                    if _mma_ok(p):
                        out.append(p)
    return out


# ---------------------------------------------------------------------------------------------------
# code generation
# ---------------------------------------------------------------------------------------------------
def _is_one(expr: str) -> bool:
    return expr.strip() in ("1", "(1)", "1LL", "1ll")


def _ctype(dtype: str) -> str:
    try:
        return CTYPES[dtype]
    except KeyError:
        raise ValueError(f"unsupported dtype {dtype!r}") from None


def _vec_capable(op: Operand, compute: str) -> bool:
    """cp.async 16-byte copies need the raw element to be the multiply type and a unit-stride
    index with a plain strided offset (no gather, no predicate, no prologue, no load code)."""
    return (op.dtype == compute and op.dtype in SIXTEEN_BIT and op.offset is None and op.pred is None
            and op.prologue is None and op.load is None and op.contiguity() in (1, 2))


def _vec_ok_expr(op: Operand, ptr: str) -> str:
    """Run-time check that every 8-element chunk the copies read is 16-byte aligned."""
    other = op.r_stride if op.contiguity() == 1 else op.k_stride
    return (f"((((unsigned long long)({ptr} + (i64)({op.b_offset}))) & 15ull) == 0ull) && "
            f"(((i64)({other})) % 8 == 0)")


def _split_decl(decl: str) -> tuple[str, str]:
    """'const float* __restrict__ p_x' -> ('const float* __restrict__', 'p_x')."""
    m = re.match(r"^(.*?)([A-Za-z_][A-Za-z0-9_]*)\s*$", decl.strip())
    if not m:
        raise ValueError(f"cannot read a declaration from {decl!r}")
    return m.group(1).strip(), m.group(2)


def _member(ctype: str, name: str) -> str:
    return f"    {ctype.replace('__restrict__', '').strip()} {name};"


class _Sig:
    """Kernel parameters (declaration, launch arg), the struct members they fill, init lines."""

    def __init__(self):
        self.params: list[tuple[str, object]] = []
        self.members: list[str] = []
        self.inits: list[str] = []

    def ptr(self, member: str, ctype: str, tensor: str, byte_offset: str, const: bool):
        q = "const " if const else ""
        self.params.append((f"{q}void* __restrict__ {member}_raw", tensor))
        self.members.append(f"    {q}{ctype}* {member};")
        if byte_offset.strip() not in ("0", ""):
            self.params.append((f"long long {member}_boff", f"int64:{byte_offset}"))
            self.inits.append(f"p.{member} = reinterpret_cast<{q}{ctype}*>(reinterpret_cast<{q}char*>({member}_raw)"
                              f" + {member}_boff);")
        else:
            self.inits.append(f"p.{member} = reinterpret_cast<{q}{ctype}*>({member}_raw);")

    def arg(self, ctype: str, name: str, launch):
        if not _IDENT.match(name):
            raise ValueError(f"arg name {name!r} is not a C identifier")
        self.params.append((f"{ctype} {name}", launch))
        self.members.append(_member(ctype, name))
        self.inits.append(f"p.{name} = {name};")


def _signature(spec: GemmSpec, with_ws: bool) -> _Sig:
    sg = _Sig()
    for mem, op in (("A", spec.a), ("B", spec.b)):
        if op.tensor is not None:
            sg.ptr(mem, _ctype(op.dtype), op.tensor, op.byte_offset, True)
    if spec.out is not None:
        sg.ptr("C", _ctype(spec.out.dtype), spec.out.tensor, spec.out.byte_offset, False)
    if spec.bias is not None:
        sg.ptr("bias", _ctype(spec.bias.dtype), spec.bias.tensor, spec.bias.byte_offset, True)
    for a in spec.args:
        sg.arg(a.ctype, a.name, a.launch)
    for nm, expr in (("M", spec.m), ("N", spec.n), ("K", spec.k), ("batch", spec.batch)):
        sg.arg("int", nm, f"int32:{expr}")
    sg.inits += list(spec.init)
    if with_ws:
        sg.params.append(("void* __restrict__ sfg_ws_raw", "workspace"))
        if spec.ws_offset.strip() != "0":
            sg.params.append(("long long sfg_ws_off", f"int64:{spec.ws_offset}"))
    return sg


def _operand_ptr(op: Operand, mem: str) -> str:
    """The member holding the operand's base pointer."""
    if op.tensor is not None:
        return mem
    if op.ptr is None and op.load is None:
        raise ValueError("an operand without a tensor needs `ptr` (a member) or `load` code")
    return op.ptr or ""


def _load_body(op: Operand, ptr: str) -> str:
    if op.load is not None:
        return op.load
    body = []
    if op.pred is not None:
        body.append(f"if (!({op.pred})) return 0.f;")
    body.append(f"const float v = sfg::to_f({ptr}[{op.element_offset()}]);")
    body.append(f"return (float)({op.prologue or 'v'});")
    return " ".join(body)


def _struct(spec: GemmSpec, sname: str, sg: _Sig) -> str:
    comp = spec.compute_type()
    ca, cb = spec.a.contiguity(), spec.b.contiguity()
    va = comp != "float32" and _vec_capable(spec.a, comp)
    vb = comp != "float32" and _vec_capable(spec.b, comp)
    pa, pb = _operand_ptr(spec.a, "A"), _operand_ptr(spec.b, "B")

    def sel(fa: str, fb: str) -> str:
        return f"if constexpr (W == 0) {{ {fa} }} else {{ {fb} }}"

    epi = ["float v = acc;"]
    if spec.alpha is not None:
        epi.append(f"v *= (float)({spec.alpha});")
    if spec.bias is not None:
        bv = f"sfg::to_f(bias[{spec.bias.element_offset()}])"
        if spec.bias.beta is not None:
            bv = f"(float)({spec.bias.beta}) * {bv}"
        epi.append(f"v += {bv};")
    if spec.epilogue:
        epi.append("{\n" + spec.epilogue + "\n        }")
    if spec.out is not None:
        epi.append(f"C[{spec.out.element_offset()}] = sfg::from_f<{_ctype(spec.out.dtype)}>(v);")
    ptr_a = pa if va else "static_cast<const __half*>(nullptr)"
    ptr_b = pb if vb else "static_cast<const __half*>(nullptr)"
    off_a = spec.a.element_offset() if va else "0"
    off_b = spec.b.element_offset() if vb else "0"
    members = "\n".join(sg.members)
    return f"""
struct {sname} {{
{members}
{spec.helpers}
    template <int W> __host__ __device__ static constexpr int contig() {{ return W == 0 ? {ca} : {cb}; }}
    template <int W> __host__ __device__ static constexpr bool smem_kmajor() {{ return contig<W>() != 2; }}
    template <int W> __host__ __device__ static constexpr bool vec() {{ return W == 0 ? {str(va).lower()} : {str(vb).lower()}; }}
    // the 16-byte copy path (vec operands only)
    template <int W> __device__ __forceinline__ auto ptr() const {{ {sel("return " + ptr_a + ";", "return " + ptr_b + ";")} }}
    template <int W> __device__ __forceinline__ i64 off(i64 b, int r, int k) const {{
        {sel("return " + off_a + ";", "return " + off_b + ";")}
    }}
    template <int W> __device__ __forceinline__ bool vec_ok(i64 b) const {{
        {sel("return " + (_vec_ok_expr(spec.a, pa) if va else "false") + ";",
             "return " + (_vec_ok_expr(spec.b, pb) if vb else "false") + ";")}
    }}
    // element (b, r, k) as float: predicate, gather, prologue
    template <int W> __device__ __forceinline__ float load(i64 b, int r, int k) const {{
        {sel(_load_body(spec.a, pa), _load_body(spec.b, pb))}
    }}
    __device__ __forceinline__ void epi(float acc, i64 b, int row, int col) const {{
        {(chr(10) + "        ").join(epi)}
    }}
}};
"""


def guarded_header() -> str:
    """The mainloop header as inline text with an include guard (for a single-unit candidate that
    cannot ship a second file): several GEMMs in one unit define it once."""
    body = "\n".join(l for l in header_text().splitlines() if l.strip() != "#pragma once")
    return f"#ifndef SFG_GEMM_CUH_\n#define SFG_GEMM_CUH_\n{body}\n#endif  // SFG_GEMM_CUH_\n"


def _threads(p: dict) -> int:
    if p["tier"] == "wgws":
        return 128 * (1 + p["BM"] // 64)
    if p["tier"] == "wgmma":
        return 2 * p["BM"]
    if p["tier"] in ("tf32", "mma"):
        return 32 * p["WM"] * p["WN"]
    return (p["BM"] // p["TM"]) * (p["BN"] // p["TN"])


def _tier_call(spec: GemmSpec, sname: str, p: dict, bound: int = 0) -> tuple[int, str, int]:
    """(threads, the mainloop call, dynamic shared bytes) of one tier's params; `bound`: the kernel's
    launch bound (the wgws tier moves registers from its producer to its consumers at 384)."""
    comp, split = spec.compute_type(), int(p.get("SPLIT", 1))
    if p["tier"] == "wgws":
        reg = "true" if bound == 384 else "false"
        return (_threads(p), f"sfg::gemm_wgws<{sname}, {_ctype(comp)}, {p['BM']}, {p['BN']}, {p['ST']}, "
                f"{split}, {reg}>(p, sfg_smem, sfg_ws);", wgws_smem(p))
    if p["tier"] == "wgmma":
        return (2 * p["BM"], f"sfg::gemm_wgmma<{sname}, {_ctype(comp)}, {p['BM']}, {p['BN']}, {p['ST']}, "
                f"{split}>(p, sfg_smem, sfg_ws);", wgmma_smem(p))
    if p["tier"] == "tf32":
        return (32 * p["WM"] * p["WN"], f"sfg::gemm_tf32<{sname}, {p['BM']}, {p['BN']}, {p['BK']}, {p['WM']}, "
                f"{p['WN']}, 2, {split}, {p['PASSES']}>(p, sfg_smem, sfg_ws);", tf32_smem(p))
    if p["tier"] == "mma":
        return (32 * p["WM"] * p["WN"], f"sfg::gemm_mma<{sname}, {_ctype(comp)}, {p['BM']}, {p['BN']}, "
                f"{p['BK']}, {p['WM']}, {p['WN']}, {p['ST']}, {split}>(p, sfg_smem, sfg_ws);", mma_smem(p))
    return ((p["BM"] // p["TM"]) * (p["BN"] // p["TN"]), f"sfg::gemm_simt<{sname}, {p['BM']}, {p['BN']}, "
            f"{p['BK']}, {p['TM']}, {p['TN']}, {split}>(p, sfg_smem, sfg_ws);", simt_smem(p))


def tiers_of(p: dict) -> list[dict]:
    """A params dict as its list of M tiers: {"tiers": [{"max_m": 16, ...}, ..., {...}]} picks a tile
    config by M at run time (kernel and launch expressions use the same rule); a plain dict is one
    tier for every M."""
    if "tiers" not in p:
        return [dict(p, SPLIT=int(p.get("SPLIT", 1)))]
    ts = [dict(t, SPLIT=int(t.get("SPLIT", 1))) for t in p["tiers"]]
    if not ts or "max_m" in ts[-1] or any("max_m" not in t for t in ts[:-1]):
        raise ValueError("tiers: every tier but the last names its max_m")
    bounds = [t["max_m"] for t in ts[:-1]]
    if bounds != sorted(set(bounds)) or any(not isinstance(b, int) or b < 1 for b in bounds):
        raise ValueError(f"tiers: max_m must increase: {bounds}")
    return ts


def _cond(m: str, lo, hi) -> str:
    """Launch-expression factor that is 1 when lo < m <= hi (None: open)."""
    parts = []
    if lo is not None:
        parts.append(f"(({m}) > {lo})")
    if hi is not None:
        parts.append(f"(({m}) <= {hi})")
    return " * ".join(parts) or "1"


def _select(m: str, tiers: list, vals: list) -> str:
    """A launch expression worth vals[i] in tier i's M range."""
    if len(tiers) == 1:
        return str(vals[0])
    out, lo = [], None
    for t, v in zip(tiers, vals):
        hi = t.get("max_m")
        out.append(f"{_cond(m, lo, hi)} * ({v})")
        lo = hi
    return " + ".join(out)


def render(spec: GemmSpec, params: Optional[dict] = None, inline_header: bool = False):
    """(source text, launches without args, workspace bytes expression, [(param decl, launch arg)],
    params). inline_header: the mainloop header inlined under an include guard (one-unit
    candidates) instead of #included."""
    p = dict(params) if params else default_params(spec)
    tiers = tiers_of(p)
    for t in tiers:
        if not valid_params(spec, t):
            raise ValueError(f"params {t} are not valid for {spec.name} (compute {spec.compute_type()})")
    stem = spec.name
    if not _IDENT.match(stem):
        raise ValueError(f"spec name {stem!r} is not a C identifier")
    sname = f"P_{stem}"
    any_split = any(t["SPLIT"] > 1 for t in tiers)
    sg = _signature(spec, any_split)
    if any_split:
        off = " + sfg_ws_off" if spec.ws_offset.strip() != "0" else ""
        ws_line = f"float* sfg_ws = reinterpret_cast<float*>(reinterpret_cast<char*>(sfg_ws_raw){off});"
    else:
        ws_line = "float* sfg_ws = nullptr;"
    bound = max(_threads(t) for t in tiers)
    calls = [_tier_call(spec, sname, t, bound) for t in tiers]
    nts = [c[0] for c in calls]

    def dispatch(stmts: list[str]) -> str:
        if len(stmts) == 1:
            return stmts[0]
        out = []
        for i, (t, st) in enumerate(zip(tiers, stmts)):
            if i == 0:
                out.append(f"if (M <= {t['max_m']}) {{ {st} }}")
            elif "max_m" in t:
                out.append(f"else if (M <= {t['max_m']}) {{ {st} }}")
            else:
                out.append(f"else {{ {st} }}")
        return "\n    ".join(out)

    decls = ", ".join(d for d, _ in sg.params)
    init = "\n    ".join(sg.inits)
    body = [f"// GEMM segment {stem}: generated by solforge/compiler/templates/gemm.py",
            f"// params: {p}"]
    body.append(guarded_header() if inline_header else f'#include "{HEADER_NAME}"')
    body += ["using sfg::i64;", _struct(spec, sname, sg),
             f"""extern "C" __global__ void __launch_bounds__({max(nts)}) {stem}({decls}) {{
    SFG_DYN_SMEM(sfg_smem);  // the mainloop is block-collective (__syncthreads), also in emulation
    {sname} p;
    {init}
    {ws_line}
    {dispatch([c[1] for c in calls])}
}}
"""]
    grids = [f"ceil_div({spec.m}, {t['BM']}) * ceil_div({spec.n}, {t['BN']}) * ({spec.batch}) * {t['SPLIT']}"
             for t in tiers]
    # persistent wgws tiers: at most CTAS CTAs walk the tiles
    grids = [f"min({int(t['CTAS'])}, {g})" if t["tier"] == "wgws" and int(t.get("CTAS", 0)) > 0 else g
             for t, g in zip(tiers, grids)]
    launches = [dict(kernel=stem, grid=[_select(spec.m, tiers, grids)], block=[_select(spec.m, tiers, nts)],
                     smem=_select(spec.m, tiers, [c[2] for c in calls]))]
    workspace = "0"
    if any_split:
        red = f"{stem}_reduce"
        reduce_calls = [f"sfg::splitk_reduce<{sname}, {t['SPLIT']}>(p, sfg_ws);" if t["SPLIT"] > 1 else "return;"
                        for t in tiers]
        body.append(f"""extern "C" __global__ void __launch_bounds__(256) {red}({decls}) {{
    {sname} p;
    {init}
    {ws_line}
    {dispatch(reduce_calls)}
}}
""")
        # a tier without split-K launches the reduce kernel too (it returns at once): launch lists
        # are fixed, only their sizes follow M
        rgrid = _select(spec.m, tiers, [f"ceil_div(({spec.batch}) * ({spec.m}) * ({spec.n}), 256)"
                                        if t["SPLIT"] > 1 else "1" for t in tiers])
        launches.append(dict(kernel=red, grid=[f"max(1, {rgrid})"], block=["256"], smem="0"))
        workspace = _select(spec.m, tiers, [f"{t['SPLIT']} * ({spec.batch}) * ({spec.m}) * ({spec.n}) * 4"
                                            if t["SPLIT"] > 1 else "0" for t in tiers])
    return "\n".join(body), launches, workspace, sg.params, p


def generate(spec: GemmSpec, params: Optional[dict] = None) -> Generated:
    """CUDA sources and launches for `spec` with tunables `params` (default_params() if None)."""
    text, launches, workspace, sig, _ = render(spec, params)
    includes = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n#include <cuda_fp8.h>\n"
    args = [a for _, a in sig]
    for la in launches:
        la["args"] = list(args)
    return Generated({f"{spec.name}.cu": includes + text, HEADER_NAME: header_text()},
                     [la["kernel"] for la in launches], launches, workspace)


def spec_digest(spec: GemmSpec) -> str:
    """A short stable hash of a spec (for naming kernels of specs built without a name in mind)."""
    return hashlib.sha256(repr(spec).encode()).hexdigest()[:10]


__all__ = ["KArg", "Operand", "Output", "Bias", "GemmSpec", "Generated", "generate", "render",
           "default_params", "param_space", "valid_params", "header_text", "guarded_header",
           "HEADER_NAME", "CTYPES", "spec_digest"]
