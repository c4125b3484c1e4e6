"""Single-op blocks: RMSNorm / LayerNorm, RoPE, attention core, MLP (forward and backward)."""

from __future__ import annotations

from typing import Optional

import torch

from . import modules as m
from .snippets import (ACT_FN, ACT_GRAD, ATTENTION_FN, INV_FREQ, LAYERNORM_FN, RMSNORM_FN,
                       ROPE_INTERLEAVED_FN, join, rope_constants)
from .spec import BlockSpec, T, const, fits, token_workloads, var

DT = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def eps_tag(eps: float) -> str:
    return f"eps{eps:g}".replace("-", "m").replace(".", "p")


def _out(x: torch.Tensor, dtype: str) -> torch.Tensor:
    return x.to(getattr(torch, dtype))


# ---- norms ----------------------------------------------------------------------------------
def build_norm(cfg, dim: Optional[int] = None, what: str = "hidden") -> BlockSpec:
    norm, dt = cfg.norm, cfg.dtype
    dim = dim or cfg.hidden_size
    rms = norm.type == "rmsnorm"
    inputs = {"x": T(["num_tokens", "hidden_size"], dt, "activations"),
              "weight": T(["hidden_size"], dt, "norm weight", "small" if norm.weight_offset else "gain")}
    if not rms and norm.bias:
        inputs["bias"] = T(["hidden_size"], dt, "norm bias", "small")
    consts = {"EPS": norm.eps}
    if rms:
        consts["NORM_WEIGHT_OFFSET"] = norm.weight_offset
        body = join(RMSNORM_FN, '''def run(x, weight):
    out = _rmsnorm(x.to(torch.float32), weight.to(torch.float32), EPS)
    return out.to(x.dtype)''')
    else:
        args = "x, weight, bias" if "bias" in inputs else "x, weight"
        b = "bias.to(torch.float32)" if "bias" in inputs else "None"
        body = join(LAYERNORM_FN, f'''def run({args}):
    out = _layernorm(x.to(torch.float32), weight.to(torch.float32), {b}, EPS)
    return out.to(x.dtype)''')

    def module_outputs(inp):
        params = {"weight": inp["weight"]}
        if "bias" in inp:
            params["bias"] = inp["bias"]
        mod = m.build(lambda: m.make_norm(norm, dim), params)
        return (_out(mod(inp["x"].float()), dt),)

    kind = "rmsnorm" if rms else "layernorm"
    off = "_gemma" if norm.weight_offset else ""
    return BlockSpec(
        kind=kind, name=f"{kind}{off}_h{dim}_{eps_tag(norm.eps)}_{DT[dt]}", op_type=kind,
        description=f"{kind} over the {what} dimension ({dim}), eps {norm.eps:g}"
                    + (", weight applied as (1 + w)" if norm.weight_offset else ""),
        axes={"num_tokens": var("tokens in the batch"), "hidden_size": const(dim)},
        inputs=inputs, outputs={"out": T(["num_tokens", "hidden_size"], dt, "normalized x")},
        constants=consts, body=body, workloads=token_workloads(), small_axes={"num_tokens": 5},
        module_outputs=module_outputs)


