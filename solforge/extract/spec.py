"""What a block extractor produces: a problem spec (axes, tensors, reference text, workloads) plus a
way to run the original nn.Module on the same inputs.

The reference text is assembled from: a header of the block's *structural* constants (head counts,
eps, theta...), a generated `gen_inputs` (the custom-inputs entrypoint: well-scaled weights, valid
indices), and the block's `run` body. Sizes are read from tensor shapes, never hard-coded, so the
small twin of a config (ModelConfig.shrunk) produces exactly the same text.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Callable, Optional, Union

Dim = Union[str, int]

# Tolerances per dtype for single ops and for composite blocks (many roundings in a chain).
TOLERANCE = {
    "float32": {"op": (1e-4, 1e-4), "block": (1e-3, 1e-3)},
    "float16": {"op": (5e-3, 5e-3), "block": (1e-2, 2e-2)},
    "bfloat16": {"op": (1e-2, 2e-2), "block": (3e-2, 5e-2)},
}

TORCH_DTYPE = {"float32": "torch.float32", "float16": "torch.float16", "bfloat16": "torch.bfloat16",
               "int64": "torch.int64", "int32": "torch.int32"}


@dataclass
class T:
    """One input or output tensor. `init` says how gen_inputs makes it (inputs only):
    act (N(0,1)), weight (N(0,1)/sqrt(fan_in), fan_in = last dim), gain (1 + 0.1 N(0,1)),
    small (0.1 N(0,1)), or raw Python code (an expression over `a`, `device` and earlier inputs)."""
    shape: Optional[list[Dim]]
    dtype: str
    description: str
    init: str = "act"


@dataclass
class BlockSpec:
    kind: str
    name: str
    op_type: str
    description: str
    axes: dict[str, dict]
    inputs: dict[str, T]
    outputs: dict[str, T]
    constants: dict[str, object]
    body: str
    workloads: list[dict[str, int]]
    small_axes: dict[str, int]
    module_outputs: Callable[[dict], tuple]
    composite: bool = False
    constraints: list[str] = field(default_factory=list)
    tolerance: Optional[dict] = None

    @property
    def dtype(self) -> str:
        return next(iter(self.outputs.values())).dtype

    def tol(self) -> dict:
        if self.tolerance:
            return self.tolerance
        atol, rtol = TOLERANCE[self.dtype]["block" if self.composite else "op"]
        return {"max_atol": atol, "max_rtol": rtol, "required_matched_ratio": 0.99}

    # ---- the reference text ------------------------------------------------------------------
    def reference(self) -> str:
        lines = ["import math", "", "import torch", "", ""]
        if self.constants:
            lines.append(f"# Structural constants of the block (from the model config)")
            for k, v in self.constants.items():
                lines.append(f"{k} = {v!r}")
            lines += ["", ""]
        lines.append(self._gen_inputs())
        lines += ["", ""]
        lines.append(self.body.strip("\n"))
        return "\n".join(lines) + "\n"

    def _gen_inputs(self) -> str:
        out = ["def gen_inputs(axes_and_scalars, device):",
               '    """Inputs at a realistic scale: weights N(0, 1/fan_in), activations N(0, 1)."""',
               "    a = axes_and_scalars"]
        for name, t in self.inputs.items():
            dims = ", ".join(f'a["{d}"]' if isinstance(d, str) else str(d) for d in t.shape or [])
            td = TORCH_DTYPE[t.dtype]
            # drawn in their own dtype: a float32 draw of an MoE layer's expert weights (22 GB in
            # bf16) and its scaled copy took 90 GB on the way, more than fits beside the inputs
            draw = f"torch.randn({dims}, device=device" + \
                (f", dtype={td})" if t.dtype in ("float32", "float16", "bfloat16") else ")")
            if t.init == "act":
                e = draw
            elif t.init == "weight":
                last = t.shape[-1]
                fan = f'a["{last}"]' if isinstance(last, str) else str(last)
                e = f"{draw} / math.sqrt({fan})"
            elif t.init == "gain":
                e = f"1.0 + 0.1 * torch.randn({dims}, device=device)"
            elif t.init == "small":
                e = f"0.1 * torch.randn({dims}, device=device)"
            else:
                e = t.init
            out.append(f"    {name} = ({e}).to({td})")
        out.append("    return {" + ", ".join(f'"{n}": {n}' for n in self.inputs) + "}")
        return "\n".join(out)

    # ---- the definition and workloads ---------------------------------------------------------
    def definition(self, tags: list[str], hf_id: Optional[str]) -> dict:
        d = {
            "name": self.name,
            "op_type": self.op_type,
            "description": self.description,
            "hf_id": hf_id,
            "tags": tags,
            "axes": self.axes,
            "custom_inputs_entrypoint": "gen_inputs",
            "inputs": {k: _tensor_json(t) for k, t in self.inputs.items()},
            "outputs": {k: _tensor_json(t) for k, t in self.outputs.items()},
            "reference": self.reference(),
        }
        if self.constraints:
            d["constraints"] = self.constraints
        return d

    def workload_rows(self) -> list[dict]:
        import uuid

        rows = []
        for w in self.workloads:
            key = self.name + json.dumps(w, sort_keys=True)
            rows.append({"uuid": str(uuid.uuid5(uuid.NAMESPACE_URL, "solforge-extract/" + key)),
                         "axes": dict(w),
                         "inputs": {k: {"type": "custom"} for k in self.inputs},
                         "tolerance": self.tol()})
        return rows


def _tensor_json(t: T) -> dict:
    return {"shape": t.shape, "dtype": t.dtype, "description": t.description}


IDENTITY_EXCLUDED = ("name", "description", "tags", "hf_id")


def definition_hash(defn: dict) -> str:
    """What makes two extracted definitions the same problem: everything but naming and labels."""
    core = {k: v for k, v in defn.items() if k not in IDENTITY_EXCLUDED}
    return hashlib.sha256(json.dumps(core, sort_keys=True).encode()).hexdigest()


def const(value: int, description: str = "") -> dict:
    d = {"type": "const", "value": int(value)}
    if description:
        d["description"] = description
    return d


def var(description: str = "") -> dict:
    d = {"type": "var"}
    if description:
        d["description"] = description
    return d


def expr(expression: str, description: str = "") -> dict:
    d = {"type": "expr", "expression": expression}
    if description:
        d["description"] = description
    return d


# ---- workload shapes ---------------------------------------------------------------------------
DECODE_TOKENS = [1, 4, 16, 32, 64, 128, 256]
PREFILL_TOKENS = [512, 1024, 2048, 4096, 8192, 16384]
TOKENS = DECODE_TOKENS + PREFILL_TOKENS


def token_workloads(axis: str = "num_tokens", cap: Optional[int] = None) -> list[dict]:
    return [{axis: t} for t in TOKENS if cap is None or t <= cap]


def fits(nbytes: float, budget: float = 8e9) -> bool:
    """A naive reference materializes intermediates; keep each workload well inside an H200."""
    return nbytes <= budget
