"""The attention matcher on small references written here, traced the way the compiler traces
(make_fx on symbolic fake tensors without duck sizing, core ATen decompositions with mm/bmm kept
whole): each match's spec is checked field by field and then run end to end — the generated
lowering through the CPU model of the kernel on real inputs, against the reference run eagerly.
Negative cases (softmax-like graphs that are not attention) must not match."""

from __future__ import annotations

import math
import operator

import pytest
import torch
import torch.nn.functional as F

from solforge.compiler.templates.attention import generate
from solforge.compiler.templates.attention_emulate import emulate
from solforge.compiler.templates.attention_match import explain, match_attention
from solforge.problem import axis_expr

_DT = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16", torch.bool: "bool",
       torch.int64: "int64", torch.int32: "int32"}


def _decomp_table():
    from torch._decomp import core_aten_decompositions, get_decompositions
    aten = torch.ops.aten
    table = dict(core_aten_decompositions())
    table.update(get_decompositions([aten._softmax, aten.triu, aten.tril, aten.masked_fill, aten.repeat_interleave,
                                     aten.baddbmm, aten.einsum, aten.split, aten.unbind, aten.chunk]))
    for op in (aten.mm, aten.bmm, aten.addmm, aten._to_copy, aten.clone, aten.where, aten.amax, aten.sum):
        for ov in op.overloads():
            table.pop(getattr(op, ov), None)
    return table


def trace_ir(fn, specs: dict, scalars: dict | None = None, keep: dict | None = None) -> dict:
    """The compiler's IR format for fn(**inputs): specs maps an input name to (shape, dtype) with each
    dim an int (a constant) or an axis name; scalars maps a float input's name to a sentinel value."""
    import sympy
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

    sizes = {"B": 3, "H": 6, "HKV": 2, "SQ": 37, "SK": 53, "S": 41, "W": 5}
    spare = iter([43, 47, 59, 61, 67, 71, 73, 79, 83, 89])   # other axis names: distinct sizes
    for shape, _ in specs.values():
        for d in shape:
            if isinstance(d, str) and d not in sizes:
                sizes[d] = next(spare)
    mode = FakeTensorMode(shape_env=ShapeEnv(duck_shape=False), allow_non_fake_inputs=True)
    names, args, symmap, inputs = list(specs) + list(scalars or {}), [], {}, []
    for k, (shape, dt) in specs.items():
        meta = torch.empty([d if isinstance(d, int) else sizes[d] for d in shape], dtype=dt, device="meta")
        # constant dims stay static (a Python int in the reference's arithmetic, e.g. D ** -0.5)
        ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.STATIC if isinstance(d, int) else DimDynamic.DYNAMIC
                                                      for d in shape], constraint_sizes=[None] * len(shape))
        fake = mode.from_tensor(meta, symbolic_context=ctx)
        fake.fake_device = torch.device("cpu")
        for dim, ent in zip(fake.shape, shape):
            if isinstance(dim, torch.SymInt):
                symmap[dim.node.expr] = sympy.Integer(ent) if isinstance(ent, int) else sympy.Symbol(ent)
        args.append(fake)
        inputs.append({"name": k, "kind": "tensor", "dtype": _DT[dt], "shape": [str(d) for d in shape]})
    for k, v in (scalars or {}).items():
        args.append(v)
        inputs.append({"name": k, "kind": "float", "dtype": "float32", "shape": None})
    sent = {v: k for k, v in (scalars or {}).items()}
    gm = make_fx(lambda *a: fn(**dict(zip(names, a))), tracing_mode="symbolic",
                 decomposition_table=_decomp_table())(*args)
    if keep is not None:
        keep.update(gm=gm, names=names)

    def sym(e):
        return str(sympy.sympify(e).xreplace(symmap)).replace("FloorDiv", "floordiv")

    phs = {n.name: inp["name"] for n, inp in zip([n for n in gm.graph.nodes if n.op == "placeholder"], inputs)}

    def enc(a):
        if isinstance(a, torch.fx.Node):
            v = a.meta.get("val")
            if isinstance(v, torch.SymInt):
                return {"sym": sym(v.node.expr)}
            if a.op == "placeholder":
                return {"ref": phs[a.name]}
            return {"ref": a.name}
        if isinstance(a, torch.SymInt):
            return {"sym": sym(a.node.expr)}
        if isinstance(a, float):
            if a in sent:
                return {"scalar": sent[a]}
            return a if math.isfinite(a) else {"float": str(a)}
        if isinstance(a, (list, tuple)):
            return [enc(x) for x in a]
        if isinstance(a, torch.dtype):
            return {"dtype": _DT[a]}
        if isinstance(a, (torch.device, torch.layout, torch.memory_format)):
            return str(a).replace("torch.", "") if isinstance(a, torch.memory_format) else None
        return a

    nodes = []
    for n in gm.graph.nodes:
        if n.op == "output":
            outs = n.args[0] if isinstance(n.args[0], (list, tuple)) else [n.args[0]]
            return {"inputs": inputs, "nodes": nodes, "outputs": [enc(o) for o in outs]}
        if n.op == "get_attr":   # a constant tensor of the reference, by value (as the trace does)
            t = getattr(gm, n.target)
            nodes.append({"name": n.name, "op": "constant", "args": [], "kwargs": {},
                          "value": t.tolist() if t.dim() else t.item(), "dtype": _DT[t.dtype],
                          "shape": [str(d) for d in t.shape]})
            continue
        if n.op != "call_function":
            continue
        v = n.meta.get("val")
        if not isinstance(v, torch.Tensor):
            continue   # size arithmetic
        op = "getitem" if n.target is operator.getitem else str(n.target)
        nodes.append({"name": n.name, "op": op, "args": [enc(a) for a in n.args],
                      "kwargs": {k: enc(x) for k, x in n.kwargs.items()}, "dtype": _DT[v.dtype],
                      "shape": [sym(s.node.expr) if isinstance(s, torch.SymInt) else str(s) for s in v.shape]})
    raise AssertionError("no output")


