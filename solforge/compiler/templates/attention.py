"""Flash attention segment template: an AttentionSpec (what the traced graph computes) in, the CUDA
source, #define params and launches of kernels_cuda/compiler/attention_flash.cu out.

The spec states layouts, not shapes: each tensor is a launch argument (a tensor name or
"workspace"), an element offset and one stride expression per logical dim, so a permute, transpose,
head split, GQA expand or broadcast in the reference becomes strides here and never a copy. All
size and stride fields are expressions of the launch evaluator (solforge/problem/axis_expr.py) over
the workload's axes and scalars; the head dims and the GQA group are constants (they size register
tiles).

Numerics follow the reference's rounding points as the trace states them: `round_scores` when the
scores (q.k, scale, softcap, bias) were computed in a 16-bit dtype; fp32 inputs get 3xTF32 mma
(fp32-accurate); 16-bit inputs get mma.sync with fp32 accumulation and the softmax in fp32 (which is
also what a 16-bit torch softmax does internally).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

KERNEL_FILE = Path(__file__).resolve().parents[3] / "kernels_cuda" / "compiler" / "attention_flash.cu"
DTYPE_CODE = {"float32": 0, "float16": 1, "bfloat16": 2}
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
SMEM_LIMIT = 227 * 1024          # sm_90 opt-in dynamic shared memory per block
COMBINE_WARPS = 8                # attn_combine's warps per CTA (#define in the .cu)
MAX_HEAD_DIM = 512
SPLIT_TARGET_CTAS = 264          # split-KV until the grid has ~2 CTAs per SM (H200: 132 SMs)


class AttentionSpecError(ValueError):
    """The spec or params cannot be generated (one line, says what)."""


@dataclass(frozen=True)
class TensorLayout:
    """A tensor as the kernel reads it: element (i0, i1, ...) at arg + offset + sum(i_k * strides[k])."""
    arg: str                          # launch argument: a tensor name or "workspace"
    strides: tuple[str, ...]          # one expression per logical dim (0 = broadcast)
    dtype: str = "float32"
    offset: str = "0"                 # elements


@dataclass(frozen=True)
class AttentionSpec:
    """softmax(mod(Q K^T)) V over (batch, head, seq, dim) views; see the .cu header for `mod`."""
    q: TensorLayout                   # (batch, q head, sq, head_dim)
    k: TensorLayout                   # (batch, kv head, sk, head_dim)
    v: TensorLayout                   # (batch, kv head, sk, head_dim_v)
    o: TensorLayout                   # (batch, q head, sq, head_dim_v)
    batch: str                        # expressions
    heads: str                        # q heads
    seq_q: str
    seq_k: str
    head_dim: int
    head_dim_v: int
    group: int = 1                    # q heads per kv head: kv head = q head // group
    scale: str = "1.0"                # expression (a constant or a scalar input's name)
    causal: bool = False
    # key j is visible to query i iff j <= i + causal_offset: "0" is torch.tril / triu(diagonal=1)
    # (top-left aligned); "seq_k - seq_q" is bottom-right (the kv cache's end), e.g. SDPA-style decode
    causal_offset: str = "0"
    window: Optional[str] = None      # also masked where i + causal_offset - j >= window
    softcap: Optional[str] = None     # s = tanh(s / softcap) * softcap, after the scale
    bias: Optional[TensorLayout] = None   # (batch, q head, i, j), added after the softcap
    mask: Optional[TensorLayout] = None   # bool (batch, q head, i, j)
    mask_keep: bool = False           # True: True keeps a score (where(mask, s, -inf)); False: masked_fill
    lse: Optional[TensorLayout] = None    # fp32 (batch, q head, sq), natural log
    round_scores: bool = False        # the reference computed the scores in the input dtype
    empty_row_nan: bool = True        # a row with every key masked: NaN (explicit softmax) or 0
    scratch_arg: str = "workspace"    # split-KV partials live here (NSPLIT > 1) ...
    scratch_offset: str = "0"         # ... from this float32 element on


@dataclass
class AttentionLowering:
    """What a Candidate needs from the segment: one source unit (its configuration inside), no
    candidate params, launches in order and the scratch bytes it uses from spec.scratch_offset
    (floats) on (0 without split-KV)."""
    sources: dict[str, str]
    params: dict
    launches: list[dict]
    scratch_bytes: str = "0"        # never needs zeroing: every slot read is written first
    notes: str = ""
    tunables: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)   # every #define of the unit (tunables included)


def _pad(d: int, granule: int) -> int:
    return (d + granule - 1) // granule * granule


def padded_dims(spec: AttentionSpec, dv_split: int = 1) -> tuple[int, int]:
    """(DQKP, DVP): head dims padded to the mma k granule; DVP also splits into dv_split equal
    chunks of whole granules (each CTA of a DV_SPLIT launch owns one chunk of O's columns)."""
    g = 8 if spec.q.dtype == "float32" else 16
    return _pad(spec.head_dim, g), _pad(spec.head_dim_v, g * dv_split)


def row_strides(spec: AttentionSpec, dv_split: int = 1) -> tuple[int, int]:
    """Shared-memory row strides (elements) of the Q/K and V tiles, as the .cu's QS and VS."""
    dqkp, dvp = padded_dims(spec, dv_split)
    dvc = dvp // dv_split
    if spec.q.dtype == "float32":
        return dqkp + 4, dvc + ((40 - dvc % 32) % 32)
    return dqkp + 8, dvc + 8


def smem_bytes(spec: AttentionSpec, params: dict) -> int:
    qs, vs = row_strides(spec, params.get("DV_SPLIT", 1))
    return (params["BLOCK_M"] * qs + params["STAGES"] * params["BLOCK_N"] * (qs + vs)) * DTYPE_BYTES[spec.q.dtype]


def check_spec(spec: AttentionSpec) -> None:
    if spec.q.dtype not in DTYPE_CODE or {spec.k.dtype, spec.v.dtype} != {spec.q.dtype}:
        raise AttentionSpecError(f"q/k/v dtypes {spec.q.dtype}/{spec.k.dtype}/{spec.v.dtype}: one of "
                                 f"{sorted(DTYPE_CODE)} for all three")
    if spec.o.dtype not in DTYPE_CODE:
        raise AttentionSpecError(f"output dtype {spec.o.dtype}")
    for name, t, n in (("q", spec.q, 4), ("k", spec.k, 4), ("v", spec.v, 4), ("o", spec.o, 4),
                       ("bias", spec.bias, 4), ("mask", spec.mask, 4), ("lse", spec.lse, 3)):
        if t is not None and len(t.strides) != n:
            raise AttentionSpecError(f"{name}: {n} strides, got {len(t.strides)}")
    if not (1 <= spec.head_dim <= MAX_HEAD_DIM and 1 <= spec.head_dim_v <= MAX_HEAD_DIM):
        raise AttentionSpecError(f"head dims {spec.head_dim}/{spec.head_dim_v}: 1..{MAX_HEAD_DIM}")
    if spec.group < 1:
        raise AttentionSpecError(f"group {spec.group} < 1")
    if spec.bias is not None and spec.bias.dtype not in DTYPE_CODE:
        raise AttentionSpecError(f"bias dtype {spec.bias.dtype}")
    if spec.mask is not None and spec.mask.dtype not in ("bool", "uint8"):
        raise AttentionSpecError(f"mask dtype {spec.mask.dtype}: bool")
    if spec.lse is not None and spec.lse.dtype != "float32":
        raise AttentionSpecError("lse: float32")


def default_params(spec: AttentionSpec, decode_like: Optional[bool] = None) -> dict:
    """A first point: 64-row tiles (4 warps), BLOCK_N by head dim and dtype, up to 4 kv splits
    (taken at run time only while the grid is small), 16-row tiles and up to 16 splits for
    decode-like shapes (a constant seq_q * group of at most 16 rows, unless told)."""
    if decode_like is None:
        sq = spec.seq_q.strip()
        decode_like = sq.isdigit() and int(sq) * spec.group <= 16
    dqkp, _ = padded_dims(spec)
    split = 1
    while padded_dims(spec, split)[1] // split > 256:   # O accumulator at most 256 columns per CTA
        split *= 2
    dvc = padded_dims(spec, split)[1] // split
    big = max(dqkp, dvc)
    if spec.q.dtype == "float32":
        bn = 32 if big <= 128 else 16
    else:
        bn = 64 if big <= 128 else 32
    p = {"BLOCK_M": 64, "BLOCK_N": bn, "STAGES": 2, "NSPLIT": 4, "DV_SPLIT": split}
    if decode_like:
        p.update(BLOCK_M=16, NSPLIT=16, STAGES=3)
    if dqkp > 256 and dvc > 128:
        p["NSPLIT"] = 1   # the split epilogue's registers spill next to a 256-wide accumulator
    while smem_bytes(spec, p) > SMEM_LIMIT and p["STAGES"] > 2:
        p["STAGES"] -= 1
    while smem_bytes(spec, p) > SMEM_LIMIT and p["BLOCK_M"] > 16:
        p["BLOCK_M"] //= 2
    while smem_bytes(spec, p) > SMEM_LIMIT and p["BLOCK_N"] > 16:
        p["BLOCK_N"] //= 2
    return p


def param_space(spec: AttentionSpec) -> list[dict]:
    """Tunables the offline search may try (each valid for the spec)."""
    out = []
    for bm in (16, 32, 64, 128):
        for bn in (16, 32, 64, 128):
            for st in (2, 3):
                for ns in (1, 2, 4, 8, 16):
                    for dvs in (1, 2, 4):
                        p = {"BLOCK_M": bm, "BLOCK_N": bn, "STAGES": st, "NSPLIT": ns, "DV_SPLIT": dvs}
                        try:
                            check_params(spec, p)
                        except AttentionSpecError:
                            continue
                        out.append(p)
    return out


def check_params(spec: AttentionSpec, params: dict) -> None:
    if not {"BLOCK_M", "BLOCK_N", "STAGES", "NSPLIT"} <= set(params) <= {"BLOCK_M", "BLOCK_N", "STAGES", "NSPLIT",
                                                                        "DV_SPLIT"}:
        raise AttentionSpecError("attention params: BLOCK_M, BLOCK_N, STAGES, NSPLIT (and DV_SPLIT)")
    bm, bn, st, ns = params["BLOCK_M"], params["BLOCK_N"], params["STAGES"], params["NSPLIT"]
    dvs = params.get("DV_SPLIT", 1)
    if dvs not in (1, 2, 4, 8):
        raise AttentionSpecError(f"DV_SPLIT={dvs}: 1, 2, 4 or 8")
    if bm not in (16, 32, 64, 128):
        raise AttentionSpecError(f"BLOCK_M={bm}: 16, 32, 64 or 128")
    if bn not in (16, 32, 64, 128):
        raise AttentionSpecError(f"BLOCK_N={bn}: 16, 32, 64 or 128")
    if not 2 <= st <= 4:
        raise AttentionSpecError(f"STAGES={st}: 2..4")
    if not 1 <= ns <= 64:
        raise AttentionSpecError(f"NSPLIT={ns}: 1..64")
    dqkp, dvp = padded_dims(spec, dvs)
    # register budget: the O accumulator and S tile per thread (fp32 words), measured limits
    if dvp // dvs // 2 + bn // 2 > (160 if spec.q.dtype == "float32" else 192):
        raise AttentionSpecError(f"BLOCK_N={bn} with head_dim_v {spec.head_dim_v}: too many registers")
    if smem_bytes(spec, params) > SMEM_LIMIT:
        raise AttentionSpecError(f"{params}: {smem_bytes(spec, params)} B of shared memory > {SMEM_LIMIT}")


def _p(e: str) -> str:
    return f"({e})"


def _tensor_args(t: TensorLayout) -> list[str]:
    return [t.arg, f"int64:{t.offset}"] + [f"int64:{s}" for s in t.strides]


def generate(spec: AttentionSpec, params: Optional[dict] = None, name: str = "attn") -> AttentionLowering:
    """The segment as one self-contained source unit `<name>.cu` (its #defines written into the
    text, kernels `<name>_fwd` and, when NSPLIT > 1, `<name>_combine`) and its launches with the
    tunables already substituted: two attention segments of one plan never share a name or a
    param, and `params` of the lowering stays empty. `config` holds every define (for the CPU model
    and for humans)."""
    if not name.isidentifier():
        raise AttentionSpecError(f"segment name {name!r}: a C identifier")
    check_spec(spec)
    params = dict(params or default_params(spec))
    check_params(spec, params)
    params.setdefault("DV_SPLIT", 1)
    dqkp, dvp = padded_dims(spec, params["DV_SPLIT"])
    defines = {
        "IN_DTYPE": DTYPE_CODE[spec.q.dtype], "O_DTYPE": DTYPE_CODE[spec.o.dtype],
        "BIAS_DTYPE": DTYPE_CODE[spec.bias.dtype] if spec.bias is not None else 0,
        "DQK": spec.head_dim, "DV": spec.head_dim_v, "DQKP": dqkp, "DVP": dvp, "GROUP": spec.group,
        "CAUSAL": int(spec.causal), "WINDOW": int(spec.window is not None),
        "SOFTCAP": int(spec.softcap is not None), "HAS_BIAS": int(spec.bias is not None),
        "HAS_MASK": int(spec.mask is not None), "MASK_KEEP": int(spec.mask_keep),
        "HAS_LSE": int(spec.lse is not None), "ROUND_S": int(spec.round_scores),
        "EMPTY_NAN": int(spec.empty_row_nan),
    }
    defines["SIMPLE_MOD"] = int(not (spec.bias or spec.mask or spec.softcap or spec.round_scores))
    config = {**defines, **params}
    BM, BN, NS, DVS = params["BLOCK_M"], params["BLOCK_N"], params["NSPLIT"], params["DV_SPLIT"]

    b, h, sq = _p(spec.batch), _p(spec.heads), _p(spec.seq_q)
    args = (_tensor_args(spec.q) + _tensor_args(spec.k) + _tensor_args(spec.v) + _tensor_args(spec.o)
            + [f"int32:{spec.seq_q}", f"int32:{spec.seq_k}", f"float32:{spec.scale}",
               f"int32:{spec.causal_offset if spec.causal or spec.window else '0'}",
               f"int32:{spec.window or '0'}", f"float32:{spec.softcap or '1.0'}"])
    if spec.bias is not None:
        args += _tensor_args(spec.bias)
    if spec.mask is not None:
        args += _tensor_args(spec.mask)
    if spec.lse is not None:
        args += _tensor_args(spec.lse)
    split = NS > 1
    kv_heads = f"{h} // {spec.group}"
    tiles = f"ceil_div({sq} * {spec.group}, {BM}) * {DVS}"
    # splits at run time: up to NSPLIT, no more than half the kv blocks, and only while the grid
    # is short of SPLIT_TARGET_CTAS (prefill shapes get 1: no partials, the combine returns at once)
    nsplit = (f"max(1, min({NS}, ceil_div({_p(spec.seq_k)}, {2 * BN}), "
              f"ceil_div({SPLIT_TARGET_CTAS}, {tiles} * ({kv_heads}) * {b})))") if split else "1"
    if split:
        args += [spec.scratch_arg, f"int64:{spec.scratch_offset}", f"int32:{nsplit}"]
    fwd = {"kernel": f"{name}_fwd", "grid": [tiles, kv_heads, f"{b} * {nsplit}"],
           "block": [str(BM // 16 * 32)], "smem": str(smem_bytes(spec, params)), "args": args}
    launches = [fwd]
    scratch = "0"
    if split:
        cargs = (_tensor_args(spec.o) + [spec.scratch_arg, f"int64:{spec.scratch_offset}",
                                         f"int32:{spec.batch}", f"int32:{spec.heads}", f"int32:{spec.seq_q}",
                                         f"int32:{nsplit}"])
        if spec.lse is not None:
            cargs += _tensor_args(spec.lse)
        # one idle CTA when the launch picked 1 split (a grid cannot be empty)
        launches.append({"kernel": f"{name}_combine",
                         "grid": [f"max(1, ceil_div({b} * {h} * {sq}, {COMBINE_WARPS}) * min(1, {nsplit} - 1))"],
                         "block": [str(COMBINE_WARPS * 32)], "smem": "0", "args": cargs})
        # at least 16 bytes: the launcher refuses a 'workspace' argument with no workspace
        scratch = f"max(16, min(1, {nsplit} - 1) * {nsplit} * {b} * {h} * {sq} * ({spec.head_dim_v} + 1) * 4)"
    return AttentionLowering(sources={f"{name}.cu": source_text(config, name)}, params={},
                             launches=launches, scratch_bytes=scratch, tunables=params, config=config,
                             notes=f"attention segment {name} {params}")


def source_text(config: dict, name: str) -> str:
    """kernels_cuda/compiler/attention_flash.cu with `config` as #defines after its #include block
    (the toolkit headers never see them) and its kernels renamed `<name>_fwd` / `<name>_combine`."""
    text = KERNEL_FILE.read_text()
    anchor = "#include <cuda/std/cstdint>\n"
    if anchor not in text:
        raise AttentionSpecError("attention_flash.cu: include block not found")
    defs = "".join(f"#define {k} {int(v) if isinstance(v, bool) else v}\n" for k, v in config.items())
    text = text.replace(anchor, anchor + "// segment configuration (solforge/compiler/templates/attention.py)\n" + defs, 1)
    return text.replace("attn_fwd(", f"{name}_fwd(").replace("attn_combine(", f"{name}_combine(")


def rebind(spec: AttentionSpec, where: dict, scratch: Optional[tuple] = None) -> AttentionSpec:
    """The spec with each tensor's `arg` (a graph value's name, as the matcher writes it) replaced
    by where[name] = (launch argument, element offset expression): a graph input keeps its name
    with offset "0"; an intermediate the plan keeps in the workspace becomes ("workspace",
    "<its offset in elements>"). `scratch` = ("workspace", float offset) places the split-KV
    partials. Names not in `where` stay as they are."""
    from dataclasses import replace

    def one(t: Optional[TensorLayout]) -> Optional[TensorLayout]:
        if t is None or t.arg not in where:
            return t
        arg, off = where[t.arg]
        return replace(t, arg=arg, offset=t.offset if str(off) == "0" else f"({t.offset}) + ({off})")

    out = replace(spec, q=one(spec.q), k=one(spec.k), v=one(spec.v), o=one(spec.o), bias=one(spec.bias),
                  mask=one(spec.mask), lse=one(spec.lse))
    if scratch is not None:
        out = replace(out, scratch_arg=scratch[0], scratch_offset=str(scratch[1]))
    return out