# ---- RoPE -----------------------------------------------------------------------------------
def build_rope(cfg, num_q: int, num_kv: int, head_dim: int, interleaved: bool = False,
               theta: Optional[float] = None, scaled: bool = True, tag: str = "") -> BlockSpec:
    rope, dt = cfg.rope, cfg.dtype
    rtype = rope.type if scaled else "default"
    mscale = m.rope_cos_sin_scale(rope) if scaled else 1.0
    consts = {**rope_constants(rope, theta, scaled), "PARTIAL_ROTARY_FACTOR": rope.partial_rotary_factor,
              "COS_SIN_SCALE": mscale}
    rotate = ROPE_INTERLEAVED_FN if interleaved else '''def _rope_rotate_half(x, cos, sin):
    """x [T, H, R]; cos/sin [T, R/2]: rotate channel pairs (i, i + R/2)."""
    c, s = cos[:, None, :], sin[:, None, :]
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)'''
    fn = "_rope_interleaved" if interleaved else "_rope_rotate_half"
    body = join(INV_FREQ[rtype], rotate, f'''def run(q, k, positions):
    """q [T, Hq, D], k [T, Hkv, D], positions [T]: rotate the first D * PARTIAL_ROTARY_FACTOR channels."""
    rot_dim = int(q.shape[-1] * PARTIAL_ROTARY_FACTOR)
    inv_freq = _inv_freq(rot_dim, q.device)
    angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]   # [T, rot_dim / 2]
    cos = (torch.cos(angles) * COS_SIN_SCALE).to(torch.float32)
    sin = (torch.sin(angles) * COS_SIN_SCALE).to(torch.float32)
    outs = []
    for x in (q, k):
        xf = x.to(torch.float32)
        rotated = {fn}(xf[..., :rot_dim], cos, sin)
        outs.append(torch.cat((rotated, xf[..., rot_dim:]), dim=-1).to(x.dtype))
    return outs[0], outs[1]''')

    def module_outputs(inp):
        rot_dim = int(inp["q"].shape[-1] * rope.partial_rotary_factor)
        inv = m.rope_inv_freq(rope, rot_dim, theta, scaled)
        return tuple(_out(m.apply_rope_complex(inp[n].float(), inp["positions"], inv, rot_dim,
                                               interleaved, mscale), dt) for n in ("q", "k"))

    shape_q, shape_k = ["num_tokens", "num_qo_heads", "head_dim"], ["num_tokens", "num_kv_heads", "head_dim"]
    style = "interleaved" if interleaved else "neox"
    th = f"{int(theta or rope.theta)}" if float(theta or rope.theta).is_integer() else f"{theta or rope.theta:g}"
    name = f"rope_{style}_{rtype}_theta{th}_h{num_q}_kv{num_kv}_d{head_dim}{tag}_{DT[dt]}"
    return BlockSpec(
        kind="rope", name=name, op_type="rope",
        description=f"rotary position embedding ({style} pairs, {rtype} frequencies, theta {th}) "
                    f"applied to q and k from integer positions",
        axes={"num_tokens": var(), "num_qo_heads": const(num_q), "num_kv_heads": const(num_kv),
              "head_dim": const(head_dim)},
        inputs={"q": T(shape_q, dt, "queries"), "k": T(shape_k, dt, "keys"),
                "positions": T(["num_tokens"], "int64", "token positions (drawn from [0, 32768))",
                               'torch.randint(0, 32768, (a["num_tokens"],), device=device)')},
        outputs={"q_out": T(shape_q, dt, "rotated queries"), "k_out": T(shape_k, dt, "rotated keys")},
        constants=consts, body=body, workloads=token_workloads(), small_axes={"num_tokens": 7},
        module_outputs=module_outputs)


# ---- attention core -------------------------------------------------------------------------
ATTN_MODES = ("prefill", "decode", "full", "cross")
BATCHES = (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)


