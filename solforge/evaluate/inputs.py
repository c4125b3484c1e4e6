"""Inputs for one workload: `random` (dtype-appropriate, never all zeros, shaped by name so that
references stay finite), `scalar`, `custom` (the definition's entrypoint) and `safetensors`.

The name heuristics follow SOL-ExecBench's io.py in spirit (weights scaled by fan-in, positive norm
weights, masks, rope tables, positive statistics, SSM decays, softmax-like tensors) with one change:
nothing degenerate. Norm weights are positive but not all ones and norm biases are small but not all
zeros, so a kernel that ignores them fails.

FlashInfer-Bench workloads name safetensors blobs (qo_indptr, kv_indptr, kv_indices, routing logits...)
that are not shipped. When a blob is missing, `synthesize_missing` builds valid values from the
workload's axes (monotone indptrs ending at the totals, distinct page indices in range) and says so.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from ..problem.dtypes import to_torch
from ..problem.workload import CustomInput, RandomInput, SafetensorsInput, ScalarInput

_LOW_FLOATS = ("float8_e4m3fn", "float8_e5m2", "float4_e2m1fn_x2", "float4_e2m1")
_INT_RANGE = {torch.int8: (-128, 128), torch.int16: (-1024, 1024), torch.int32: (-1024, 1024),
              torch.int64: (-1024, 1024), torch.uint8: (0, 256)}


def seed_for(uuid: str, round_index: int, salt: str = "") -> int:
    """A stable 63-bit seed per (workload, round): re-running reproduces the inputs."""
    h = hashlib.sha256(f"{uuid}/{round_index}/{salt}".encode()).digest()
    return int.from_bytes(h[:8], "little") & ((1 << 63) - 1)


# ── name heuristics ──────────────────────────────────────────────────────────────────────────────
_WEIGHT_SUFFIXES = ("_weight", "_weights", "_proj", "_projs", "_weight_matrix")
_NORM_PREFIXES = ("norm", "layernorm", "_norm", "_layernorm", "ln", "rmsnorm")


def _base(name: str) -> str:
    return name.rstrip("0123456789")


def is_norm_weight(name: str) -> bool:
    b = _base(name)
    if b in ("norm_weight", "gamma", "ln_weight"):
        return True
    return b.endswith("_weight") and b[: -len("_weight")].rstrip("0123456789_").endswith(
        ("norm", "layernorm", "ln"))


def is_norm_bias(name: str) -> bool:
    b = _base(name)
    if b in ("norm_bias", "beta", "ln_bias"):
        return True
    return b.endswith("_bias") and b[: -len("_bias")].rstrip("0123456789_").endswith(
        ("norm", "layernorm", "ln"))


def is_weight_matrix(name: str, shape: tuple) -> bool:
    if len(shape) < 2:
        return False
    b = _base(name)
    return b == "weight" or b.endswith(_WEIGHT_SUFFIXES) or name.endswith(_WEIGHT_SUFFIXES)


def _desc(description: Optional[str]) -> str:
    return (description or "").lower()


def is_causal_mask(name: str, shape: tuple, description: Optional[str]) -> bool:
    if len(shape) < 2 or shape[-1] != shape[-2]:
        return False
    d = _desc(description)
    return name in ("attention_mask", "causal_mask", "attn_mask") or (
        "mask" in d and "causal" in d)


def is_binary_mask(name: str, description: Optional[str]) -> bool:
    if name in ("x_mask", "text_mask", "aspect_ratio_mask", "drop_mask", "attention_mask",
                "dropout_mask", "padding_mask"):
        return True
    d = _desc(description)
    return name.endswith("_mask") and any(k in d for k in ("binary", "{0, 1}", "0 or 1", "1.0 for",
                                                           "0.0 for", "keep"))


def is_rope_table(name: str) -> Optional[str]:
    if name in ("cos", "cos_cached", "rope_cos", "freqs_cos", "cos_emb"):
        return "cos"
    if name in ("sin", "sin_cached", "rope_sin", "freqs_sin", "sin_emb"):
        return "sin"
    return None


def is_positive(name: str) -> bool:
    b = _base(name)
    return b in ("rstd", "std", "variance", "var", "scale", "scales", "temperature", "dt_bias") \
        or b.endswith(("_rstd", "_std", "_variance", "_var", "_scale", "_scales"))


def is_ssm_decay(name: str) -> bool:
    return name in ("A", "A_log", "A_cumsum", "g", "dA_cumsum")


def is_softmax_like(name: str, description: Optional[str]) -> bool:
    d = _desc(description)
    return name in ("attn_weights", "attention_weights", "routing_weights", "probs", "attn_probs") \
        or ("softmax" in d and ("output" in d or "probabilities" in d))


# ── random tensors ───────────────────────────────────────────────────────────────────────────────
def _randn(shape, dtype, device, g):
    return torch.randn(shape, dtype=torch.float32, device=device, generator=g).to(dtype)


def _uniform(shape, lo, hi, dtype, device, g):
    t = torch.rand(shape, dtype=torch.float32, device=device, generator=g)
    return (t * (hi - lo) + lo).to(dtype)


# A tensor of more elements than this is made in slices along its first dim: each value is drawn
# in float32 and scaled before its cast, so a whole 22 GB bf16 weight would take two 45 GB float32
# temporaries on the way, more than the inputs themselves on a 141 GB GPU.
CHUNK_ELEMENTS = 1 << 28


def random_tensor(name: str, shape: tuple, dtype_name: str, device, g: torch.Generator,
                  description: Optional[str] = None, sampling: bool = False) -> torch.Tensor:
    """One random input. Never all zeros (a zero tensor hides unwritten outputs and bad indexing).
    Over CHUNK_ELEMENTS, made slice by slice along dim 0 (every rule below draws per element or
    along the last dim), the same values for the same generator state."""
    shape = tuple(int(s) for s in shape)
    n = math.prod(shape)
    if n <= CHUNK_ELEMENTS or len(shape) < 2 or shape[0] < 2 or \
            (is_causal_mask(name, shape, description) and len(shape) < 3):
        return _random_whole(name, shape, dtype_name, device, g, description, sampling)
    rows = max(1, CHUNK_ELEMENTS // (n // shape[0]))
    out = None
    for i in range(0, shape[0], rows):
        part = _random_whole(name, (min(i + rows, shape[0]) - i,) + shape[1:], dtype_name, device,
                             g, description, sampling)
        if out is None:   # the dtype and device the rules give
            out = torch.empty(shape, dtype=part.dtype, device=part.device)
        out[i:i + part.shape[0]] = part
    return out


def _random_whole(name: str, shape: tuple, dtype_name: str, device, g: torch.Generator,
                  description: Optional[str] = None, sampling: bool = False) -> torch.Tensor:
    dtype = to_torch(dtype_name)
    if dtype_name in ("float4_e2m1fn_x2", "float4_e2m1"):
        # Every nibble of E2M1 is a finite value: random bytes are valid packed FP4.
        hi = 256 if dtype_name == "float4_e2m1fn_x2" else 16
        raw = torch.randint(0, hi, shape, dtype=torch.uint8, device=device, generator=g)
        return raw.view(dtype) if dtype != torch.uint8 else raw
    if dtype_name in ("float8_e4m3fn", "float8_e5m2"):
        if is_positive(name):
            return _uniform(shape, 0.25, 2.0, dtype, device, g)
        return torch.randn(shape, device=device, generator=g).clamp_(-2.0, 2.0).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, device=device, generator=g).bool()
    if not dtype.is_floating_point:
        lo, hi = _INT_RANGE.get(dtype, (-1024, 1024))
        return torch.randint(lo, hi, shape, dtype=dtype, device=device, generator=g)

    if is_norm_weight(name):
        return _uniform(shape, 0.5, 1.5, dtype, device, g)
    if is_norm_bias(name):
        return (0.1 * torch.randn(shape, device=device, generator=g)).to(dtype)
    if is_causal_mask(name, shape, description):
        n = shape[-1]
        upper = torch.triu(torch.ones(n, n, dtype=torch.bool, device=device), diagonal=1)
        mask = torch.zeros(shape, dtype=dtype, device=device)
        mask[..., upper] = torch.finfo(dtype).min
        return mask
    if is_binary_mask(name, description):
        return torch.randint(0, 2, shape, device=device, generator=g).to(dtype)
    rope = is_rope_table(name)
    if rope:
        ang = _uniform(shape, -math.pi, math.pi, torch.float32, device, g)
        return (torch.cos(ang) if rope == "cos" else torch.sin(ang)).to(dtype)
    if is_ssm_decay(name):
        if name in ("A_cumsum", "dA_cumsum"):
            return _uniform(shape, -0.1, 0.0, torch.float32, device, g).cumsum(-1).to(dtype)
        lo, hi = {"A_log": (-5.0, -1.0), "A": (-1.0, -0.001), "g": (-5.0, 0.0)}[name]
        return _uniform(shape, lo, hi, dtype, device, g)
    if is_positive(name):
        return (torch.randn(shape, device=device, generator=g).abs() + 0.1).to(dtype)
    if is_softmax_like(name, description) or (sampling and name == "probs"):
        return torch.softmax(torch.randn(shape, device=device, generator=g), dim=-1).to(dtype)
    if is_weight_matrix(name, shape):
        return (torch.randn(shape, device=device, generator=g) / math.sqrt(max(shape[-1], 1))).to(dtype)
    return _randn(shape, dtype, device, g)


def random_scalar(dtype_name: str, g: torch.Generator) -> Any:
    t = random_tensor("scalar", (1,), dtype_name, "cpu", _cpu_gen(g))
    return t.item()


def _cpu_gen(g: torch.Generator) -> torch.Generator:
    if g.device.type == "cpu":
        return g
    c = torch.Generator()
    c.manual_seed(int(torch.randint(0, 2**62, (1,), device=g.device, generator=g).item()))
    return c


# ── safetensors: a tiny reader (the format is 8 bytes of header length, a JSON header, raw bytes) ──
_ST_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
              "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
              "U8": torch.uint8, "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn,
              "F8_E5M2": torch.float8_e5m2}


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    data = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for key, info in header.items():
        if key == "__metadata__":
            continue
        dt = _ST_DTYPES.get(info["dtype"])
        if dt is None:
            raise ValueError(f"{path}: tensor {key!r} has unsupported dtype {info['dtype']}")
        start, end = info["data_offsets"]
        buf = bytearray(data[base + start: base + end])
        t = torch.frombuffer(buf, dtype=dt) if buf else torch.empty(0, dtype=dt)
        out[key] = t.reshape(info["shape"])
    return out


def resolve_blob(rel: str, roots: list[Path]) -> Optional[Path]:
    """The blob file for a workload path: tried under each root, dropping leading parts of `rel`."""
    p = Path(rel)
    if p.is_absolute():
        return p if p.exists() else None
    parts = p.parts
    for root in roots:
        for i in range(len(parts)):
            cand = Path(root).joinpath(*parts[i:])
            if cand.is_file():
                return cand
    return None


# ── synthesized ragged / paged metadata ──────────────────────────────────────────────────────────
def _composition(total: int, parts: int, g: torch.Generator, min_each: int = 0,
                 caps: Optional[list[int]] = None) -> list[int]:
    """`total` split into `parts` non-negative integers (>= min_each where possible, <= caps where
    possible), at random."""
    if parts <= 0:
        return []
    base = min_each if total >= min_each * parts else 0
    sizes = [base] * parts
    left = total - base * parts
    if left <= 0:
        return sizes
    w = torch.rand(parts, generator=g) + 0.05
    if caps is not None:
        room = [max(c - s, 0) for c, s in zip(caps, sizes)]
        if sum(room) >= left:
            w = torch.tensor([float(r) for r in room]) * w
    add = torch.floor(w / w.sum() * left).long().tolist()
    if caps is not None and sum(max(c - s, 0) for c, s in zip(caps, sizes)) >= left:
        add = [min(a, max(c - s, 0)) for a, c, s in zip(add, caps, sizes)]
    sizes = [s + a for s, a in zip(sizes, add)]
    rest = total - sum(sizes)
    order = torch.randperm(parts, generator=g).tolist()
    # One unit at a time, round robin in a random order, to parts with room under their cap; caps are
    # broken only when a whole pass finds no room anywhere (sum(caps) < total). An escape counted in
    # iterations broke tight caps (total_q == total_kv on 016/017 made q_len > kv_len: NaN references).
    while rest > 0:
        room = [j for j in order if caps is None or sizes[j] < caps[j]] or order
        for j in room:
            if rest == 0:
                break
            sizes[j] += 1
            rest -= 1
    return sizes


def _indptr(sizes: list[int]) -> list[int]:
    out = [0]
    for s in sizes:
        out.append(out[-1] + s)
    return out


def synthesize_missing(names: list[str], defn, rw, g_cpu: torch.Generator) -> dict[str, torch.Tensor]:
    """Valid values for safetensors inputs whose blobs are absent (FlashInfer-Bench 012-020)."""
    ax = rw.axes
    shapes = rw.input_shapes
    out: dict[str, torch.Tensor] = {}
    want = set(names)
    indptr_len = None
    for n in ("qo_indptr", "kv_indptr", "paged_kv_indptr"):
        if n in shapes and shapes[n]:
            indptr_len = shapes[n][0]
            break
    batch = (indptr_len - 1) if indptr_len else int(ax.get("batch_size", 1))
    kv_total = None
    if "kv_indices" in shapes and shapes["kv_indices"]:
        kv_total = shapes["kv_indices"][0]
    elif "total_kv" in ax:
        kv_total = ax["total_kv"]
    elif "num_kv_indices" in ax:
        kv_total = ax["num_kv_indices"]
    kv_sizes = _composition(kv_total or 0, batch, g_cpu, min_each=1) if batch > 0 else []
    page_size = int(ax.get("page_size", 1))
    for name in names:
        spec = defn.inputs[name]
        dtype = to_torch(spec.dtype)
        shape = shapes[name] or ()
        if name in ("kv_indptr", "paged_kv_indptr"):
            out[name] = torch.tensor(_indptr(kv_sizes), dtype=dtype)
        elif name == "qo_indptr":
            total_q = int(ax.get("total_q", ax.get("num_tokens", batch)))
            # causal prefill wants q_len <= kv_len per sequence (kv_len counted in tokens)
            caps = [s * page_size for s in kv_sizes]
            q_sizes = _composition(total_q, batch, g_cpu, min_each=1, caps=caps)
            out[name] = torch.tensor(_indptr(q_sizes), dtype=dtype)
        elif name in ("kv_indices", "paged_kv_indices"):
            n_pages = int(ax.get("num_pages", shape[0] if shape else 0))
            k = shape[0]
            if n_pages >= k:
                idx = torch.randperm(n_pages, generator=g_cpu)[:k]
            else:
                idx = torch.randint(0, max(n_pages, 1), (k,), generator=g_cpu)
            out[name] = idx.to(dtype)
        elif name in ("kv_last_page_len", "paged_kv_last_page_len"):
            out[name] = torch.randint(1, page_size + 1, tuple(shape), generator=g_cpu).to(dtype)
        elif dtype.is_floating_point or spec.dtype in _LOW_FLOATS:
            out[name] = random_tensor(name, shape, spec.dtype, "cpu", g_cpu, spec.description)
        else:
            hi = max(min((s for s in shape if s > 0), default=1), 1)
            out[name] = torch.randint(0, hi, tuple(shape), generator=g_cpu).to(dtype)
        want.discard(name)
    return out


# ── one workload's inputs ────────────────────────────────────────────────────────────────────────
class InputFactory:
    """Makes input sets for one resolved workload; each call with a new round gives fresh values."""

    def __init__(self, rw, device, *, custom_fn: Optional[Callable] = None,
                 blob_roots: Optional[list[Path]] = None):
        self.rw = rw
        self.defn = rw.definition
        self.device = torch.device(device)
        self.custom_fn = custom_fn
        self.blob_roots = [Path(r) for r in (blob_roots or [])]
        self.notes: list[str] = []
        self._blobs: dict[str, torch.Tensor] = {}
        self._load_blobs()

    def _load_blobs(self) -> None:
        missing = []
        files: dict[Path, dict] = {}
        for name, src in self.rw.workload.inputs.items():
            if not isinstance(src, SafetensorsInput) or name not in self.defn.inputs:
                continue
            path = resolve_blob(src.path, self.blob_roots)
            if path is None:
                missing.append(name)
                continue
            if path not in files:
                files[path] = read_safetensors(path)
            t = files[path].get(src.tensor_key)
            if t is None:
                raise ValueError(f"inputs.{name}: key {src.tensor_key!r} not in {path}")
            expect = self.rw.input_shapes[name]
            if tuple(t.shape) != tuple(expect or ()):
                raise ValueError(f"inputs.{name}: {path} holds shape {list(t.shape)}, "
                                 f"expected {list(expect or ())}")
            self._blobs[name] = t.to(to_torch(self.defn.inputs[name].dtype))
        if missing:
            g = torch.Generator().manual_seed(seed_for(self.rw.uuid, 0, "blobs"))
            self._blobs.update(synthesize_missing(missing, self.defn, self.rw, g))
            self.notes.append(f"safetensors blobs not found; synthesized valid {', '.join(missing)} "
                              "from the workload's axes")

    def make(self, round_index: int, only: Optional[set] = None) -> dict[str, Any]:
        """Inputs by name (tensors on the device, Python scalars), fresh for each round. `only`: just
        these names, the others not generated (cheap checks of metadata; blob, scalar and synthesized
        values are the same as in a full call, random tensors may differ: they share a generator)."""
        seed = seed_for(self.rw.uuid, round_index)
        g = torch.Generator(device=self.device).manual_seed(seed)
        defn, wl = self.defn, self.rw.workload
        custom: dict = {}
        if any(isinstance(s, CustomInput) for s in wl.inputs.values()):
            if self.custom_fn is None:
                raise ValueError(f"workload {self.rw.uuid} uses custom inputs but the definition's "
                                 f"entrypoint {defn.custom_inputs_entrypoint!r} was not found")
            torch.manual_seed(seed)  # entrypoints draw from the global generators
            custom = self.custom_fn(self.rw.axes_and_scalars(), self.device) or {}
        sampling = (defn.op_type or "") == "sampling"
        out: dict[str, Any] = {}
        for name, spec in defn.inputs.items():
            if only is not None and name not in only:
                continue
            src = wl.inputs.get(name)
            if isinstance(src, ScalarInput):
                out[name] = src.value
            elif isinstance(src, CustomInput):
                if name not in custom:
                    raise ValueError(f"custom inputs entrypoint did not produce {name!r}")
                v = custom[name]
                out[name] = v.to(self.device) if isinstance(v, torch.Tensor) else v
            elif isinstance(src, SafetensorsInput):
                out[name] = self._blobs[name].to(self.device).clone()
            elif spec.is_scalar:
                out[name] = random_scalar(spec.dtype, g)
            else:
                out[name] = random_tensor(name, self.rw.input_shapes[name], spec.dtype, self.device,
                                          g, spec.description, sampling)
        return out


def clone_inputs(inputs: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}


def _one_of_each_repeat(t: torch.Tensor) -> torch.Tensor:
    """The view of `t` with every broadcast dim (stride 0, size > 1) cut to one element: the
    memory an expanded tensor really has, which can be written."""
    return t[tuple(slice(0, 1) if st == 0 and sz > 1 else slice(None)
                   for sz, st in zip(t.shape, t.stride()))]


def write_into(dst: torch.Tensor, src: torch.Tensor) -> bool:
    """Write src's values into dst's memory (the same buffers, new data). An expanded dst (a custom
    input made with .expand(), stride 0) has one element per repeat: it takes src's values when src
    repeats along the same dims, through the elements it really has. False where dst cannot hold
    src (another shape or dtype, or src varies along a dim dst repeats): the caller hands src over
    instead."""
    if dst.shape != src.shape or dst.dtype != src.dtype:
        return False
    bcast = [st == 0 and sz > 1 for sz, st in zip(dst.shape, dst.stride())]
    if not any(bcast):
        dst.copy_(src)
        return True
    if any(b and not (st == 0 or sz == 1) for b, sz, st in zip(bcast, src.shape, src.stride())):
        return False
    _one_of_each_repeat(dst).copy_(_one_of_each_repeat(src))
    return True
