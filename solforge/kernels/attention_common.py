"""What the GQA attention families (attention_decode, attention_prefill, attention_ragged) share:
the matcher, and their kernel source with the warp-level helpers (kernels_cuda/common/attention_mma.cuh)
in front.

The references of these problems loop over requests with `.item()` on their index tensors, so
they cannot be traced on fake tensors; the matcher reads their structure in two steps instead:
- roles from the definition's dtypes and shapes, never names: q the bf16 [tokens, H_qo, D] input
  of the output's shape, k and v two bf16 inputs of one shape ([tokens, H_kv, D], or [pages, 1,
  H_kv, D] paged), the int32 vectors (indptrs of one length, page indices), one float scalar (the
  softmax scale); outputs a bf16 [tokens, H_qo, D] one and an fp32 [tokens, H_qo] one (the lse);
- behaviour: the reference runs on a few small requests (real CPU tensors) for each role
  assignment the shapes leave open, and must give what the kernel computes: per request and q head
  softmax(q k^T * scale) v over the request's kv rows (GQA: q head h reads kv head h // (H_qo/H_kv)),
  causal aligned to the end of the kv sequence for prefill, lse in base 2.
"""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple, Optional, Union

from ..problem.definition import Definition
from .base import const_value, read_source, shape_dims
from .structure import definition_key

DECODE, PAGED_PREFILL, RAGGED_PREFILL = "decode", "paged_prefill", "ragged_prefill"
_PROBE_SCALE = 0.0625                      # exact in binary: a wrong use of the scale shows
_cache: dict = {}


class GqaShapes(NamedTuple):
    q: list[Union[str, int]]      # q's dims: [tokens, H_qo, D]
    k: list[Union[str, int]]      # k's (= v's) dims: [tokens, H_kv, D] or [pages, 1, H_kv, D]
    h_qo: int
    h_kv: int
    head_dim: int
    names: dict                   # role -> input/output name: q k v qo_indptr kv_indptr kv_indices scale out lse


def match_gqa(defn: Definition, kind: str) -> Optional[GqaShapes]:
    """The GQA attention of `kind` (DECODE, PAGED_PREFILL, RAGGED_PREFILL) with D = 128, page size 1
    and H_kv dividing H_qo, or None."""
    key = (definition_key(defn), kind)
    if key not in _cache:
        _cache[key] = _match(defn, kind)
    return _cache[key]


def _match(defn: Definition, kind: str) -> Optional[GqaShapes]:
    kv_rank = 3 if kind == RAGGED_PREFILL else 4
    n_int = 2 if kind in (DECODE, RAGGED_PREFILL) else 3
    outs = list(defn.outputs)
    if len(outs) != 2:
        return None
    out = next((o for o in outs if defn.outputs[o].dtype == "bfloat16"), None)
    lse = next((o for o in outs if defn.outputs[o].dtype == "float32"), None)
    if out is None or lse is None:
        return None
    os_, ls = shape_dims(defn, out), shape_dims(defn, lse)
    if len(os_) != 3 or ls != os_[:2]:
        return None
    scalars = [k for k, v in defn.inputs.items() if v.is_scalar]
    ints = [k for k, v in defn.inputs.items() if not v.is_scalar and v.dtype == "int32"]
    bf16 = [k for k, v in defn.inputs.items() if not v.is_scalar and v.dtype == "bfloat16"]
    if len(scalars) != 1 or "float" not in defn.inputs[scalars[0]].dtype or len(ints) != n_int or \
            len(bf16) != 3 or len(defn.inputs) != 4 + n_int:
        return None
    if any(len(shape_dims(defn, i)) != 1 for i in ints):
        return None
    qs = [b for b in bf16 if shape_dims(defn, b) == os_]
    if len(qs) != 1:
        return None
    q = qs[0]
    k, v = [b for b in bf16 if b != q]
    ks = shape_dims(defn, k)
    if len(ks) != kv_rank or shape_dims(defn, v) != ks:
        return None
    h_qo, d = const_value(defn, os_[1]), const_value(defn, os_[2])
    h_kv, dk = const_value(defn, ks[-2]), const_value(defn, ks[-1])
    page = const_value(defn, ks[1]) if kv_rank == 4 else 1
    if None in (h_qo, d, page, h_kv, dk) or page != 1 or d != 128 or dk != d or h_kv <= 0 or h_qo % h_kv:
        return None
    base = {"q": q, "scale": scalars[0], "out": out, "lse": lse}
    options = []
    for kk, vv in ((k, v), (v, k)):
        for order in itertools.permutations(ints):
            names = {**base, "k": kk, "v": vv}
            if kind == DECODE:
                names.update(kv_indptr=order[0], kv_indices=order[1])
            elif kind == RAGGED_PREFILL:
                names.update(qo_indptr=order[0], kv_indptr=order[1])
            else:
                names.update(qo_indptr=order[0], kv_indptr=order[1], kv_indices=order[2])
            if "qo_indptr" in names and shape_dims(defn, names["qo_indptr"]) != shape_dims(defn, names["kv_indptr"]):
                continue
            options.append(names)
    found = _probe_in_sandbox(defn, kind, options, h_qo, h_kv, d) if options else None
    return GqaShapes(os_, ks, h_qo, h_kv, d, found) if found is not None else None


