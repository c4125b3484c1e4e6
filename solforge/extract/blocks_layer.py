"""Whole transformer layers: LLM decoder layers (pre-norm, Gemma sandwich, OLMo 2 post-norm, Falcon
parallel) and encoder layers (ViT / SigLIP / CLIP / DINOv2 / Whisper), weights as inputs."""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from . import modules as m
from .blocks_core import DT, MLP_PARAM, _out
from .snippets import ACT_FN, ATTENTION_FN, LAYERNORM_FN, RMSNORM_FN, ROTATE_HALF_FN, join
from .spec import BlockSpec, T, const, expr, fits, var

NORMS = {"pre": [("input_layernorm", "before attention"), ("post_attention_layernorm", "before the MLP")],
         "sandwich": [("input_layernorm", "before attention"), ("post_attention_layernorm", "after attention"),
                      ("pre_feedforward_layernorm", "before the MLP"), ("post_feedforward_layernorm", "after the MLP")],
         "post": [("post_attention_layernorm", "after attention"), ("post_feedforward_layernorm", "after the MLP")],
         "parallel": [("input_layernorm", "shared by attention and MLP")]}

LAYOUT_CODE = {
    "pre": '''    h = x + RESIDUAL_MULTIPLIER * LS1 * _self_attention(_norm(x, "input_layernorm", w), cos, sin, w)
    out = h + RESIDUAL_MULTIPLIER * LS2 * _mlp(_norm(h, "post_attention_layernorm", w), w)''',
    "sandwich": '''    attn = _self_attention(_norm(x, "input_layernorm", w), cos, sin, w)
    h = x + _norm(attn, "post_attention_layernorm", w)
    mlp = _mlp(_norm(h, "pre_feedforward_layernorm", w), w)
    out = h + _norm(mlp, "post_feedforward_layernorm", w)''',
    "post": '''    h = x + _norm(_self_attention(x, cos, sin, w), "post_attention_layernorm", w)
    out = h + _norm(_mlp(h, w), "post_feedforward_layernorm", w)''',
    "parallel": '''    normed = _norm(x, "input_layernorm", w)
    out = x + _self_attention(normed, cos, sin, w) + _mlp(normed, w)''',
}

HELPERS = '''def _linear(x, w, name):
    y = torch.matmul(x, w[name + "_weight"].t())
    if name + "_bias" in w:
        y = y + w[name + "_bias"]
    return y


def _norm(x, name, w):
    if NORM == "rmsnorm":
        return _rmsnorm(x, w[name + "_weight"], EPS)
    return _layernorm(x, w[name + "_weight"], w.get(name + "_bias"), EPS)


def _self_attention(x, cos, sin, w):
    batch, seq, _ = x.shape
    q, k, v = _linear(x, w, "q_proj"), _linear(x, w, "k_proj"), _linear(x, w, "v_proj")
    if QK_NORM == "full":  # norm over the whole projection (OLMo 2)
        q, k = _norm(q, "q_norm", w), _norm(k, "k_norm", w)
    head_dim = q.shape[-1] // NUM_HEADS
    q = q.view(batch, seq, NUM_HEADS, head_dim)
    k = k.view(batch, seq, NUM_KV_HEADS, head_dim)
    v = v.view(batch, seq, NUM_KV_HEADS, head_dim)
    if QK_NORM == "head":  # per-head norm (Qwen3, Gemma 3)
        q, k = _norm(q, "q_norm", w), _norm(k, "k_norm", w)
    if cos is not None:
        q, k = _rope_rotate_half(q, cos, sin), _rope_rotate_half(k, cos, sin)
    o = _attention(q, k, v, SCALE, CAUSAL, WINDOW, SOFTCAP)
    return _linear(o.reshape(batch, seq, NUM_HEADS * head_dim), w, "o_proj")


def _mlp(x, w):
    if GATED:
        return _linear(_act(_linear(x, w, "gate_proj")) * _linear(x, w, "up_proj"), w, "down_proj")
    return _linear(_act(_linear(x, w, "fc1")), w, "fc2")'''


