"""Mixture-of-experts routing (softmax / sigmoid, group-limited, bias-corrected) and expert dispatch,
and DeepSeek multi-head latent attention (MLA: prefill block and absorbed decode)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from . import modules as m
from .blocks_core import DT, _out
from .snippets import ACT_FN, ATTENTION_FN, RMSNORM_FN, ROPE_INTERLEAVED_FN, join
from .spec import BlockSpec, T, const, expr, fits, var

EXPERT_TOKENS = [1, 4, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192]


# ---- routing --------------------------------------------------------------------------------
class Router(nn.Module):
    def __init__(self, hidden: int, moe):
        super().__init__()
        self.moe = moe
        self.gate = nn.Linear(hidden, moe.num_experts, bias=False)
        if moe.score_correction_bias:
            self.e_score_correction_bias = nn.Parameter(torch.zeros(moe.num_experts))

    def forward(self, x):
        mo = self.moe
        logits = self.gate(x)
        scores = logits.softmax(-1) if mo.scoring == "softmax" else logits.sigmoid()
        choice = scores + self.e_score_correction_bias if mo.score_correction_bias else scores
        if mo.n_group > 1:
            g = choice.unflatten(-1, (mo.n_group, -1))
            if mo.score_correction_bias:
                gscore = g.sort(-1, descending=True).values[..., :2].sum(-1)
            else:
                gscore = g.amax(-1)
            keep = torch.zeros_like(gscore, dtype=torch.bool)
            keep.scatter_(1, torch.sort(gscore, dim=-1, descending=True).indices[:, : mo.topk_group], True)
            choice = torch.where(keep[..., None], g, torch.tensor(float("-inf"))).flatten(1)
        ids = torch.sort(choice, dim=-1, descending=True, stable=True).indices[:, : mo.top_k]
        w = torch.gather(scores, 1, ids)
        if mo.norm_topk_prob:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        return w * mo.routed_scaling_factor, ids


def build_router(cfg) -> BlockSpec:
    mo, dt = cfg.moe, cfg.dtype
    inputs = {"x": T(["num_tokens", "hidden_size"], dt, "activations"),
              "router_weight": T(["num_experts", "hidden_size"], dt, "router (gate) weight", "weight")}
    if mo.score_correction_bias:
        inputs["correction_bias"] = T(["num_experts"], "float32", "e_score_correction_bias", "small")
    args = ", ".join(inputs)
    group_code = ""
    if mo.n_group > 1:
        pick = ("grouped.topk(2, dim=-1).values.sum(dim=-1)  # sum of each group's best two"
                if mo.score_correction_bias else "grouped.max(dim=-1).values  # each group's best")
        group_code = f'''
    # group-limited routing: keep the TOPK_GROUP best of N_GROUP expert groups per token
    grouped = choice.view(num_tokens, N_GROUP, -1)
    group_scores = {pick}
    top_groups = torch.topk(group_scores, TOPK_GROUP, dim=-1).indices
    group_mask = torch.zeros_like(group_scores).scatter_(1, top_groups, 1.0)
    expert_mask = group_mask[:, :, None].expand_as(grouped).reshape(num_tokens, -1)
    choice = choice.masked_fill(expert_mask == 0, float("-inf"))'''
    body = f'''def run({args}):
    num_tokens = x.shape[0]
    logits = torch.matmul(x.to(torch.float32), router_weight.to(torch.float32).t())   # [T, E]
    scores = {"torch.softmax(logits, dim=-1)" if mo.scoring == "softmax" else "torch.sigmoid(logits)"}
    choice = {"scores + correction_bias.to(torch.float32)" if mo.score_correction_bias else "scores"}{group_code}
    topk_ids = torch.topk(choice, TOP_K, dim=-1, sorted=True).indices                 # best first
    topk_weights = torch.gather(scores, 1, topk_ids)
    if NORM_TOPK_PROB:
        topk_weights = topk_weights / (topk_weights.sum(dim=-1, keepdim=True) + 1e-20)
    topk_weights = topk_weights * ROUTED_SCALING_FACTOR
    return topk_weights, topk_ids'''
    consts = {"TOP_K": mo.top_k, "N_GROUP": mo.n_group, "TOPK_GROUP": mo.topk_group,
              "NORM_TOPK_PROB": mo.norm_topk_prob, "ROUTED_SCALING_FACTOR": mo.routed_scaling_factor}
    if mo.n_group == 1:
        consts.pop("N_GROUP"), consts.pop("TOPK_GROUP")

    def module_outputs(x):
        params = {"gate.weight": x["router_weight"]}
        if mo.score_correction_bias:
            params["e_score_correction_bias"] = x["correction_bias"]
        w, ids = m.build(lambda: Router(cfg.hidden_size, mo), params)(x["x"].float())
        return w.float(), ids

    grp = f"_g{mo.n_group}k{mo.topk_group}" if mo.n_group > 1 else ""
    name = (f"moe_router_{mo.scoring}{'_bias' if mo.score_correction_bias else ''}_e{mo.num_experts}"
            f"_top{mo.top_k}{grp}{'_norm' if mo.norm_topk_prob else ''}"
            f"{f'_s{mo.routed_scaling_factor:g}' if mo.routed_scaling_factor != 1 else ''}"
            f"_h{cfg.hidden_size}_{DT[dt]}").replace(".", "p")
    return BlockSpec(
        kind="moe_router", name=name, op_type="moe_routing",
        description=f"MoE router: {mo.scoring} scores over {mo.num_experts} experts, top-{mo.top_k}"
                    + (f" within the best {mo.topk_group} of {mo.n_group} groups" if mo.n_group > 1 else "")
                    + (", bias-corrected choice" if mo.score_correction_bias else "")
                    + (", renormalized" if mo.norm_topk_prob else "")
                    + f", scaled by {mo.routed_scaling_factor:g}; ids sorted best first",
        axes={"num_tokens": var(), "hidden_size": const(cfg.hidden_size),
              "num_experts": const(mo.num_experts), "top_k": const(mo.top_k)},
        inputs=inputs,
        outputs={"topk_weights": T(["num_tokens", "top_k"], "float32", "routing weights"),
                 "topk_ids": T(["num_tokens", "top_k"], "int64", "chosen experts, best first")},
        constants=consts, body=body, workloads=[{"num_tokens": t} for t in EXPERT_TOKENS + [16384]],
        small_axes={"num_tokens": 6}, module_outputs=module_outputs,
        tolerance={"max_atol": 1e-4, "max_rtol": 1e-3, "required_matched_ratio": 0.99})


# ---- expert dispatch + compute + combine ------------------------------------------------------
class Experts(nn.Module):
    def __init__(self, hidden, inter, n, act):
        super().__init__()
        self.experts = nn.ModuleList(m.GatedMLP(hidden, inter, act) for _ in range(n))

    def forward(self, x, ids, weights):
        out = torch.zeros_like(x)
        hit = F.one_hot(ids, len(self.experts)).permute(2, 1, 0)  # [E, K, T]
        for e, expert in enumerate(self.experts):
            slot, tok = torch.where(hit[e])
            if tok.numel():
                out.index_add_(0, tok, expert(x[tok]) * weights[tok, slot, None])
        return out


def build_experts(cfg) -> BlockSpec:
    mo, dt = cfg.moe, cfg.dtype
    act = cfg.mlp.activation if cfg.mlp else "silu"
    E, K, I = "num_experts", "top_k", "intermediate_size"
    inputs = {
        "x": T(["num_tokens", "hidden_size"], dt, "activations"),
        "topk_ids": T(["num_tokens", K], "int64", "distinct experts per token",
                      f'torch.rand(a["num_tokens"], a["{E}"], device=device).argsort(dim=-1)[:, :a["{K}"]]'),
        "topk_weights": T(["num_tokens", K], "float32", "routing weights",
                          f'torch.softmax(torch.randn(a["num_tokens"], a["{K}"], device=device), dim=-1)'),
        "gate_up_weight": T([E, "gate_up_dim", "hidden_size"], dt, "per-expert [gate; up] projections",
                            "weight"),
        "down_weight": T([E, "hidden_size", I], dt, "per-expert down projections", "weight"),
    }
    body = join(ACT_FN[act], '''def run(x, topk_ids, topk_weights, gate_up_weight, down_weight):
    num_tokens, top_k = topk_ids.shape
    num_experts, inter = down_weight.shape[0], down_weight.shape[2]
    xf = x.to(torch.float32)
    out = torch.zeros_like(xf)
    # dispatch: sort the (token, slot) pairs by expert, then run each expert on its tokens
    flat_ids = topk_ids.reshape(-1)
    order = torch.argsort(flat_ids, stable=True)
    counts = torch.bincount(flat_ids, minlength=num_experts).tolist()
    flat_weights = topk_weights.reshape(-1).to(torch.float32)
    start = 0
    for e in range(num_experts):
        n = counts[e]
        if n == 0:
            continue
        slots = order[start:start + n]
        start += n
        tokens = slots // top_k
        gate_up = torch.matmul(xf[tokens], gate_up_weight[e].to(torch.float32).t())
        hidden = _act(gate_up[:, :inter]) * gate_up[:, inter:]
        y = torch.matmul(hidden, down_weight[e].to(torch.float32).t())
        # combine: weighted scatter-add back to the tokens
        out.index_add_(0, tokens, y * flat_weights[slots, None])
    return out.to(x.dtype)''')

    def module_outputs(x):
        inter = x["down_weight"].shape[2]
        n = x["down_weight"].shape[0]
        params = {}
        for e in range(n):
            params[f"experts.{e}.gate_proj.weight"] = x["gate_up_weight"][e, :inter]
            params[f"experts.{e}.up_proj.weight"] = x["gate_up_weight"][e, inter:]
            params[f"experts.{e}.down_proj.weight"] = x["down_weight"][e]
        mod = m.build(lambda: Experts(cfg.hidden_size, inter, n, act), params)
        return (_out(mod(x["x"].float(), x["topk_ids"], x["topk_weights"]), dt),)

    wl = [{"num_tokens": t} for t in EXPERT_TOKENS]
    return BlockSpec(
        kind="moe_experts",
        name=f"moe_experts_{'swiglu' if act == 'silu' else act}_e{mo.num_experts}_top{mo.top_k}_h{cfg.hidden_size}"
             f"_i{mo.expert_intermediate_size}_{DT[dt]}",
        op_type="moe",
        description=f"MoE dispatch, {mo.num_experts} gated-{act} experts ({cfg.hidden_size} -> "
                    f"{mo.expert_intermediate_size}), top-{mo.top_k}, and weighted combine",
        axes={"num_tokens": var(), "hidden_size": const(cfg.hidden_size), E: const(mo.num_experts),
              K: const(mo.top_k), I: const(mo.expert_intermediate_size),
              "gate_up_dim": expr(f"2 * {I}")},
        inputs=inputs, outputs={"out": T(["num_tokens", "hidden_size"], dt, "combined expert output")},
        constants={}, body=body, workloads=wl, small_axes={"num_tokens": 7},
        module_outputs=module_outputs, composite=True)


# ---- MLA ------------------------------------------------------------------------------------
def mla_scale(cfg) -> float:
    scale = cfg.attention.softmax_scale
    r = cfg.rope
    if r and r.type == "yarn" and r.mscale_all_dim:
        scale *= m.yarn_mscale(r.factor, r.mscale_all_dim) ** 2
    return scale


class Mla(nn.Module):
    def __init__(self, cfg, kv_lora: int, q_lora):
        super().__init__()
        ml, h, H = cfg.mla, cfg.hidden_size, cfg.attention.num_heads
        self.ml, self.H, self.scale = ml, H, mla_scale(cfg)
        qd = ml.qk_nope_head_dim + ml.qk_rope_head_dim
        if q_lora:
            self.q_a_proj = nn.Linear(h, q_lora, bias=False)
            self.q_a_layernorm = m.RMSNorm(q_lora, cfg.norm.eps)
            self.q_b_proj = nn.Linear(q_lora, H * qd, bias=False)
        else:
            self.q_proj = nn.Linear(h, H * qd, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(h, kv_lora + ml.qk_rope_head_dim, bias=False)
        self.kv_a_layernorm = m.RMSNorm(kv_lora, cfg.norm.eps)
        self.kv_b_proj = nn.Linear(kv_lora, H * (ml.qk_nope_head_dim + ml.v_head_dim), bias=False)
        self.o_proj = nn.Linear(H * ml.v_head_dim, h, bias=False)
        self.kv_lora = kv_lora

    def forward(self, x, cos, sin):
        ml, H = self.ml, self.H
        b, s, _ = x.shape
        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x))) if hasattr(self, "q_a_proj") else self.q_proj(x)
        q_nope, q_pe = q.view(b, s, H, -1).split([ml.qk_nope_head_dim, ml.qk_rope_head_dim], -1)
        c, k_pe = self.kv_a_proj_with_mqa(x).split([self.kv_lora, ml.qk_rope_head_dim], -1)
        k_nope, v = self.kv_b_proj(self.kv_a_layernorm(c)).view(b, s, H, -1).split(
            [ml.qk_nope_head_dim, ml.v_head_dim], -1)
        rot = torch.complex(cos, sin)[:, None, :]  # [S, 1, R/2]

        def rope(t):
            z = torch.view_as_complex(t.reshape(*t.shape[:-1], -1, 2).contiguous())
            return torch.view_as_real(z * rot).flatten(-2)

        q = torch.cat([q_nope, rope(q_pe)], -1)
        k = torch.cat([k_nope, rope(k_pe[:, :, None, :]).expand(b, s, H, -1)], -1)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=True, scale=self.scale)
        return self.o_proj(o.transpose(1, 2).reshape(b, s, -1))


def build_mla_prefill(cfg) -> BlockSpec:
    ml, dt, H = cfg.mla, cfg.dtype, cfg.attention.num_heads
    h = "hidden_size"
    inp = {"hidden_states": T(["batch_size", "seq_len", h], dt, "layer input (after the input norm)"),
           "cos": T(["seq_len", "rope_half"], "float32", "RoPE cosines (per channel pair)",
                    'torch.cos(torch.rand(a["seq_len"], a["rope_half"], device=device) * 6.2832)'),
           "sin": T(["seq_len", "rope_half"], "float32", "RoPE sines (per channel pair)",
                    'torch.sin(torch.rand(a["seq_len"], a["rope_half"], device=device) * 6.2832)')}
    if ml.q_lora_rank:
        inp["q_a_proj_weight"] = T(["q_lora_rank", h], dt, "query down-projection", "weight")
        inp["q_a_layernorm_weight"] = T(["q_lora_rank"], dt, "query latent RMSNorm", "gain")
        inp["q_b_proj_weight"] = T(["q_dim", "q_lora_rank"], dt, "query up-projection", "weight")
    else:
        inp["q_proj_weight"] = T(["q_dim", h], dt, "query projection", "weight")
    inp["kv_a_proj_with_mqa_weight"] = T(["kv_a_dim", h], dt, "KV down-projection + shared rope key", "weight")
    inp["kv_a_layernorm_weight"] = T(["kv_lora_rank"], dt, "KV latent RMSNorm", "gain")
    inp["kv_b_proj_weight"] = T(["kv_b_dim", "kv_lora_rank"], dt, "KV up-projection", "weight")
    inp["o_proj_weight"] = T([h, "o_dim"], dt, "output projection", "weight")
    weights = [n for n in inp if n not in ("hidden_states", "cos", "sin")]
    q_code = ('''    q_latent = _rmsnorm(torch.matmul(x, w["q_a_proj_weight"].t()), w["q_a_layernorm_weight"], EPS)
    q = torch.matmul(q_latent, w["q_b_proj_weight"].t())''' if ml.q_lora_rank else
              '''    q = torch.matmul(x, w["q_proj_weight"].t())''')
    body = join(RMSNORM_FN, ROPE_INTERLEAVED_FN, ATTENTION_FN, f'''def run(hidden_states, cos, sin, {", ".join(weights)}):
    args = dict(locals())
    w = {{name: t.to(torch.float32) for name, t in args.items() if name.endswith("_weight")}}
    x = hidden_states.to(torch.float32)
    batch, seq, _ = x.shape
{q_code}
    q = q.view(batch, seq, NUM_HEADS, QK_NOPE_HEAD_DIM + QK_ROPE_HEAD_DIM)
    q_nope, q_pe = q[..., :QK_NOPE_HEAD_DIM], q[..., QK_NOPE_HEAD_DIM:]
    # compressed KV: a low-rank latent (normalized) plus one rope key shared by all heads
    kv_a = torch.matmul(x, w["kv_a_proj_with_mqa_weight"].t())
    kv_lora_rank = kv_a.shape[-1] - QK_ROPE_HEAD_DIM
    latent = _rmsnorm(kv_a[..., :kv_lora_rank], w["kv_a_layernorm_weight"], EPS)
    k_pe = kv_a[..., kv_lora_rank:][:, :, None, :]                            # [B, S, 1, R]
    kv = torch.matmul(latent, w["kv_b_proj_weight"].t()).view(batch, seq, NUM_HEADS, QK_NOPE_HEAD_DIM + V_HEAD_DIM)
    k_nope, v = kv[..., :QK_NOPE_HEAD_DIM], kv[..., QK_NOPE_HEAD_DIM:]
    q_pe = _rope_interleaved(q_pe, cos, sin)
    k_pe = _rope_interleaved(k_pe, cos, sin).expand(batch, seq, NUM_HEADS, QK_ROPE_HEAD_DIM)
    q = torch.cat((q_nope, q_pe), dim=-1)
    k = torch.cat((k_nope, k_pe), dim=-1)
    o = _attention(q, k, v, SCALE, True, None, None)                          # [B, S, H, V]
    out = torch.matmul(o.reshape(batch, seq, NUM_HEADS * V_HEAD_DIM), w["o_proj_weight"].t())
    return out.to(hidden_states.dtype)''')
    consts = {"NUM_HEADS": H, "QK_NOPE_HEAD_DIM": ml.qk_nope_head_dim, "QK_ROPE_HEAD_DIM": ml.qk_rope_head_dim,
              "V_HEAD_DIM": ml.v_head_dim, "SCALE": mla_scale(cfg), "EPS": cfg.norm.eps, "NORM_WEIGHT_OFFSET": 0.0}

    def module_outputs(x):
        mod = m.build(lambda: Mla(cfg, ml.kv_lora_rank, ml.q_lora_rank), {n[: -len("_weight")] + ".weight": x[n] for n in weights})
        return (_out(mod(x["hidden_states"].float(), x["cos"], x["sin"]), dt),)

    axes = {"batch_size": var(), "seq_len": var(), h: const(cfg.hidden_size), "num_heads": const(H),
            "qk_nope_head_dim": const(ml.qk_nope_head_dim), "qk_rope_head_dim": const(ml.qk_rope_head_dim),
            "v_head_dim": const(ml.v_head_dim), "kv_lora_rank": const(ml.kv_lora_rank),
            "rope_half": expr("qk_rope_head_dim // 2"),
            "q_dim": expr("num_heads * (qk_nope_head_dim + qk_rope_head_dim)"),
            "kv_a_dim": expr("kv_lora_rank + qk_rope_head_dim"),
            "kv_b_dim": expr("num_heads * (qk_nope_head_dim + v_head_dim)"), "o_dim": expr("num_heads * v_head_dim")}
    if ml.q_lora_rank:
        axes["q_lora_rank"] = const(ml.q_lora_rank)
    pairs = [(1, 128), (1, 512), (1, 1024), (1, 2048), (1, 4096), (2, 1024), (4, 512), (8, 256), (16, 128)]
    wl = [{"batch_size": b, "seq_len": s} for b, s in pairs if fits(4.0 * b * H * s * s)]
    return BlockSpec(
        kind="mla_prefill", name=f"mla_prefill_h{H}_q{ml.q_lora_rank or 0}_kv{ml.kv_lora_rank}_hid{cfg.hidden_size}_{DT[dt]}",
        op_type="mla",
        description=f"DeepSeek multi-head latent attention, prefill: q{' LoRA ' + str(ml.q_lora_rank) if ml.q_lora_rank else ''}, "
                    f"KV latent {ml.kv_lora_rank} + shared rope key {ml.qk_rope_head_dim}, {H} heads, causal, "
                    f"with projections",
        axes=axes, inputs=inp, outputs={"out": T(["batch_size", "seq_len", h], dt, "attention output")},
        constants=consts, body=body, workloads=wl, small_axes={"batch_size": 2, "seq_len": 5},
        module_outputs=module_outputs, composite=True)


def build_mla_decode(cfg) -> BlockSpec:
    ml, dt, H = cfg.mla, cfg.dtype, cfg.attention.num_heads
    inp = {"q_nope": T(["batch_size", "num_heads", "qk_nope_head_dim"], dt, "query, non-rope part"),
           "q_pe": T(["batch_size", "num_heads", "qk_rope_head_dim"], dt, "query, rope part (rotated)"),
           "ckv_cache": T(["batch_size", "kv_len", "kv_lora_rank"], dt, "cached normalized KV latents"),
           "kpe_cache": T(["batch_size", "kv_len", "qk_rope_head_dim"], dt, "cached rope keys"),
           "kv_b_proj_weight": T(["kv_b_dim", "kv_lora_rank"], dt, "KV up-projection (absorbed)", "weight")}
    body = '''def run(q_nope, q_pe, ckv_cache, kpe_cache, kv_b_proj_weight):
    kv_lora_rank = ckv_cache.shape[-1]
    w = kv_b_proj_weight.to(torch.float32).view(NUM_HEADS, QK_NOPE_HEAD_DIM + V_HEAD_DIM, kv_lora_rank)
    w_uk, w_uv = w[:, :QK_NOPE_HEAD_DIM], w[:, QK_NOPE_HEAD_DIM:]
    ckv, kpe = ckv_cache.to(torch.float32), kpe_cache.to(torch.float32)
    # weight absorption: score against the latent cache directly, never expanding K or V
    q_latent = torch.einsum("bhn,hnc->bhc", q_nope.to(torch.float32), w_uk)
    scores = torch.einsum("bhc,blc->bhl", q_latent, ckv) + torch.einsum("bhr,blr->bhl", q_pe.to(torch.float32), kpe)
    probs = torch.softmax(scores * SCALE, dim=-1)
    out_latent = torch.einsum("bhl,blc->bhc", probs, ckv)
    out = torch.einsum("bhc,hvc->bhv", out_latent, w_uv)
    return out.to(q_nope.dtype)'''
    consts = {"NUM_HEADS": H, "QK_NOPE_HEAD_DIM": ml.qk_nope_head_dim, "V_HEAD_DIM": ml.v_head_dim,
              "SCALE": mla_scale(cfg)}

    def module_outputs(x):
        # naive MLA: expand the latent cache into per-head K and V, then standard attention
        b, L, _ = x["ckv_cache"].shape
        kv = (x["ckv_cache"].float() @ x["kv_b_proj_weight"].float().t()).view(b, L, H, -1)
        k_nope, v = kv.split([ml.qk_nope_head_dim, ml.v_head_dim], -1)
        k = torch.cat([k_nope, x["kpe_cache"].float()[:, :, None, :].expand(b, L, H, -1)], -1)
        q = torch.cat([x["q_nope"].float(), x["q_pe"].float()], -1)[:, None]
        o = m.attention(q, k, v, mla_scale(cfg), causal=False)
        return (_out(o[:, 0], dt),)

    pairs = [(1, 1024), (1, 8192), (1, 32768), (8, 2048), (16, 4096), (32, 1024), (64, 2048),
             (128, 1024), (256, 512)]
    return BlockSpec(
        kind="mla_decode", name=f"mla_decode_absorbed_h{H}_kv{ml.kv_lora_rank}_r{ml.qk_rope_head_dim}_{DT[dt]}",
        op_type="mla",
        description=f"DeepSeek MLA decode with weight absorption: one query per sequence over a latent "
                    f"KV cache ({ml.kv_lora_rank} + rope {ml.qk_rope_head_dim}), {H} heads, kv_b_proj absorbed",
        axes={"batch_size": var(), "kv_len": var(), "num_heads": const(H),
              "qk_nope_head_dim": const(ml.qk_nope_head_dim), "qk_rope_head_dim": const(ml.qk_rope_head_dim),
              "v_head_dim": const(ml.v_head_dim), "kv_lora_rank": const(ml.kv_lora_rank),
              "kv_b_dim": expr("num_heads * (qk_nope_head_dim + v_head_dim)")},
        inputs=inp, outputs={"out": T(["batch_size", "num_heads", "v_head_dim"], dt, "attention output per head")},
        constants=consts, body=body, workloads=[{"batch_size": b, "kv_len": l} for b, l in pairs],
        small_axes={"batch_size": 2, "kv_len": 9}, module_outputs=module_outputs, composite=True)