def build_attention(cfg, at, mode: str, seq: Optional[int] = None, kv_const: Optional[int] = None,
                    window: Optional[int] = None, dtype: Optional[str] = None, tag: str = "") -> BlockSpec:
    """prefill: causal self-attention, q_len == kv_len; decode: one query over a KV cache;
    full: bidirectional self-attention (seq const if given); cross: queries over a fixed context."""
    dt = dtype or cfg.dtype
    hq, hkv, d = at.num_heads, at.num_kv_heads, at.head_dim
    causal = at.causal and mode in ("prefill", "decode")
    softcap = at.logit_softcap
    axes = {"batch_size": var()}
    if mode == "prefill":
        axes["seq_len"] = var()
        qs, ks = ["batch_size", "seq_len"], ["batch_size", "seq_len"]
    elif mode == "decode":
        axes["kv_len"] = var("tokens in the KV cache, the new one included")
        qs, ks = ["batch_size", 1], ["batch_size", "kv_len"]
    elif mode == "full":
        axes["seq_len"] = const(seq) if seq else var()
        qs, ks = ["batch_size", "seq_len"], ["batch_size", "seq_len"]
    else:
        axes["q_len"] = var()
        axes["kv_len"] = const(kv_const)
        qs, ks = ["batch_size", "q_len"], ["batch_size", "kv_len"]
    axes.update(num_qo_heads=const(hq), num_kv_heads=const(hkv), head_dim=const(d))
    consts = {"SCALE": at.softmax_scale, "CAUSAL": causal, "WINDOW": window, "SOFTCAP": softcap}
    body = join(ATTENTION_FN, '''def run(q, k, v):
    out = _attention(q.to(torch.float32), k.to(torch.float32), v.to(torch.float32),
                     SCALE, CAUSAL, WINDOW, SOFTCAP)
    return out.to(q.dtype)''')

    def module_outputs(inp):
        return (_out(m.attention(*(inp[n].float() for n in "qkv"), at.softmax_scale, causal, window,
                                 softcap), dt),)

    wl, small = _attn_workloads(mode, hq, axes, seq)
    extra = (f"_s{seq}" if mode == "full" and seq else "") + (f"_ctx{kv_const}" if mode == "cross" else "")
    extra += (f"_win{window}" if window else "")
    extra += f"_sc{at.softmax_scale:.4g}".replace(".", "p") if abs(at.softmax_scale - d ** -0.5) > 1e-9 else "" + (f"_cap{softcap:g}" if softcap else "")
    kind_name = {"prefill": "attn_prefill_causal", "decode": "attn_decode", "full": "attn_full",
                 "cross": "attn_cross"}[mode]
    shape_tail = ["num_qo_heads", "head_dim"]
    return BlockSpec(
        kind=f"attention_{mode}", name=f"{kind_name}_h{hq}_kv{hkv}_d{d}{extra}{tag}_{DT[dt]}",
        op_type="gqa" if hq != hkv else "mha",
        description=f"{'causal ' if causal else ''}{mode} attention core, {hq} query / {hkv} KV heads of "
                    f"{d}, scale {at.softmax_scale:.6g}" + (f", sliding window {window}" if window else "")
                    + (f", logit soft-cap {softcap:g}" if softcap else ""),
        axes=axes,
        inputs={"q": T(qs + shape_tail, dt, "queries"),
                "k": T(ks + ["num_kv_heads", "head_dim"], dt, "keys"),
                "v": T(ks + ["num_kv_heads", "head_dim"], dt, "values")},
        outputs={"out": T(qs + shape_tail, dt, "attention output")},
        constants=consts, body=body, workloads=wl, small_axes=small, module_outputs=module_outputs,
        constraints=["num_qo_heads % num_kv_heads == 0"])


def _attn_workloads(mode, hq, axes, seq):
    if mode == "decode":
        pairs = [(1, 512), (1, 4096), (1, 32768), (4, 2048), (8, 1024), (8, 8192), (16, 4096),
                 (32, 2048), (64, 1024), (128, 512), (256, 256), (16, 16384)]
        return ([{"batch_size": b, "kv_len": l} for b, l in pairs if b * l <= 262144],
                {"batch_size": 2, "kv_len": 9})
    if mode == "full" and axes["seq_len"]["type"] == "const":
        s = axes["seq_len"]["value"]
        return ([{"batch_size": b} for b in BATCHES if fits(4.0 * b * hq * s * s, 16e9)][:12],
                {"batch_size": 2})
    if mode == "cross":
        return ([{"batch_size": b, "q_len": q} for b, q in
                 [(1, 1), (8, 1), (64, 1), (1, 256), (1, 1024), (2, 4096), (4, 1024), (8, 448)]],
                {"batch_size": 2, "q_len": 5})
    pairs = [(1, 128), (1, 512), (1, 1024), (1, 2048), (1, 4096), (1, 8192), (2, 1024), (4, 512),
             (8, 256), (16, 128), (2, 4096), (4, 2048)]
    return ([{"batch_size": b, "seq_len": s} for b, s in pairs if fits(4.0 * b * hq * s * s)],
            {"batch_size": 2, "seq_len": 6})