class Layer(nn.Module):
    def __init__(self, cfg, layout: str, layerscale: bool):
        super().__init__()
        h, at, mc = cfg.hidden_size, cfg.attention, cfg.mlp
        self.layout, self.rm = layout, cfg.residual_multiplier or 1.0
        self.self_attn = m.SelfAttention(h, at, cfg.norm)
        self.mlp = m.make_mlp(h, mc.intermediate_size, mc.activation, mc.gated, mc.bias)
        for n, _ in NORMS[layout]:
            setattr(self, n, m.make_norm(cfg.norm, h))
        if layerscale:
            self.ls1, self.ls2 = nn.Parameter(torch.ones(h)), nn.Parameter(torch.ones(h))
        self.layerscale, self.window = layerscale, None

    def forward(self, x, cos=None, sin=None):
        attn = lambda t: self.self_attn(t, cos, sin, self.window)
        if self.layout == "pre":
            ls1, ls2 = (self.ls1, self.ls2) if self.layerscale else (1.0, 1.0)
            h = x + self.rm * ls1 * attn(self.input_layernorm(x))
            return h + self.rm * ls2 * self.mlp(self.post_attention_layernorm(h))
        if self.layout == "sandwich":
            h = x + self.post_attention_layernorm(attn(self.input_layernorm(x)))
            return h + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(h)))
        if self.layout == "post":
            h = x + self.post_attention_layernorm(attn(x))
            return h + self.post_feedforward_layernorm(self.mlp(h))
        n = self.input_layernorm(x)
        return x + attn(n) + self.mlp(n)


def _param_path(name: str) -> str:
    base, _, leaf = name.rpartition("_")
    if name in MLP_PARAM:
        return "mlp." + MLP_PARAM[name]
    if base in ("q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm"):
        return f"self_attn.{base}.{leaf}"
    if name in ("layer_scale1", "layer_scale2"):
        return "ls1" if name.endswith("1") else "ls2"
    return f"{base}.{leaf}"