# ── references (each written the way models write attention) ──────────────────────────────────
def ref_explicit_gqa_causal(q, k, v):
    """HF-style: (B, S, H, D) projections, transpose, repeat_kv by expand+reshape, triu(-inf) mask,
    softmax in fp32 then back, transpose + reshape out."""
    B, S, H, D = q.shape
    hkv = k.shape[2]
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    k = k[:, :, None].expand(B, hkv, H // hkv, S, D).reshape(B, H, S, D)
    v = v[:, :, None].expand(B, hkv, H // hkv, S, D).reshape(B, H, S, D)
    s = torch.matmul(q, k.transpose(2, 3)) * (D ** -0.5)
    s = s + torch.triu(torch.full((S, S), float("-inf"), dtype=q.dtype), diagonal=1)
    p = F.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(p, v).transpose(1, 2).reshape(B, S, H * D)


def ref_repeat_interleave_maskfill(q, k, v, scaling):
    """(B, H, S, D) inputs, GQA by repeat_interleave, causal by masked_fill(triu(ones bool)), a float
    scalar input as the scale."""
    S = q.shape[2]
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    s = torch.matmul(q, k.transpose(-1, -2)) * scaling
    causal = torch.triu(torch.ones(S, S, dtype=torch.bool), diagonal=1)
    s = s.masked_fill(causal[None, None], float("-inf"))
    return torch.matmul(torch.softmax(s, dim=-1), v)


def ref_bias_div_scale(q, k, v, bias):
    """scores / sqrt(d) + an additive bias input broadcast over batch (1, H, SQ, SK)."""
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    s = s + bias
    return torch.softmax(s, dim=-1) @ v


def ref_softcap_bool_mask(q, k, v, mask):
    """Gemma-style softcap, then a boolean keep-mask input (True = attend) via where."""
    s = torch.matmul(q, k.transpose(-1, -2)) * 0.125
    s = torch.tanh(s / 30.0) * 30.0
    s = torch.where(mask, s, torch.tensor(float("-inf"), dtype=s.dtype))
    return torch.matmul(F.softmax(s.float(), dim=-1).to(q.dtype), v)


def ref_packed_qkv(qkv):
    """A fused QKV projection output (B, S, 3, H, D) split by permute + unbind, non-causal, SDPA-free."""
    q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
    s = torch.matmul(q * q.shape[-1] ** -0.5, k.transpose(-2, -1))
    return torch.matmul(s.softmax(dim=-1), v).transpose(1, 2).flatten(2)


def ref_cross_bottom_right(q, k, v):
    """Decode-style causal aligned to the end of the keys: tril(ones(SQ, SK), diagonal=SK - SQ)."""
    sq, sk = q.shape[2], k.shape[2]
    keep = torch.tril(torch.ones(sq, sk, dtype=torch.bool), diagonal=sk - sq)
    s = (q @ k.transpose(-1, -2)) * 0.2
    s = s.masked_fill(~keep, float("-inf"))
    return s.softmax(-1) @ v


def ref_sliding_window(q, k, v):
    """Causal with a sliding window of 5 built from aranges: keep 0 <= i - j < 5."""
    S = q.shape[2]
    i = torch.arange(S)[:, None]
    j = torch.arange(S)[None, :]
    keep = (j <= i) & (i - j < 5)
    s = torch.matmul(q, k.transpose(-1, -2)) * 0.3
    s = s.masked_fill(~keep, float("-inf"))
    return torch.matmul(torch.softmax(s, -1), v)


def ref_sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def ref_returns_probs(q, k, v):
    """The probabilities are an output too: the scores cannot stay inside a kernel."""
    p = torch.softmax(q @ k.transpose(-1, -2) * 0.1, dim=-1)
    return p @ v, p


def ref_softmax_then_mean(x, w):
    """Softmax over a matmul, but reduced by a mean instead of a second matmul: not attention."""
    s = torch.bmm(x, w)
    return torch.softmax(s, dim=-1).mean(dim=-1)


def ref_softmax_dim1(q, k, v):
    """Softmax over the query dim: not attention."""
    s = q @ k.transpose(-1, -2)
    return torch.softmax(s, dim=-2) @ v


BF, F32 = torch.bfloat16, torch.float32
CASES = {
    "explicit_gqa_causal": (ref_explicit_gqa_causal, {"q": (["B", "S", 6, 32], BF), "k": (["B", "S", 2, 32], BF),
                                                      "v": (["B", "S", 2, 32], BF)}, None,
                            dict(group=3, causal=True, causal_offset="0", head_dim=32, round_scores=True)),
    "repeat_interleave_maskfill": (ref_repeat_interleave_maskfill,
                                   {"q": (["B", 6, "S", 16], F32), "k": (["B", 2, "S", 16], F32),
                                    "v": (["B", 2, "S", 16], F32)}, {"scaling": 0.8134765625},
                                   dict(group=3, causal=True, scale="(scaling)", round_scores=False)),
    "bias_div_scale": (ref_bias_div_scale, {"q": (["B", 4, "SQ", 24], F32), "k": (["B", 4, "SK", 24], F32),
                                            "v": (["B", 4, "SK", 24], F32), "bias": ([1, 4, "SQ", "SK"], F32)}, None,
                       dict(group=1, causal=False, head_dim=24)),
    "softcap_bool_mask": (ref_softcap_bool_mask, {"q": (["B", 4, "SQ", 64], BF), "k": (["B", 4, "SK", 64], BF),
                                                  "v": (["B", 4, "SK", 64], BF), "mask": (["B", 1, "SQ", "SK"], torch.bool)},
                          None, dict(softcap="30.0", mask_keep=True, round_scores=True)),
    "packed_qkv": (ref_packed_qkv, {"qkv": (["B", "S", 3, 4, 16], F32)}, None, dict(group=1, causal=False)),
    "cross_bottom_right": (ref_cross_bottom_right, {"q": (["B", 2, "SQ", 16], F32), "k": (["B", 2, "SK", 16], F32),
                                                    "v": (["B", 2, "SK", 16], F32)}, None, dict(causal=True)),
    "sliding_window": (ref_sliding_window, {"q": (["B", 2, "S", 16], F32), "k": (["B", 2, "S", 16], F32),
                                            "v": (["B", 2, "S", 16], F32)}, None, dict(causal=True, causal_offset="0", window="5")),
}


def _concrete(ir: dict, spec_shapes: dict, sizes: dict) -> dict:
    return {k: [d if isinstance(d, int) else sizes[d] for d in shape] for k, (shape, _) in spec_shapes.items()}


def _values(keep: dict, inputs: dict) -> dict:
    """Every node's value when the traced graph runs on `inputs` (intermediates a match reads)."""
    gm, names = keep["gm"], keep["names"]
    env = {}

    class Rec(torch.fx.Interpreter):
        def run_node(self, n):
            r = super().run_node(n)
            if isinstance(r, torch.Tensor):
                env[n.name] = r
            return r
    Rec(gm).run(*[inputs[k] for k in names])
    return env


def _run_match(name, keep=None):
    fn, specs, scalars, want = CASES[name]
    ir = trace_ir(fn, specs, scalars, keep)
    ms = match_attention(ir)
    assert len(ms) == 1, explain(ir)
    m = ms[0]
    for k, v in want.items():
        assert getattr(m.spec, k) == v, (k, getattr(m.spec, k), m.spec)
    return fn, specs, scalars, ir, m


@pytest.mark.parametrize("name", sorted(CASES))
def test_match_and_emulate(name):
    """Spec fields as the reference states them, then the lowering of the matched spec run on the CPU
    model equals the reference's output."""
    keep = {}
    fn, specs, scalars, ir, m = _run_match(name, keep)
    sizes = {"B": 2, "H": 6, "HKV": 2, "SQ": 19, "SK": 45, "S": 33}
    if name == "cross_bottom_right":
        sizes.update(SQ=7, SK=40)
    gen = torch.Generator().manual_seed(1)
    inputs = {}
    for k, (shape, dt) in specs.items():
        shp = [d if isinstance(d, int) else sizes[d] for d in shape]
        inputs[k] = (torch.rand(shp, generator=gen) < 0.8) if dt == torch.bool else torch.randn(shp, generator=gen).to(dt)
    if "mask" in inputs:
        inputs["mask"][..., 0] = True   # every row keeps a key
    sc = {k: 0.3 for k in (scalars or {})}
    want = fn(**inputs, **sc)
    want = want[0] if isinstance(want, tuple) else want
    # the matched output node is the graph's output here: allocate it in its traced shape
    out_shape = [int(axis_expr.evaluate(s, sizes)) for s in next(n["shape"] for n in ir["nodes"] if n["name"] == m.output)]
    assert [d for d in out_shape] == list(want.shape)
    got = torch.full(out_shape, float("nan"), dtype=want.dtype)
    vals = _values(keep, {**inputs, **sc})
    read = {t.arg for t in (m.spec.q, m.spec.k, m.spec.v, m.spec.bias, m.spec.mask) if t is not None}
    tensors = {**{a: vals[a].contiguous() for a in read if a not in inputs}, **inputs, m.output: got}
    low = generate(m.spec)
    emulate(low, tensors, {**sizes, **sc})
    tol = 2e-2 if want.dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(got.float(), want.float(), atol=tol, rtol=tol)


def ref_sdpa_bool_mask(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def ref_sdpa_gqa_bias(q, k, v, bias):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=True, scale=0.3)


SDPA = {
    "causal": (ref_sdpa, {"q": (["B", 4, "S", 16], F32), "k": (["B", 4, "S", 16], F32), "v": (["B", 4, "S", 16], F32)},
               dict(causal=True, empty_row_nan=False)),
    "bool_mask": (ref_sdpa_bool_mask, {"q": (["B", 4, "SQ", 16], BF), "k": (["B", 4, "SK", 16], BF),
                                       "v": (["B", 4, "SK", 16], BF), "mask": (["B", 1, "SQ", "SK"], torch.bool)},
                  dict(causal=False, mask_keep=True)),
    "gqa_bias": (ref_sdpa_gqa_bias, {"q": (["B", 6, "SQ", 32], F32), "k": (["B", 2, "SK", 32], F32),
                                     "v": (["B", 2, "SK", 32], F32), "bias": (["SQ", "SK"], F32)},
                 dict(group=3)),
}


@pytest.mark.parametrize("name", sorted(SDPA))
def test_sdpa_form(name):
    """F.scaled_dot_product_attention traces (on CPU fakes) to either a fused op or the math
    decomposition (safe softmax: fully masked rows give 0); when it decomposes to bmm/softmax/bmm,
    it is matched with its mask, bias and GQA group."""
    fn, specs, want = SDPA[name]
    ir = trace_ir(fn, specs)
    ops = {n["op"] for n in ir["nodes"]}
    if "aten.bmm.default" not in ops:
        pytest.skip(f"SDPA traced to a fused op here: {sorted(o for o in ops if 'attention' in o)}")
    ms = match_attention(ir)
    assert len(ms) == 1, explain(ir)
    for k, v in want.items():
        assert getattr(ms[0].spec, k) == v, (k, ms[0].spec)
    if name == "gqa_bias":
        assert ms[0].spec.bias is not None and ms[0].spec.bias.strides[:2] == ("0", "0")


@pytest.mark.parametrize("fn,specs", [
    (ref_returns_probs, {"q": (["B", 2, "S", 16], F32), "k": (["B", 2, "S", 16], F32), "v": (["B", 2, "S", 16], F32)}),
    (ref_softmax_then_mean, {"x": (["B", "S", 16], F32), "w": (["B", 16, "SK"], F32)}),
    (ref_softmax_dim1, {"q": (["B", 2, "S", 16], F32), "k": (["B", 2, "S", 16], F32), "v": (["B", 2, "S", 16], F32)}),
])
def test_not_attention(fn, specs):
    ir = trace_ir(fn, specs)
    assert match_attention(ir) == []
    assert explain(ir), "every bmm gets a reason"


def test_float_scalar_as_c_expression():
    """The trace may write a float scalar input as C over kernel params ({"symf": "((double)f_x)"}):
    the scale is still that input."""
    fn, specs, scalars, _ = CASES["repeat_interleave_maskfill"]
    ir = trace_ir(fn, specs, scalars)

    def swap(a):
        if isinstance(a, dict) and a.get("scalar") == "scaling":
            return {"symf": "((double)f_scaling)", "names": [], "fnames": ["scaling"]}
        return [swap(x) for x in a] if isinstance(a, list) else a
    for n in ir["nodes"]:
        n["args"] = swap(n["args"])
    (m,) = match_attention(ir)
    assert "scaling" in m.spec.scale and axis_expr.evaluate(m.spec.scale, {"scaling": 0.5}) == 0.5
