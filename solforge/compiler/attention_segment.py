"""The attention segment of a lowering: softmax(mod(Q K^T)) V found in the traced graph
(templates/attention_match.py, by structure only) runs as the flash template
(templates/attention.py) instead of the generic matmul / softmax / matmul kernels.

    segs = find(ir)                               # {node name: AttentionMatch}
    value = lower(L, node, segs[node["name"]])    # in Lowering.run, at the match's output node

Q, K, V, a bias and a boolean mask are read where the lowering keeps them: a graph input by its
name, a computed value realised once into the workspace (contiguous in its traced shape, which is
what the matcher's strides assume). The output goes to a workspace buffer in the output node's
traced shape, which the lowering then treats like any other value. Workspace offsets are known only
after the plan packs the workspace, so the segment renders its source and launches at plan time
(`AttentionLaunch.render`); until then it tells pack_workspace which buffers it touches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import sympy

from . import symexpr
from .kernel import ITEMSIZE, Buffer
from .loops import Loader, view_of


@dataclass
class _Touches:
    """The part of a Kernel that pack_workspace reads: ("o", buffer name) for each workspace buffer."""
    _keys: dict = field(default_factory=dict)


@dataclass
class AttentionLaunch:
    """One attention segment in a lowering's kernel list (kind "attention")."""
    name: str
    spec: object                     # AttentionSpec with graph-value names as tensor args
    where: dict                      # graph-value name -> Buffer (input or workspace)
    scratch: Optional[Buffer]        # split-KV partials (float32), when NSPLIT > 1
    params: dict
    kind: str = "attention"
    launch_bounds: int = 0
    kernel: _Touches = field(default_factory=_Touches)

    def render(self):
        """The template's sources and launches with every workspace offset resolved."""
        from .templates.attention import generate, rebind

        where = {}
        for nm, buf in self.where.items():
            if buf.kind == "ws":
                where[nm] = ("workspace", symexpr.to_axis(sympy.sympify(buf.offset) / ITEMSIZE[buf.dtype]))
            else:
                where[nm] = (buf.name, "0")
        scratch = None
        if self.scratch is not None:
            scratch = ("workspace", symexpr.to_axis(sympy.sympify(self.scratch.offset) / 4))
        return generate(rebind(self.spec, where, scratch), self.params, self.name)


def find(ir: dict) -> dict:
    """{output node name: AttentionMatch} for every attention the matcher finds; none when it fails
    (a matcher error only costs the fast path, the generic lowering still runs)."""
    from .templates.attention_match import match_attention

    try:
        return {m.output: m for m in match_attention(ir)}
    except Exception:  # noqa: BLE001 - the generic kernels serve what the matcher cannot read
        return {}


def absorbed(segs: dict) -> set:
    """Nodes the segments replace (their outputs excepted: the segment produces those)."""
    out: set = set()
    for m in segs.values():
        out |= set(m.nodes)
    return out - set(segs)


def lower(L, node: dict, match) -> Loader:
    from .errors import Unsupported
    from .templates.attention import AttentionSpecError, check_spec, default_params

    spec = match.spec
    try:
        check_spec(spec)
        params = default_params(spec)
    except AttentionSpecError as e:
        raise Unsupported(f"attention segment: {e}") from None
    where: dict = {}
    for t in (spec.q, spec.k, spec.v, spec.bias, spec.mask):
        if t is None or t.arg in where:
            continue
        v = L.env.get(t.arg)
        if not isinstance(v, Loader):
            raise Unsupported(f"attention segment: operand {t.arg} is not available")
        where[t.arg] = L.realize(v)
    out = L.new_buffer(node["dtype"], [symexpr.parse(str(s)) for s in node["shape"]])
    where[spec.o.arg] = out
    scratch = None
    if params["NSPLIT"] > 1:
        b, h, sq = (symexpr.parse(spec.batch), symexpr.parse(spec.heads), symexpr.parse(spec.seq_q))
        scratch = L.new_buffer("float32", [sympy.Max(params["NSPLIT"] * b * h * sq * (spec.head_dim_v + 1), 4)])
    touched = [b for b in list(where.values()) + [scratch] if b is not None and b.kind == "ws"]
    name = L.kname("attn")
    L.kernels.append(AttentionLaunch(name=name, spec=spec, where=where, scratch=scratch, params=params,
                                     kernel=_Touches({("o", b.name): True for b in touched})))
    return view_of(out)
