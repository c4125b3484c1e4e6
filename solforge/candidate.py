"""Candidate: what an agent proposes and the evaluator runs — device source plus a launch spec.

The format (documented for agents in solforge/agents/protocol.md):

    {
      "problem": "L1/042_rmsnorm...",          # problem name
      "language": "cuda" | "cute",             # CUDA C++ (NVRTC) or CuTe DSL (Python, compiled to cubin)
      "sources": {"kernel.cu": "..."},         # one or more files; CUDA sources are compiled together
      "params": {"BLOCK": 256, "VEC": 8},      # tunables: #define'd into CUDA sources and usable in
                                               #   every launch expression below
      "launches": [                            # run in order, on torch's current stream, per call
        {"kernel": "rmsnorm_kernel",           # extern "C" entry point (or the CuTe kernel's name)
         "grid":  ["ceil_div(batch_size*seq_len, 4)"],  # 1-3 expressions over axes, scalars, params
         "block": ["BLOCK"],
         "smem":  "0",                         # dynamic shared memory bytes (expression)
         "args":  ["input", "weight", "output", "int32:batch_size*seq_len", "float32:eps"]}
      ],
      "workspace": "0",                        # bytes of zeroed scratch memory per call (expression);
                                               #   pass it to a kernel with the arg "workspace"
      "workspace_zero": null,                  # optional: bytes at the workspace's start the harness
                                               #   zeroes before every call (expression); null = all
                                               #   of it; "0" = none: the kernel leaves the workspace
                                               #   zeroed itself (a fresh one starts zeroed), so a
                                               #   one-kernel plan launches without a memset
      "options": ["-lineinfo"]                 # extra compiler options
    }

Argument strings: an input or output name passes that tensor's device pointer; "workspace" passes the
scratch buffer; "TYPE:EXPR" passes a scalar of TYPE (int32, int64, uint32, uint64, float32, float64)
whose value is EXPR, evaluated by the safe evaluator over the resolved axes, the workload's scalar
inputs and the params. Inputs and outputs are contiguous, in the definition's dtype and shape.

Nothing here imports torch or CUDA: this module is shared by the CPU side and the bare GPU box.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .problem import axis_expr

SCALAR_TYPES = {"int32": "i", "int64": "q", "uint32": "I", "uint64": "Q", "float32": "f",
                "float64": "d"}  # struct format codes, for packing kernel parameters
_SCALAR_ARG = re.compile(r"^(int32|int64|uint32|uint64|float32|float64):(.+)$")


class Launch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kernel: str = Field(min_length=1)
    grid: list[str] = Field(min_length=1, max_length=3)
    block: list[str] = Field(min_length=1, max_length=3)
    smem: str = "0"
    args: list[str] = Field(default_factory=list)
    cluster: Optional[list[str]] = None  # thread-block cluster dims (sm_90+), optional
    # launched only where this axis expression holds (a compiler plan's variant: the structure the
    # reference takes at these sizes); None: always
    when: Optional[str] = None

    @field_validator("grid", "block", "cluster", mode="before")
    @classmethod
    def _stringify(cls, v):
        if v is None:
            return v
        return [str(x) for x in v]

    @field_validator("grid", "block", "cluster")
    @classmethod
    def _exprs(cls, v):
        for e in v or []:
            axis_expr.parse(e)
        return v

    @field_validator("when")
    @classmethod
    def _when(cls, v):
        if v is not None:
            axis_expr.parse(v)
        return v

    @field_validator("smem", mode="before")
    @classmethod
    def _smem(cls, v):
        v = str(v)
        axis_expr.parse(v)
        return v


class Arg(BaseModel):
    """A parsed argument string."""

    kind: Literal["tensor", "scalar", "workspace", "tmap"]
    name: str = ""        # tensor name (tensor, tmap)
    ctype: str = ""       # scalar type
    expr: str = ""        # scalar expression; tmap: "BOX_ROWS,BOX_COLS"
    swizzle: str = ""     # tmap: sw128 | sw64 | sw32 | none


def parse_arg(s: str) -> Arg:
    s = s.strip()
    if s == "workspace":
        return Arg(kind="workspace")
    if s.startswith("tmap:"):  # a CUtensorMap of a 2-D tensor, by value (docs/candidate_format.md)
        t = re.match(r"^tmap:([A-Za-z_][A-Za-z0-9_]*):([^:,]+),([^:,]+):(sw128|sw64|sw32|none)$", s)
        if not t:
            raise ValueError(f"argument {s!r}: a tensor map is 'tmap:TENSOR:BOX_ROWS,BOX_COLS:"
                             "sw128|sw64|sw32|none'")
        axis_expr.parse(t.group(2))
        axis_expr.parse(t.group(3))
        return Arg(kind="tmap", name=t.group(1), expr=f"{t.group(2).strip()},{t.group(3).strip()}",
                   swizzle=t.group(4))
    m = _SCALAR_ARG.match(s)
    if m:
        axis_expr.parse(m.group(2))
        return Arg(kind="scalar", ctype=m.group(1), expr=m.group(2).strip())
    if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", s):
        raise ValueError(f"argument {s!r} is neither a tensor name, 'workspace' nor 'TYPE:EXPR'")
    return Arg(kind="tensor", name=s)


class Candidate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    problem: str = Field(min_length=1)
    language: Literal["cuda", "cute"] = "cuda"
    sources: dict[str, str] = Field(min_length=1)
    params: dict[str, Union[int, float, bool, str]] = Field(default_factory=dict)
    launches: list[Launch] = Field(min_length=1)
    workspace: str = "0"
    # bytes at the workspace's start zeroed before every call; None: all of it (see the module doc)
    workspace_zero: Optional[str] = None
    options: list[str] = Field(default_factory=list)
    # free text for humans and lineage: which family/agent made it and why
    notes: str = ""

    @field_validator("workspace", mode="before")
    @classmethod
    def _ws(cls, v):
        v = str(v)
        axis_expr.parse(v)
        return v

    @field_validator("workspace_zero", mode="before")
    @classmethod
    def _ws_zero(cls, v):
        if v is None:
            return v
        v = str(v)
        axis_expr.parse(v)
        return v

    @model_validator(mode="after")
    def _args_parse(self) -> "Candidate":
        for i, launch in enumerate(self.launches):
            for a in launch.args:
                try:
                    parse_arg(a)
                except ValueError as e:
                    raise ValueError(f"launches[{i}].args: {e}") from None
        return self

    def source_hash(self) -> str:
        """Content hash of everything that affects the compiled code and its launch."""
        payload = self.model_dump(exclude={"notes", "problem"})
        if payload.get("workspace_zero") is None:  # the default: hashes from before the field stay
            payload.pop("workspace_zero", None)
        for launch in payload.get("launches", []):
            if launch.get("when") is None:  # likewise: launches without a condition hash as before
                launch.pop("when", None)
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()

    def check_tensor_args(self, inputs: set[str], outputs: set[str]) -> None:
        """Raise ValueError if a launch names a tensor the definition does not have."""
        known = inputs | outputs
        for i, launch in enumerate(self.launches):
            for a in map(parse_arg, launch.args):
                if a.kind in ("tensor", "tmap") and a.name not in known:
                    raise ValueError(f"launches[{i}].args: {a.name!r} is not an input or output "
                                     f"(known: {sorted(known)})")


def eval_expr(expr: str, env: dict) -> int | float:
    return axis_expr.evaluate(expr, env)


def launch_env(axes: dict, scalars: dict, params: dict) -> dict:
    """The names a launch expression may use. Params win over axes (they are the candidate's own)."""
    env = {**axes, **{k: (int(v) if isinstance(v, bool) else v) for k, v in scalars.items()
                      if isinstance(v, (int, float))}}
    env.update({k: v for k, v in params.items() if isinstance(v, (int, float))})
    return env
