"""Which hot subgraphs to extract from a model, by architecture.

`plan(cfg)` lists the BlockSpecs of a config. The faithfulness check calls it again on the small
twin (`small=True`, `ref=` the real config) and pairs the two lists position by position, so the
order and the set of blocks must depend only on structure, never on sizes.
"""

from __future__ import annotations

from typing import Optional

from .blocks_core import build_attention, build_mlp, build_mlp_backward, build_norm, build_rope
from .blocks_diffusion import build_adaln, build_groupnorm_silu
from .blocks_layer import build_layer
from .blocks_moe import build_experts, build_mla_decode, build_mla_prefill, build_router
from .blocks_ssm import (build_causal_conv, build_gated_rmsnorm, build_mamba1_scan, build_mamba2_scan,
                         build_mamba2_step)
from .spec import BlockSpec
from .zoo import Arch, ModelConfig, Norm


def plan(cfg: ModelConfig, small: bool = False, ref: Optional[ModelConfig] = None) -> list[BlockSpec]:
    ref = ref or cfg
    a = cfg.arch
    if a in (Arch.DENSE_LLM, Arch.MOE_LLM):
        return _llm(cfg)
    if a == Arch.VISION_ENCODER:
        return _vision(cfg, small)
    if a == Arch.AUDIO_ENCDEC:
        return _audio(cfg, small)
    if a == Arch.DIFFUSION_DIT:
        return _dit(cfg)
    if a == Arch.DIFFUSION_UNET:
        return _unet(cfg, ref, small)
    return _ssm_family(cfg)


def _qk_norm(cfg) -> list[BlockSpec]:
    at = cfg.attention
    if at and at.qk_norm == "head":
        return [build_norm(cfg, at.head_dim, "attention head (q/k norm)")]
    return []


def _attention_pair(cfg) -> list[BlockSpec]:
    at = cfg.attention
    alternating = bool(cfg.extra.get("sliding_window_pattern"))
    windows = [None, at.sliding_window] if alternating and at.sliding_window else [at.sliding_window]
    out = []
    for w in windows:
        out += [build_attention(cfg, at, "prefill", window=w), build_attention(cfg, at, "decode", window=w)]
    return out


def _llm(cfg) -> list[BlockSpec]:
    at, mc, mo = cfg.attention, cfg.mlp, cfg.moe
    specs = [build_norm(cfg)] + _qk_norm(cfg)
    if cfg.mla:
        specs.append(build_rope(cfg, at.num_heads, 1, cfg.mla.qk_rope_head_dim, interleaved=True))
        specs += [build_mla_prefill(cfg), build_mla_decode(cfg)]
    else:
        if cfg.rope:
            specs.append(build_rope(cfg, at.num_heads, at.num_kv_heads, at.head_dim))
            if cfg.rope.local_theta:
                specs.append(build_rope(cfg, at.num_heads, at.num_kv_heads, at.head_dim,
                                        theta=cfg.rope.local_theta, scaled=False, tag="_local"))
        specs += _attention_pair(cfg)
    if mc:  # dense MLP (every layer of a dense model; the first dense layers of a MoE model)
        specs.append(build_mlp(cfg, cfg.hidden_size, mc.intermediate_size, mc.activation, mc.gated, mc.bias))
        if mc.gated:
            specs.append(build_mlp_backward(cfg, cfg.hidden_size, mc.intermediate_size, mc.activation))
    if mo:
        specs += [build_router(cfg), build_experts(cfg)]
        act = mc.activation if mc else "silu"
        if mo.num_shared_experts:
            specs.append(build_mlp(cfg, cfg.hidden_size, mo.shared_intermediate_size, act, True, False,
                                   what="MoE shared expert(s)"))
        specs.append(build_mlp_backward(cfg, cfg.hidden_size, mo.expert_intermediate_size, act,
                                        what="one MoE expert"))
    if cfg.arch == Arch.DENSE_LLM:
        alternating = bool(cfg.extra.get("sliding_window_pattern"))
        specs.append(build_layer(cfg, window=None if alternating else at.sliding_window))
    return specs