def _probe_in_sandbox(defn: Definition, kind: str, options: list, h_qo: int, h_kv: int, d: int):
    """The first role assignment under which the reference computes the kernel's attention, or None.
    The reference is a dataset's code: the probes run in one sandboxed process (solforge.sandbox)."""
    from ..sandbox import SandboxError, run_python

    try:
        out = run_python(__name__, "probe_entry", {"definition": defn.model_dump(mode="json"), "kind": kind,
                                                    "options": options, "h_qo": h_qo, "h_kv": h_kv, "d": d},
                         timeout_s=120.0)
    except SandboxError:
        return None
    i = out.get("index")
    return options[i] if isinstance(i, int) and 0 <= i < len(options) else None


def probe_entry(payload: dict) -> dict:
    """Sandbox entry point: {"index": the first option the reference agrees with, or None}."""
    defn = Definition.model_validate(payload["definition"])
    for i, names in enumerate(payload["options"]):
        if _probe(defn, payload["kind"], names, payload["h_qo"], payload["h_kv"], payload["d"]):
            return {"index": i}
    return {"index": None}


def _probe(defn: Definition, kind: str, names: dict, h_qo: int, h_kv: int, d: int) -> bool:
    """Does the reference, given these roles, compute the kernel's attention on small requests?
    Runs the reference: call it only inside the sandbox (probe_entry)."""
    try:
        import torch

        g = torch.Generator().manual_seed(0)
        q_lens, kv_lens = ([1, 1], [3, 5]) if kind == DECODE else ([2, 3], [4, 3])
        tq, tkv = sum(q_lens), sum(kv_lens)
        pages = tkv + 3
        rows = torch.randperm(pages, generator=g)[:tkv] if kind != RAGGED_PREFILL else torch.arange(tkv)
        q = torch.randn(tq, h_qo, d, generator=g).to(torch.bfloat16)
        kv_shape = (tkv, h_kv, d) if kind == RAGGED_PREFILL else (pages, 1, h_kv, d)
        k = torch.randn(*kv_shape, generator=g).to(torch.bfloat16)
        v = torch.randn(*kv_shape, generator=g).to(torch.bfloat16)
        qo_indptr = torch.tensor([0] + list(itertools.accumulate(q_lens)), dtype=torch.int32)
        kv_indptr = torch.tensor([0] + list(itertools.accumulate(kv_lens)), dtype=torch.int32)
        inputs = {names["q"]: q, names["k"]: k, names["v"]: v, names["scale"]: _PROBE_SCALE,
                  names["kv_indptr"]: kv_indptr}
        if "qo_indptr" in names:
            inputs[names["qo_indptr"]] = qo_indptr
        if "kv_indices" in names:
            inputs[names["kv_indices"]] = rows.to(torch.int32)
        ns: dict = {}
        exec(compile(defn.reference, "<reference>", "exec"), ns)
        with torch.no_grad():
            res = ns["run"](**inputs)
        res = list(res) if isinstance(res, (list, tuple)) else [res]
        got = dict(zip(defn.outputs, res))
        out, lse = got[names["out"]], got[names["lse"]]
        # what the kernel computes
        kf = k.float().reshape(-1, h_kv, d)[rows.long()]
        vf = v.float().reshape(-1, h_kv, d)[rows.long()]
        want_o = torch.zeros(tq, h_qo, d)
        want_l = torch.full((tq, h_qo), -math.inf)
        heads = torch.arange(h_qo) // (h_qo // h_kv)
        for b in range(len(q_lens)):
            q0, q1 = int(qo_indptr[b]), int(qo_indptr[b + 1])
            k0, k1 = int(kv_indptr[b]), int(kv_indptr[b + 1])
            kb, vb = kf[k0:k1][:, heads], vf[k0:k1][:, heads]          # [kv, H_qo, D]
            s = torch.einsum("qhd,khd->qhk", q[q0:q1].float(), kb) * _PROBE_SCALE
            delta = (k1 - k0) - (q1 - q0)
            mask = torch.arange(k1 - k0)[None, :] < (torch.arange(q1 - q0)[:, None] + 1 + delta)
            s = s.masked_fill(~mask[:, None, :], -math.inf)
            want_l[q0:q1] = torch.logsumexp(s, -1) / math.log(2.0)
            want_o[q0:q1] = torch.einsum("qhk,khd->qhd", torch.softmax(s, -1), vb)
        return (tuple(out.shape) == tuple(want_o.shape) and out.dtype == torch.bfloat16 and
                lse.dtype == torch.float32 and tuple(lse.shape) == tuple(want_l.shape) and
                torch.allclose(out.float(), want_o.to(torch.bfloat16).float(), atol=2e-2, rtol=2e-2) and
                torch.allclose(lse, want_l, atol=1e-3, rtol=1e-3))
    except Exception:  # noqa: BLE001 - a reference that fails on these roles does not match them
        return False


def kernel_source(family_dir: str, filename: str) -> str:
    """kernels_cuda/<family_dir>/<filename> with common/attention_mma.cuh (swz, cp.async, ldmatrix,
    mma.sync, ex2, pack_bf16) prepended: the one source unit of the candidate."""
    return read_source("common", "attention_mma.cuh") + "\n" + read_source(family_dir, filename)