# ---- MLP ------------------------------------------------------------------------------------
def _mlp_inputs(dt, gated: bool, bias: bool):
    h, i = "hidden_size", "intermediate_size"
    inp = {"x": T(["num_tokens", h], dt, "activations")}
    if gated:
        inp["gate_proj_weight"] = T([i, h], dt, "gate projection", "weight")
        inp["up_proj_weight"] = T([i, h], dt, "up projection", "weight")
        inp["down_proj_weight"] = T([h, i], dt, "down projection", "weight")
        if bias:
            inp["gate_proj_bias"] = T([i], dt, "gate bias", "small")
            inp["up_proj_bias"] = T([i], dt, "up bias", "small")
            inp["down_proj_bias"] = T([h], dt, "down bias", "small")
    else:
        inp["fc1_weight"] = T([i, h], dt, "first projection", "weight")
        if bias:
            inp["fc1_bias"] = T([i], dt, "first bias", "small")
        inp["fc2_weight"] = T([h, i], dt, "second projection", "weight")
        if bias:
            inp["fc2_bias"] = T([h], dt, "second bias", "small")
    return inp


MLP_PARAM = {"gate_proj_weight": "gate_proj.weight", "up_proj_weight": "up_proj.weight",
             "down_proj_weight": "down_proj.weight", "gate_proj_bias": "gate_proj.bias",
             "up_proj_bias": "up_proj.bias", "down_proj_bias": "down_proj.bias",
             "fc1_weight": "fc1.weight", "fc1_bias": "fc1.bias", "fc2_weight": "fc2.weight",
             "fc2_bias": "fc2.bias"}


def build_mlp(cfg, hidden: int, inter: int, act: str, gated: bool, bias: bool,
              what: str = "MLP", dtype: Optional[str] = None) -> BlockSpec:
    dt = dtype or cfg.dtype
    inputs = _mlp_inputs(dt, gated, bias)
    names = [n for n in inputs if n != "x"]
    lin = lambda w, b: f"torch.matmul({{x}}, {w}.to(torch.float32).t())" + (
        f" + {b}.to(torch.float32)" if bias else "")
    if gated:
        code = f'''def run(x, {", ".join(names)}):
    xf = x.to(torch.float32)
    gate = {lin("gate_proj_weight", "gate_proj_bias").format(x="xf")}
    up = {lin("up_proj_weight", "up_proj_bias").format(x="xf")}
    hidden = _act(gate) * up
    out = {lin("down_proj_weight", "down_proj_bias").format(x="hidden")}
    return out.to(x.dtype)'''
    else:
        code = f'''def run(x, {", ".join(names)}):
    xf = x.to(torch.float32)
    hidden = _act({lin("fc1_weight", "fc1_bias").format(x="xf")})
    out = {lin("fc2_weight", "fc2_bias").format(x="hidden")}
    return out.to(x.dtype)'''

    def module_outputs(inp):
        mod = m.build(lambda: m.make_mlp(hidden, inter, act, gated, bias),
                            {MLP_PARAM[n]: inp[n] for n in names})
        return (_out(mod(inp["x"].float()), dt),)

    style = ("swiglu" if act == "silu" else f"geglu_{act}") if gated else f"mlp_{act}"
    return BlockSpec(
        kind="mlp", name=f"{style}{'_bias' if bias else ''}_h{hidden}_i{inter}_{DT[dt]}", op_type="mlp",
        description=f"{what}: {'gated ' if gated else ''}{act} MLP {hidden} -> {inter} -> {hidden}"
                    + (" with biases" if bias else ""),
        axes={"num_tokens": var(), "hidden_size": const(hidden), "intermediate_size": const(inter)},
        inputs=inputs, outputs={"out": T(["num_tokens", "hidden_size"], dt, "MLP output")},
        constants={}, body=join(ACT_FN[act], code), workloads=token_workloads(),
        small_axes={"num_tokens": 5}, module_outputs=module_outputs)


