"""Safetensors inputs of a workload: find the file, read its header (stdlib only), check the tensor.

A workload's `safetensors` input names a file relative to some dataset root (SOL-ExecBench writes
"data/flashinfer-trace/blob/...", FlashInfer-Trace "./blob/..."). We look for it under the workload
file's folder and its ancestors. A missing file is not an error (the blobs are a separate download):
it is reported as a warning. A present file must hold the key with the definition's dtype and shape.
"""

from __future__ import annotations

import json
import struct
from functools import lru_cache
from pathlib import Path
from typing import Optional

from ..errors import InputError
from .workload import ResolvedWorkload, SafetensorsInput

# safetensors dtype tag -> our dtype name
_ST_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
              "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8",
              "BOOL": "bool", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}
_MAX_HEADER = 100 * 1024 * 1024  # the format's own limit


class BlobError(ValueError):
    pass


@lru_cache(maxsize=1024)
def read_header(path: Path) -> dict:
    """The JSON header of a .safetensors file: {key: {dtype, shape, data_offsets}}."""
    import os
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BlobError("not a regular file (a FIFO, socket or device is never read)")
        raw = f.read(8)
        if len(raw) != 8:
            raise BlobError("file too short for a safetensors header")
        (n,) = struct.unpack("<Q", raw)
        if n > _MAX_HEADER:
            raise BlobError(f"header length {n} is not plausible")
        body = f.read(n)
    try:
        header = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise BlobError("header is not valid JSON") from None
    if not isinstance(header, dict):
        raise BlobError("header is not a JSON object")
    return header


def blob_path_problem(rel: str) -> str:
    """Why a workload's blob path is refused ("" when fine): blobs live inside the dataset, found
    relative to the workload file or a folder above it, so an absolute path, a .. component or a
    control character can only point somewhere else (/dev/zero, another user's files)."""
    if not isinstance(rel, str) or not rel.strip():
        return "an empty path"
    if any(c in rel for c in "\0\n\r"):
        return "a path with a control character"
    p = Path(rel)
    if p.is_absolute() or rel.startswith("~"):
        return "an absolute path (blob paths are relative to the dataset)"
    if ".." in p.parts:
        return "a path with .. (blob paths stay inside the dataset)"
    return ""


def find_blob(rel: str, start: Path, depth: int = 5) -> Optional[Path]:
    if blob_path_problem(rel):
        return None
    p = Path(rel)
    base = start
    for _ in range(depth):
        cand = base / p
        if cand.is_file():
            return cand
        if base.parent == base:
            break
        base = base.parent
    return None


def check_safetensors(rw: ResolvedWorkload, file: Path, line: Optional[int],
                      field_prefix: str | None = None) -> list[str]:
    """Raise InputError when a present blob contradicts the definition; return the inputs whose
    blob is missing."""
    missing: list[str] = []
    pre = f"{field_prefix}." if field_prefix else ""
    for name, src in rw.workload.inputs.items():
        if not isinstance(src, SafetensorsInput) or name not in rw.definition.inputs:
            continue
        why = blob_path_problem(src.path)
        if why:
            raise InputError(f"safetensors path {src.path!r} is {why}", file=file, line=line,
                             field=f"{pre}inputs.{name}.path")
        blob = find_blob(src.path, file.parent)
        if blob is None:
            missing.append(src.path)
            continue
        fld = f"{pre}inputs.{name}"
        try:
            header = read_header(blob)
        except (OSError, BlobError) as e:
            raise InputError(f"cannot read safetensors file {src.path}: {e}", file=file, line=line,
                             field=f"{fld}.path") from None
        meta = header.get(src.tensor_key)
        if not isinstance(meta, dict):
            raise InputError(f"{src.path} has no tensor {src.tensor_key!r}", file=file, line=line,
                             field=f"{fld}.tensor_key")
        spec = rw.definition.inputs[name]
        want_shape = rw.input_shapes[name]
        got_shape = tuple(meta.get("shape", ()))
        if want_shape is not None and len(got_shape) != len(want_shape):
            raise InputError(f"tensor {src.tensor_key!r} in {src.path} has rank {len(got_shape)} "
                             f"{list(got_shape)}, the definition wants rank {len(want_shape)} "
                             f"{list(want_shape)}", file=file, line=line, field=fld)
        if want_shape is not None and got_shape != want_shape:
            raise InputError(f"tensor {src.tensor_key!r} in {src.path} has shape {list(got_shape)}, "
                             f"the definition wants {list(want_shape)}", file=file, line=line, field=fld)
        got_dtype = _ST_DTYPES.get(meta.get("dtype"), meta.get("dtype"))
        if got_dtype != spec.dtype:
            raise InputError(f"tensor {src.tensor_key!r} in {src.path} is {got_dtype}, the "
                             f"definition wants {spec.dtype}", file=file, line=line, field=fld)
    return missing
