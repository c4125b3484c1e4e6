"""Inputs for a counting run: real small values where they drive control flow, meta tensors elsewhere.

- Scalars come from the workload.
- `custom` inputs: the definition's custom_inputs_entrypoint is called with device=cpu inside the
  HybridMode (its own ops are not counted), so its big random float tensors become meta tensors and its
  index tensors stay real.
- `random` float tensors: meta when big, real standard-normal when small.
- `random` integer tensors: SOL-ExecBench draws them uniformly in [0, 64) (io.py), small real values.
- `safetensors` inputs (FlashInfer-Bench ragged / paged batches: indptr, indices, routing logits): the
  blobs are not shipped with the dataset, so valid ones are synthesised from the axes: indptr arrays
  split the total evenly over the batch (len_indptr - 1 sequences), page indices are a permutation of
  the pages, float tensors are random.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..problem.dtypes import to_torch
from ..problem.workload import (CustomInput, RandomInput, ResolvedWorkload, SafetensorsInput,
                                ScalarInput)
from .trace import META, SMALL_NUMEL

_FLOAT_KINDS = ("float", "float8", "float4")


def _meta_or_random(shape, dtype: torch.dtype) -> torch.Tensor:
    n = math.prod(shape)
    is_float = dtype.is_floating_point or str(dtype).startswith("torch.float4")
    if is_float:
        if n > SMALL_NUMEL:
            return torch.empty(shape, dtype=dtype, device=META)
        try:
            return torch.randn(shape, dtype=torch.float32).to(dtype)
        except (RuntimeError, TypeError):
            return torch.randint(0, 256, shape, dtype=torch.uint8).view(dtype)
    if dtype == torch.bool:
        return torch.rand(shape) < 0.5
    return torch.randint(0, 64, shape, dtype=torch.int64).to(dtype)


def _even_indptr(n_seq: int, total: int) -> torch.Tensor:
    """[0, ..., total] with n_seq nearly equal segments."""
    if n_seq <= 0:
        return torch.zeros(1, dtype=torch.int64)
    return torch.div(torch.arange(n_seq + 1, dtype=torch.int64) * total, n_seq, rounding_mode="floor")


def synth_safetensor(name: str, shape, dtype: torch.dtype, axes: dict[str, int]) -> torch.Tensor:
    """A valid stand-in for a FlashInfer-Trace blob tensor, from the workload's axes."""
    n = math.prod(shape) if shape is not None else 1
    lname = name.lower()
    if "indptr" in lname and shape is not None and len(shape) == 1:
        n_seq = shape[0] - 1
        if lname.startswith("qo") or lname.startswith("q_"):
            total = axes.get("total_q", axes.get("num_tokens", axes.get("batch_size", n_seq)))
        else:
            total = axes.get("num_kv_indices", axes.get("total_kv", axes.get("num_pages", n_seq)))
        return _even_indptr(n_seq, int(total)).to(dtype)
    if "indices" in lname and shape is not None and len(shape) == 1:
        pages = int(axes.get("num_pages", n))
        idx = torch.randperm(max(pages, n))[:n] if pages >= n else torch.arange(n) % max(1, pages)
        return idx.to(dtype)
    if "lens" in lname or "len" == lname:
        return torch.full(tuple(shape or ()), max(1, int(axes.get("seq_len", 1))), dtype=dtype)
    return _meta_or_random(tuple(shape or ()), dtype)


def build_inputs(wl: ResolvedWorkload, module: dict[str, Any]) -> dict[str, Any]:
    """Positional-by-name inputs for `run`, as the workload describes them."""
    defn = wl.definition
    srcs = wl.workload.inputs
    if defn.custom_inputs_entrypoint and any(isinstance(s, CustomInput) for s in srcs.values()):
        fn = module[defn.custom_inputs_entrypoint]
        made = fn(wl.axes_and_scalars(), torch.device("cpu"))
        out = {}
        for k, spec in defn.inputs.items():
            if k in made:
                out[k] = made[k]
            elif isinstance(srcs.get(k), ScalarInput):
                out[k] = srcs[k].value
            else:
                raise KeyError(f"{defn.custom_inputs_entrypoint} did not return input {k!r}")
        return out
    out: dict[str, Any] = {}
    for k, spec in defn.inputs.items():
        src = srcs[k]
        if isinstance(src, ScalarInput):
            out[k] = src.value
            continue
        shape = wl.input_shapes[k]
        dtype = to_torch(spec.dtype)
        if spec.is_scalar:
            out[k] = 1.0 if "float" in spec.dtype else 1
        elif isinstance(src, SafetensorsInput):
            out[k] = synth_safetensor(k, shape, dtype, wl.axes)
        else:  # RandomInput (and anything else: treat as random)
            assert isinstance(src, (RandomInput, CustomInput)) or True
            out[k] = _meta_or_random(tuple(shape), dtype)
    return out