def build_layer(cfg, encoder: bool = False, seq_const: Optional[int] = None,
                window: Optional[int] = None) -> BlockSpec:
    at, mc, norm, dt = cfg.attention, cfg.mlp, cfg.norm, cfg.dtype
    layout = cfg.layer_norm_placement
    layerscale = bool(cfg.vision and cfg.vision.layerscale)
    use_rope = cfg.rope is not None and not encoder
    h, i = "hidden_size", "intermediate_size"
    qo, kvd = "qo_dim", "kv_dim"
    inp: dict[str, T] = {"hidden_states": T(["batch_size", "seq_len", h], dt, "layer input")}
    if use_rope:
        inp["cos"] = T(["seq_len", "rot_dim"], "float32", "RoPE cosines", _COS)
        inp["sin"] = T(["seq_len", "rot_dim"], "float32", "RoPE sines", _COS.replace("torch.cos", "torch.sin"))

    def add_norm(name, dim_axis, desc):
        inp[f"{name}_weight"] = T([dim_axis], dt, desc, "small" if norm.weight_offset else "gain")
        if norm.type == "layernorm" and norm.bias:
            inp[f"{name}_bias"] = T([dim_axis], dt, desc + " (bias)", "small")

    def add_linear(name, out_axis, in_axis, bias):
        inp[f"{name}_weight"] = T([out_axis, in_axis], dt, f"{name} weight", "weight")
        if bias:
            inp[f"{name}_bias"] = T([out_axis], dt, f"{name} bias", "small")

    norms = NORMS[layout]
    for n, desc in norms[:1] if layout != "post" else []:
        add_norm(n, h, f"norm {desc}")
    kb = at.qkv_bias if at.k_bias is None else at.k_bias
    add_linear("q_proj", qo, h, at.qkv_bias)
    add_linear("k_proj", kvd, h, kb)
    add_linear("v_proj", kvd, h, at.qkv_bias)
    if at.qk_norm != "none":
        add_norm("q_norm", "head_dim" if at.qk_norm == "head" else qo, "query norm")
        add_norm("k_norm", "head_dim" if at.qk_norm == "head" else kvd, "key norm")
    add_linear("o_proj", h, qo, at.o_bias)
    for n, desc in (norms[1:] if layout != "post" else norms):
        add_norm(n, h, f"norm {desc}")
    if mc.gated:
        add_linear("gate_proj", i, h, mc.bias)
        add_linear("up_proj", i, h, mc.bias)
        add_linear("down_proj", h, i, mc.bias)
    else:
        add_linear("fc1", i, h, mc.bias)
        add_linear("fc2", h, i, mc.bias)
    if layerscale:
        inp["layer_scale1"] = T([h], dt, "LayerScale after attention", "gain")
        inp["layer_scale2"] = T([h], dt, "LayerScale after the MLP", "gain")

    weights = [n for n in inp if n not in ("hidden_states", "cos", "sin")]
    causal = at.causal and not encoder
    consts = {"NUM_HEADS": at.num_heads, "NUM_KV_HEADS": at.num_kv_heads, "SCALE": at.softmax_scale,
              "CAUSAL": causal, "WINDOW": window, "SOFTCAP": at.logit_softcap, "NORM": norm.type,
              "EPS": norm.eps, "NORM_WEIGHT_OFFSET": norm.weight_offset, "QK_NORM": at.qk_norm,
              "GATED": mc.gated, "RESIDUAL_MULTIPLIER": cfg.residual_multiplier or 1.0}
    layout_code = LAYOUT_CODE[layout]
    if layerscale:
        layout_code = layout_code.replace("LS1", 'w["layer_scale1"]').replace("LS2", 'w["layer_scale2"]')
    else:
        layout_code = layout_code.replace(" * LS1", "").replace(" * LS2", "")
    if (cfg.residual_multiplier or 1.0) == 1.0:
        layout_code = layout_code.replace("RESIDUAL_MULTIPLIER * ", "")
        consts.pop("RESIDUAL_MULTIPLIER")
    rope_args = "cos, sin, " if use_rope else ""
    run = f'''def run(hidden_states, {rope_args}{", ".join(weights)}):
    args = dict(locals())
    # every weight in float32, by its input name
    w = {{name: t.to(torch.float32) for name, t in args.items()
         if name not in ("hidden_states", "cos", "sin")}}
    x = hidden_states.to(torch.float32)
{"" if use_rope else "    cos = sin = None" + chr(10)}{layout_code}
    return out.to(hidden_states.dtype)'''
    body = join(RMSNORM_FN if norm.type == "rmsnorm" else LAYERNORM_FN, ACT_FN[mc.activation],
                ATTENTION_FN, ROTATE_HALF_FN if use_rope else "", HELPERS, run)
    if norm.type != "rmsnorm":
        consts.pop("NORM_WEIGHT_OFFSET")

    def module_outputs(x):
        mod = m.build(lambda: Layer(cfg, layout, layerscale), {_param_path(n): x[n] for n in weights})
        mod.self_attn.at = at.model_copy(update={"causal": causal})
        mod.window = window
        args = (x["cos"], x["sin"]) if use_rope else ()
        return (_out(mod(x["hidden_states"].float(), *args), dt),)

    axes = {"batch_size": var(), "seq_len": const(seq_const) if seq_const else var(),
            h: const(cfg.hidden_size), "num_qo_heads": const(at.num_heads),
            "num_kv_heads": const(at.num_kv_heads), "head_dim": const(at.head_dim),
            qo: expr("num_qo_heads * head_dim"), kvd: expr("num_kv_heads * head_dim"),
            i: const(mc.intermediate_size)}
    if use_rope:
        axes["rot_dim"] = const(int(at.head_dim * cfg.rope.partial_rotary_factor))
    kind = "encoder_layer" if encoder else "decoder_layer"
    if encoder:
        s = seq_const
        wl = [{"batch_size": b} for b in (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)
              if fits(4.0 * b * at.num_heads * s * s, 16e9) and fits(4.0 * b * s * mc.intermediate_size, 16e9)][:12]
        small = {"batch_size": 2}
    else:
        pairs = [(1, 128), (1, 512), (1, 1024), (1, 2048), (1, 4096), (2, 512), (4, 256), (8, 128),
                 (2, 2048), (4, 1024)]
        wl = [{"batch_size": b, "seq_len": s} for b, s in pairs
              if fits(4.0 * b * at.num_heads * s * s) and fits(4.0 * b * s * mc.intermediate_size)]
        small = {"batch_size": 2, "seq_len": 5}
    return BlockSpec(
        kind=kind, name=f"{kind}_{cfg.name.replace('.', 'p').replace('-', '_')}_{DT[dt]}", op_type=kind,
        description=f"one whole {cfg.display_name} {'encoder' if encoder else 'decoder'} layer "
                    f"({layout}-norm, {at.num_heads}/{at.num_kv_heads} heads of {at.head_dim}, "
                    f"{'gated ' if mc.gated else ''}{mc.activation} MLP {mc.intermediate_size})",
        axes=axes, inputs=inp, outputs={"out": T(["batch_size", "seq_len", h], dt, "layer output")},
        constants=consts, body=body, workloads=wl, small_axes=small, module_outputs=module_outputs,
        composite=True)


# cos/sin of real RoPE angles: position * theta^(-2j/rot_dim), laid out as [freqs, freqs]
_COS = ('torch.cos(torch.cat([torch.arange(a["seq_len"], device=device)[:, None] * 10000.0 ** '
        '(-torch.arange(0, a["rot_dim"], 2, device=device) / a["rot_dim"])[None, :]] * 2, dim=-1))')
