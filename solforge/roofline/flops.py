"""FLOPs of one aten op, and which math unit does them. Pure functions of shapes and dtypes.

Rules (docs/roofline_validation.md repeats them):
- matmul family (mm, addmm, bmm, baddbmm, addbmm, mv, dot, _scaled_mm, grouped mm): 2*M*N*K on the
  tensor-core unit of the operand dtype (bf16/fp16/fp8/fp4/fp64; int8 at the fp8 rate); fp32 operands
  go to `FP32_MATMUL_UNIT` (TF32 tensor cores: the speed of light is what a correct kernel could reach,
  and every tolerance in the dataset admits TF32).
- convolution: 2 * N * (output spatial positions) * weight.numel() (transposed: input positions);
  convolution_backward: the same per requested gradient.
- fused attention ops (when torch keeps SDPA whole): 2*B*H*Sq*Sk*(D+Dv) on the operand's tensor-core unit,
  plus 5 SIMT FLOPs per score for the softmax.
- softmax / log-softmax: 5 per element (max, subtract, exp, sum, divide); their backward: 3 per element.
- normalisations (layer, group, batch, RMS): 5 per input element forward, 10 backward.
- reductions (sum, mean, amax, var, norm, cumsum, topk, sort, ...): 1 per input element.
- pointwise ops (aten's `pointwise` tag): 1 per output element, transcendental or not: on these GPUs the
  SFU issues alongside the FMA pipes, and a fused kernel is memory-bound long before either saturates.
- everything else (views, copies, dtype casts, cat, gather/scatter/index) is data movement: 0 FLOPs.
Only ops that touch floating-point data count towards the SIMT unit: integer and boolean arithmetic is
index bookkeeping.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

FP32_MATMUL_UNIT = "tf32_tc"

_TC_UNIT = {
    torch.bfloat16: "bf16_tc",
    torch.float16: "fp16_tc",
    torch.float32: FP32_MATMUL_UNIT,
    torch.float64: "fp64_tc",
    torch.int8: "fp8_tc",
    torch.uint8: "fp8_tc",
}
for _n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"):
    if hasattr(torch, _n):
        _TC_UNIT[getattr(torch, _n)] = "fp8_tc"
_FP4 = getattr(torch, "float4_e2m1fn_x2", None)
if _FP4 is not None:
    _TC_UNIT[_FP4] = "fp4_tc"

SIMT = "fp32_simt"

_MATMUL = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "mv", "addmv", "dot", "vdot", "_int_mm",
           "_scaled_mm", "_scaled_grouped_mm", "_grouped_mm"}
_CONV = {"convolution", "_convolution", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
         "conv_transpose2d", "conv_transpose3d", "cudnn_convolution", "_slow_conv2d_forward",
         "mkldnn_convolution", "slow_conv3d_forward", "slow_conv_transpose2d", "slow_conv_dilated2d"}
_ATTN = {"_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention",
         "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
         "_flash_attention_forward", "_efficient_attention_forward", "_scaled_dot_product_fused_attention_overrideable"}
_SOFTMAX = {"_softmax", "_log_softmax", "_safe_softmax", "softmax", "log_softmax"}
_SOFTMAX_BWD = {"_softmax_backward_data", "_log_softmax_backward_data"}
_NORM = {"native_layer_norm", "native_group_norm", "native_batch_norm", "_native_batch_norm_legit",
         "_native_batch_norm_legit_no_training", "_native_batch_norm_legit_functional", "_fused_rms_norm",
         "rms_norm", "layer_norm", "group_norm", "batch_norm", "instance_norm"}
_NORM_BWD = {"native_layer_norm_backward", "native_group_norm_backward", "native_batch_norm_backward",
             "_fused_rms_norm_backward"}
_REDUCE = {"sum", "mean", "amax", "amin", "max", "min", "prod", "var", "std", "var_mean", "std_mean",
           "norm", "linalg_vector_norm", "logsumexp", "argmax", "argmin", "cumsum", "cumprod", "cummax",
           "cummin", "logcumsumexp", "topk", "sort", "nansum", "nanmean", "aminmax", "median", "mode",
           "kthvalue", "all", "any"}


# tagged pointwise by aten but pure data movement (the rules above: copies and casts are 0 FLOPs)
_COPIES = {"clone", "_to_copy", "copy", "copy_", "contiguous", "lift_fresh_copy", "to", "_copy_from",
           "_copy_from_and_resize"}


def tc_unit(dtype: torch.dtype) -> str:
    return _TC_UNIT.get(dtype, SIMT)


def _numel(t) -> int:
    return t.numel() if isinstance(t, torch.Tensor) else 0


def _is_float(t) -> bool:
    return isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())


def _first_tensor(xs) -> Optional[torch.Tensor]:
    for x in xs:
        if isinstance(x, torch.Tensor):
            return x
    return None


def _matmul_k(name: str, args) -> tuple[int, int]:
    """(K, extra batch factor) of a matmul-family op; out.numel() * K * 2 * factor is its FLOPs."""
    if name in ("mm", "bmm", "_int_mm", "mv", "dot", "vdot"):
        a = args[0]
    elif name in ("addmm", "baddbmm", "addmv"):
        a = args[1]
    elif name == "addbmm":
        a = args[1]
        return a.shape[-1], a.shape[0]
    else:  # _scaled_mm and grouped variants: (a, b, ...)
        a = args[0]
    k = a.shape[-1] if a.dim() else 1
    if _FP4 is not None and a.dtype == _FP4:
        k *= 2  # two FP4 values per stored element
    return k, 1


def matmul_operands(name: str, args):
    """(a, b) of a matmul-family op, or None for any other op."""
    if name not in _MATMUL or len(args) < 2:
        return None
    if name in ("addmm", "baddbmm", "addbmm", "addmv"):
        return (args[1], args[2]) if len(args) > 2 else None
    return args[0], args[1]


_POINTWISE_TAG: dict = {}  # op -> whether aten tags it pointwise (func.tags builds a list per call)


def op_flops(func, args, kwargs, out, matmul_dtype=None, name=None) -> list[tuple[str, float]]:
    """[(unit, flops)] for one executed aten op (args/out are real or meta tensors).

    matmul_dtype: the dtype a matmul's operands were dequantised from (fp8/fp4), which sets its unit.
    name: the op's packet name, when the caller has it."""
    if name is None:
        name = func._overloadpacket.__name__
    if name.endswith("_") and name[:-1] in _REDUCE | _SOFTMAX:
        name = name[:-1]
    outs = out if isinstance(out, (tuple, list)) else (out,)
    o = _first_tensor(outs)
    if name in _MATMUL:
        if o is None:
            return []
        a = args[0] if name not in ("addmm", "baddbmm", "addbmm", "addmv") else args[1]
        if name in ("_scaled_grouped_mm", "_grouped_mm") and o.dim() >= 2 and a.dim() >= 2:
            k = a.shape[-1] * (2 if _FP4 is not None and a.dtype == _FP4 else 1)
            return [(tc_unit(a.dtype), 2.0 * o.numel() * k)]
        k, factor = _matmul_k(name, args)
        return [(tc_unit(matmul_dtype or a.dtype), 2.0 * o.numel() * k * factor)]
    if name in _CONV:
        return _conv_flops(args, o)
    if name == "convolution_backward":
        return _conv_bwd_flops(args)
    if name in _ATTN:
        q, k, v = args[0], args[1], args[2]
        b_h_sq = q.numel() // q.shape[-1]
        sk = k.shape[-2]
        return [(tc_unit(q.dtype), 2.0 * b_h_sq * sk * (q.shape[-1] + v.shape[-1])),
                (SIMT, 5.0 * b_h_sq * sk)]
    x = _first_tensor(args)
    if not (_is_float(x) or _is_float(o)):
        return []
    if name in _SOFTMAX:
        return [(SIMT, 5.0 * _numel(x))]
    if name in _SOFTMAX_BWD:
        return [(SIMT, 3.0 * _numel(x))]
    if name in _NORM:
        return [(SIMT, 5.0 * _numel(x))]
    if name in _NORM_BWD:
        return [(SIMT, 10.0 * _numel(args[1] if len(args) > 1 else x))]
    if name in _REDUCE:
        n = _numel(x)
        if name in ("topk", "sort"):
            n *= max(1.0, math.log2(max(2, x.shape[-1] if x.dim() else 1)))
        return [(SIMT, float(n))]
    if name in ("scatter_add", "index_add", "scatter_reduce", "index_reduce", "embedding_dense_backward"):
        src = args[-1] if isinstance(args[-1], torch.Tensor) else _first_tensor(args[1:])
        return [(SIMT, float(_numel(src)))]
    if name == "index_put" and len(args) > 3 and args[3]:
        return [(SIMT, float(_numel(args[2])))]
    pw = _POINTWISE_TAG.get(func)
    if pw is None:
        pw = _POINTWISE_TAG[func] = torch.Tag.pointwise in func.tags
    if pw and name not in _COPIES and not name.endswith("_copy"):
        return [(SIMT, float(_numel(o)))]
    return []


def _conv_flops(args, o) -> list[tuple[str, float]]:
    x, w = args[0], args[1]
    if o is None or w.dim() < 3:
        return []
    transposed = bool(args[6]) if len(args) > 6 and isinstance(args[6], bool) else False
    n = x.shape[0]
    positions = math.prod(x.shape[2:]) if transposed else math.prod(o.shape[2:])
    return [(tc_unit(x.dtype), 2.0 * n * positions * w.numel())]


def _conv_bwd_flops(args) -> list[tuple[str, float]]:
    # convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation,
    #                      transposed, output_padding, groups, output_mask)
    go, x, w = args[0], args[1], args[2]
    transposed = bool(args[7]) if len(args) > 7 else False
    mask = args[10] if len(args) > 10 else [True, True, True]
    positions = math.prod(x.shape[2:]) if transposed else math.prod(go.shape[2:])
    fwd = 2.0 * x.shape[0] * positions * w.numel()
    tc = fwd * (int(bool(mask[0])) + int(bool(mask[1])))
    out = [(tc_unit(x.dtype), tc)]
    if mask[2]:
        out.append((SIMT, float(go.numel())))
    return out