def _vision(cfg, small: bool) -> list[BlockSpec]:
    v, at, mc = cfg.vision, cfg.attention, cfg.mlp
    specs = [build_norm(cfg)]
    if v.window_size:  # SAM: windowed (14 x 14) and global (64 x 64) attention
        specs += [build_attention(cfg, at, "full", seq=9 if small else v.window_size ** 2, tag="_window"),
                  build_attention(cfg, at, "full", seq=16 if small else (v.image_size // v.patch_size) ** 2)]
    else:
        tokens = (v.image_size // v.patch_size) ** 2 + (1 if v.cls_token else 0)
        specs.append(build_attention(cfg, at, "full", seq=9 if small else tokens))
    specs.append(build_mlp(cfg, cfg.hidden_size, mc.intermediate_size, mc.activation, mc.gated, mc.bias))
    if not v.window_size:
        tokens = (v.image_size // v.patch_size) ** 2 + (1 if v.cls_token else 0)
        specs.append(build_layer(cfg, encoder=True, seq_const=9 if small else tokens))
    return specs


def _audio(cfg, small: bool) -> list[BlockSpec]:
    at, mc = cfg.attention, cfg.mlp
    frames = 9 if small else int(cfg.extra.get("max_source_positions", 1500))
    self_attn = at.model_copy(update={"causal": True})
    return [build_norm(cfg),
            build_layer(cfg, encoder=True, seq_const=frames),
            build_attention(cfg, self_attn, "decode"),
            build_attention(cfg, at, "cross", kv_const=frames),
            build_mlp(cfg, cfg.hidden_size, mc.intermediate_size, mc.activation, mc.gated, mc.bias)]


def _dit(cfg) -> list[BlockSpec]:
    at, mc = cfg.attention, cfg.mlp
    specs = [build_adaln(cfg), build_attention(cfg, at, "full"),
             build_mlp(cfg, cfg.hidden_size, mc.intermediate_size, mc.activation, mc.gated, mc.bias)]
    if at.qk_norm == "head":  # RMSNorm over each head's q and k
        rms = cfg.model_copy(update={"norm": Norm(type="rmsnorm", eps=1e-6)})
        specs.append(build_norm(rms, at.head_dim, "attention head (q/k norm)"))
    return specs


def _unet(cfg, ref, small: bool) -> list[BlockSpec]:
    d, rd = cfg.diffusion, ref.diffusion
    specs = []
    ctx = 7 if small else 77  # CLIP text context length
    for i, (c, rc) in enumerate(zip(d.block_out_channels, rd.block_out_channels)):
        spatial = d.sample_size // 2 ** i if not small else 4
        specs.append(build_groupnorm_silu(cfg, c, spatial if not small else 4))
        if not (d.transformer_layers_per_block or [1])[i]:
            continue
        heads = c // d.attention_head_dim if d.attention_head_dim else cfg.attention.num_heads
        # the softmax scale comes from the real stage's head size, so the small twin keeps it
        real_hd = rd.attention_head_dim or rc // ref.attention.num_heads
        at = cfg.attention.model_copy(update={"num_heads": heads, "num_kv_heads": heads,
                                              "head_dim": c // heads, "scale": real_hd ** -0.5})
        ln = cfg.model_copy(update={"norm": Norm(type="layernorm", eps=1e-5, bias=True)})
        specs += [build_norm(ln, c, "transformer-block channel"),
                  build_attention(cfg, at, "full"),
                  build_attention(cfg, at, "cross", kv_const=ctx),
                  build_mlp(cfg, c, 4 * c, "gelu", True, True, what="GEGLU feed-forward")]
    return specs


def _ssm_family(cfg) -> list[BlockSpec]:
    s = cfg.ssm
    specs = [build_norm(cfg)]
    if s.kind == "mamba2":
        specs += [build_mamba2_scan(cfg), build_mamba2_step(cfg),
                  build_causal_conv(cfg, s.d_inner + 2 * s.ngroups * s.d_state), build_gated_rmsnorm(cfg)]
    else:
        specs += [build_mamba1_scan(cfg), build_causal_conv(cfg, s.d_inner)]
    if cfg.arch == Arch.HYBRID:
        at, mc = cfg.attention, cfg.mlp
        if cfg.rope:
            specs.append(build_rope(cfg, at.num_heads, at.num_kv_heads, at.head_dim))
        specs += _attention_pair(cfg)
        if mc:
            specs.append(build_mlp(cfg, cfg.hidden_size, mc.intermediate_size, mc.activation, mc.gated, mc.bias))
        if cfg.moe:
            specs += [build_router(cfg), build_experts(cfg)]
    return specs