def build_mlp_backward(cfg, hidden: int, inter: int, act: str, what: str = "MLP") -> BlockSpec:
    """Training: gradients of a gated, bias-free MLP w.r.t. its input and its three weights."""
    dt = cfg.dtype
    inputs = {"grad_out": T(["num_tokens", "hidden_size"], dt, "upstream gradient",
                            'torch.randn(a["num_tokens"], a["hidden_size"], device=device) / math.sqrt(a["hidden_size"])'),
              **_mlp_inputs(dt, True, False)}
    code = '''def run(grad_out, x, gate_proj_weight, up_proj_weight, down_proj_weight):
    go, xf = grad_out.to(torch.float32), x.to(torch.float32)
    w_gate, w_up, w_down = (w.to(torch.float32) for w in (gate_proj_weight, up_proj_weight, down_proj_weight))
    # forward recomputation
    gate = torch.matmul(xf, w_gate.t())
    up = torch.matmul(xf, w_up.t())
    act = _act(gate)
    hidden = act * up
    # backward
    grad_down = torch.matmul(go.t(), hidden)                  # [H, I]
    grad_hidden = torch.matmul(go, w_down)                    # [T, I]
    grad_gate = grad_hidden * up * _act_grad(gate)
    grad_up = grad_hidden * act
    grad_gate_w = torch.matmul(grad_gate.t(), xf)
    grad_up_w = torch.matmul(grad_up.t(), xf)
    grad_x = torch.matmul(grad_gate, w_gate) + torch.matmul(grad_up, w_up)
    return (grad_x.to(x.dtype), grad_gate_w.to(x.dtype), grad_up_w.to(x.dtype),
            grad_down.to(x.dtype))'''

    def module_outputs(inp):
        mod = m.build(lambda: m.GatedMLP(hidden, inter, act),
                            {MLP_PARAM[n]: inp[n] for n in ("gate_proj_weight", "up_proj_weight",
                                                            "down_proj_weight")})
        x = inp["x"].float().requires_grad_(True)
        mod(x).backward(inp["grad_out"].float())
        return tuple(_out(g, dt) for g in (x.grad, mod.gate_proj.weight.grad, mod.up_proj.weight.grad,
                                           mod.down_proj.weight.grad))

    h, i = "hidden_size", "intermediate_size"
    style = "swiglu" if act == "silu" else f"geglu_{act}"
    spec = BlockSpec(
        kind="mlp_backward", name=f"{style}_backward_h{hidden}_i{inter}_{DT[dt]}", op_type="mlp_backward",
        description=f"{what} backward (training): gradients of a gated {act} MLP {hidden} -> {inter} "
                    f"w.r.t. x and the gate, up and down weights",
        axes={"num_tokens": var(), h: const(hidden), i: const(inter)}, inputs=inputs,
        outputs={"grad_x": T(["num_tokens", h], dt, "dL/dx"),
                 "grad_gate_proj_weight": T([i, h], dt, "dL/dW_gate"),
                 "grad_up_proj_weight": T([i, h], dt, "dL/dW_up"),
                 "grad_down_proj_weight": T([h, i], dt, "dL/dW_down")},
        constants={}, body=join(ACT_FN[act], ACT_GRAD[act], code),
        workloads=[{"num_tokens": t} for t in (128, 512, 1024, 2048, 4096, 8192, 16384, 32768)],
        small_axes={"num_tokens": 6}, module_outputs=module_outputs, composite=True)
    return spec
