"""Diffusion blocks: adaLN modulation (Flux / SD3 DiT) and GroupNorm + SiLU (SDXL / SD1.5 UNet)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from . import modules as m
from .blocks_core import DT, _out, eps_tag
from .spec import BlockSpec, T, const, var


def build_adaln(cfg) -> BlockSpec:
    dt, eps = cfg.dtype, cfg.norm.eps
    h = "hidden_size"
    inputs = {"x": T(["batch_size", "seq_len", h], dt, "image or text tokens"),
              "shift": T(["batch_size", h], dt, "modulation shift (from the timestep embedding)", "small"),
              "scale": T(["batch_size", h], dt, "modulation scale", "small")}
    body = '''def run(x, shift, scale):
    xf = x.to(torch.float32)
    mean = xf.mean(dim=-1, keepdim=True)
    variance = (xf - mean).pow(2).mean(dim=-1, keepdim=True)
    normed = (xf - mean) * torch.rsqrt(variance + EPS)          # LayerNorm without affine parameters
    out = normed * (1.0 + scale.to(torch.float32)[:, None, :]) + shift.to(torch.float32)[:, None, :]
    return out.to(x.dtype)'''

    def module_outputs(x):
        ln = nn.LayerNorm(x["x"].shape[-1], eps=eps, elementwise_affine=False)
        y = ln(x["x"].float()) * (1 + x["scale"].float()[:, None]) + x["shift"].float()[:, None]
        return (_out(y, dt),)

    pairs = [(1, 1024), (1, 4096), (2, 4096), (1, 4608), (4, 1024), (2, 1024), (1, 256), (8, 4096),
             (1, 16384)]
    return BlockSpec(
        kind="adaln_modulate", name=f"adaln_layernorm_modulate_h{cfg.hidden_size}_{eps_tag(eps)}_{DT[dt]}",
        op_type="layernorm",
        description=f"DiT adaLN: LayerNorm (no affine, eps {eps:g}) then x * (1 + scale) + shift per sample",
        axes={"batch_size": var(), "seq_len": var(), h: const(cfg.hidden_size)}, inputs=inputs,
        outputs={"out": T(["batch_size", "seq_len", h], dt, "modulated tokens")},
        constants={"EPS": eps}, body=body, workloads=[{"batch_size": b, "seq_len": s} for b, s in pairs],
        small_axes={"batch_size": 2, "seq_len": 5}, module_outputs=module_outputs)


def build_groupnorm_silu(cfg, channels: int, spatial: int) -> BlockSpec:
    dt, g, eps = cfg.dtype, cfg.norm.num_groups, cfg.norm.eps
    inputs = {"x": T(["batch_size", "channels", "height", "width"], dt, "feature map"),
              "weight": T(["channels"], dt, "GroupNorm weight", "gain"),
              "bias": T(["channels"], dt, "GroupNorm bias", "small")}
    body = '''def run(x, weight, bias):
    batch, channels, height, width = x.shape
    groups = x.to(torch.float32).view(batch, NUM_GROUPS, -1)          # statistics per (sample, group)
    mean = groups.mean(dim=-1, keepdim=True)
    variance = (groups - mean).pow(2).mean(dim=-1, keepdim=True)
    normed = ((groups - mean) * torch.rsqrt(variance + EPS)).view(batch, channels, height, width)
    y = normed * weight.to(torch.float32)[None, :, None, None] + bias.to(torch.float32)[None, :, None, None]
    return (y * torch.sigmoid(y)).to(x.dtype)                         # SiLU'''

    def module_outputs(x):
        gn = m.build(lambda: nn.GroupNorm(g, x["x"].shape[1], eps=eps), {"weight": x["weight"], "bias": x["bias"]})
        return (_out(F.silu(gn(x["x"].float())), dt),)

    sizes = sorted({spatial, spatial * 3 // 4, spatial // 2})
    wl = [{"batch_size": b, "height": s, "width": s} for s in sizes for b in (1, 2, 4, 8)]
    return BlockSpec(
        kind="groupnorm_silu", name=f"groupnorm_silu_c{channels}_g{g}_{eps_tag(eps)}_{DT[dt]}", op_type="groupnorm",
        description=f"UNet ResNet-block GroupNorm ({g} groups over {channels} channels, eps {eps:g}) + SiLU",
        axes={"batch_size": var(), "channels": const(channels), "height": var(), "width": var()},
        inputs=inputs, outputs={"out": T(["batch_size", "channels", "height", "width"], dt, "activated map")},
        constants={"NUM_GROUPS": g, "EPS": eps}, body=body, workloads=wl,
        small_axes={"batch_size": 2, "height": 3, "width": 5}, module_outputs=module_outputs)
