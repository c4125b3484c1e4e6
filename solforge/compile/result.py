"""CompileResult: what one compile produced. One row of the store's compile_results table.

Cubins are bytes keyed by source unit ("kernel.cu" -> ELF). `entries` says, for each kernel a launch
names, which unit holds it, its symbol in the cubin and (CuTe DSL only) the parameter layout the
launcher must pack; a CUDA C++ entry's parameters are the launch's args, so its `params` is empty.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import json
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field


class CompileStatus(str, enum.Enum):
    """Same values as solforge.store.status.CompileStatus (a test keeps them equal)."""

    ok = "ok"
    error = "error"      # the compiler rejected the source (the log says where) or crashed
    timeout = "timeout"  # the compiler ran past its time limit and was killed
    invalid = "invalid"  # never reached the compiler: bad option, param name, arch or file set


class ParamSlot(BaseModel):
    """One kernel parameter as the driver sees it: `size` bytes at `offset` in the param buffer.

    kind: "ptr" (a tensor's data pointer, from arg `source`), "i32"/"i64"/... (a scalar whose value is
    the expression `source`), or "bytes" (a constant blob baked at compile time, hex in `value`).
    """

    model_config = ConfigDict(extra="forbid")

    kind: str
    offset: int
    size: int
    source: str = ""
    value: str = ""


class KernelEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    unit: str                    # source unit whose cubin holds the kernel
    symbol: str                  # function name in the cubin (mangled for CuTe DSL)
    params: list[ParamSlot] = Field(default_factory=list)  # empty: pack the launch's args in order
    param_bytes: int = 0         # total size of the parameter buffer when params is given
    # CuTe DSL kernels carry their own launch shape; expressions in the Candidate may override
    grid: Optional[list[int]] = None
    block: Optional[list[int]] = None
    cluster: Optional[list[int]] = None
    smem: Optional[int] = None


class CompileResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: CompileStatus
    log: str = ""                              # compiler output, verbatim ("kernel.cu(12): error: ...")
    seconds: float = 0.0                       # wall time of this call (a cache hit's lookup time)
    compile_seconds: float = 0.0               # wall time of the compile that produced the cubins
    compile_cpu_seconds: float = 0.0           # CPU time of that compile in the worker (NVRTC; load-proof)
    cubins: dict[str, bytes] = Field(default_factory=dict)
    entries: dict[str, KernelEntry] = Field(default_factory=dict)
    cubin_hash: str = ""
    compiler: str = ""                         # "nvrtc" | "cutlass-dsl"
    compiler_version: str = ""
    arch: str = ""
    options: list[str] = Field(default_factory=list)  # everything passed, minus absolute include paths
    cache_key: str = ""
    cache_hit: bool = False
    source_hash: str = ""

    @property
    def ok(self) -> bool:
        return self.status == CompileStatus.ok

    @staticmethod
    def hash_cubins(cubins: dict[str, bytes]) -> str:
        h = hashlib.sha256()
        for name in sorted(cubins):
            h.update(name.encode() + b"\0" + hashlib.sha256(cubins[name]).digest())
        return h.hexdigest() if cubins else ""

    def to_row(self, attempt_id: str) -> dict:
        """One compile_results row (001_core + 020_compile_details); cubins stay in the disk cache."""
        major_minor = self.compiler_version.split(" ")[1] if " " in self.compiler_version else ""
        return {
            "attempt_id": attempt_id, "status": self.status.value, "log": self.log,
            "seconds": self.seconds, "cubin_hash": self.cubin_hash,
            "compiler": f"{self.compiler} {'.'.join(major_minor.split('.')[:2])}".strip(),
            "arch": self.arch, "cache_hit": self.cache_hit,
            "compiler_version": self.compiler_version, "options": list(self.options),
            "cache_key": self.cache_key, "compile_seconds": self.compile_seconds,
            "cubin_bytes": sum(len(b) for b in self.cubins.values()),
            "entries": {k: v.model_dump() for k, v in self.entries.items()},
        }

    def launch_manifest(self) -> dict:
        """Plain-JSON description for the bare GPU box (no pydantic there): entries + cubin files."""
        return {
            "arch": self.arch, "cubin_hash": self.cubin_hash, "compiler": self.compiler,
            "entries": {k: v.model_dump() for k, v in self.entries.items()},
            "cubins": {name: _cubin_filename(name) for name in self.cubins},
        }

    def write_stage(self, folder) -> dict:
        """Write cubins + manifest.json into a staging folder for the GPU box; return the manifest."""
        from pathlib import Path

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        manifest = self.launch_manifest()
        for name, blob in self.cubins.items():
            (folder / manifest["cubins"][name]).write_bytes(blob)
        (folder / "manifest.json").write_text(json.dumps(manifest, indent=1))
        return manifest

    def json_summary(self) -> dict:
        d = self.model_dump(exclude={"cubins"})
        d["status"] = self.status.value
        d["cubin_sizes"] = {k: len(v) for k, v in self.cubins.items()}
        return d

    def to_cache_json(self) -> str:
        d = self.model_dump(exclude={"cubins", "seconds", "cache_hit"})
        d["status"] = self.status.value
        return json.dumps(d)


def _cubin_filename(unit: str) -> str:
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in unit)
    return safe + ".cubin"


def b64(blob: bytes) -> str:
    return base64.b64encode(blob).decode()
