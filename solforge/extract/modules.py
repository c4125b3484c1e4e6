"""Compact nn.Module re-implementations of the blocks, built from a ModelConfig, without weights.

These are the "original modules" the extracted references are checked against. They are written
the way model code is (nn.Linear, F.scaled_dot_product_attention, nn.LayerNorm, nn.GroupNorm,
complex-number RoPE, autograd), deliberately unlike the step-by-step references, so that the
check compares two independent implementations.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

ACT = {
    "silu": F.silu,
    "gelu": lambda x: F.gelu(x),
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x),
}


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, offset: float = 0.0):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps, self.offset = eps, offset

    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.weight + self.offset, self.eps)


def make_norm(norm, dim: int) -> nn.Module:
    if norm.type == "rmsnorm":
        return RMSNorm(dim, norm.eps, norm.weight_offset)
    return nn.LayerNorm(dim, eps=norm.eps, bias=norm.bias)


# ---- rotary embeddings ---------------------------------------------------------------------------
def rope_inv_freq(rope, rot_dim: int, theta: Optional[float] = None, scaled: bool = True):
    """Inverse frequencies with the config's scaling (default, linear, llama3, yarn)."""
    base = theta or rope.theta
    inv = 1.0 / base ** (torch.arange(0, rot_dim, 2, dtype=torch.float64) / rot_dim)
    if not scaled or rope.type == "default":
        return inv
    if rope.type == "linear":
        return inv / rope.factor
    if rope.type == "llama3":
        orig = rope.original_max_position_embeddings
        low_wl, high_wl = orig / rope.low_freq_factor, orig / rope.high_freq_factor
        wl = 2 * math.pi / inv
        smooth = (orig / wl - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor)
        mid = (1 - smooth) * inv / rope.factor + smooth * inv
        return torch.where(wl > low_wl, inv / rope.factor, torch.where(wl < high_wl, inv, mid))
    # yarn: blend interpolated and extrapolated frequencies over a linear ramp of dimensions
    orig = rope.original_max_position_embeddings

    def corr_dim(n_rot):
        return rot_dim * math.log(orig / (n_rot * 2 * math.pi)) / (2 * math.log(base))

    lo = max(math.floor(corr_dim(rope.beta_fast)), 0)
    hi = min(math.ceil(corr_dim(rope.beta_slow)), rot_dim - 1)
    if lo == hi:
        hi += 0.001
    ramp = ((torch.arange(rot_dim // 2, dtype=torch.float64) - lo) / (hi - lo)).clamp(0, 1)
    extrapolate = 1 - ramp
    return inv / rope.factor * (1 - extrapolate) + inv * extrapolate


def yarn_mscale(factor: float, mscale: float) -> float:
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def rope_cos_sin_scale(rope) -> float:
    """YaRN scales cos/sin by mscale(factor, mscale) / mscale(factor, mscale_all_dim)."""
    if rope.type != "yarn":
        return 1.0
    return yarn_mscale(rope.factor, rope.mscale or 1.0) / yarn_mscale(rope.factor, rope.mscale_all_dim or 1.0)


def apply_rope_complex(x, positions, inv_freq, rot_dim: int, interleaved: bool, mag: float = 1.0):
    """Rotate the first rot_dim channels of x [T, H, D] by position * inv_freq (complex multiply)."""
    ang = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    rot = torch.polar(torch.full_like(ang, mag), ang)[:, None, :]  # [T, 1, rot/2]
    xr = x[..., :rot_dim].to(torch.float64)
    if interleaved:
        z = torch.view_as_complex(xr.reshape(*xr.shape[:-1], rot_dim // 2, 2).contiguous())
        out = torch.view_as_real(z * rot).flatten(-2)
    else:
        z = torch.complex(xr[..., : rot_dim // 2], xr[..., rot_dim // 2:])
        zz = z * rot
        out = torch.cat([zz.real, zz.imag], dim=-1)
    return torch.cat([out.to(x.dtype), x[..., rot_dim:]], dim=-1)


def rotate_half_apply(x, cos, sin):
    """HF-style RoPE on [B, S, H, D] with cos/sin [S, rot] (rot <= D)."""
    rot = cos.shape[-1]
    xr, xp = x[..., :rot], x[..., rot:]
    x1, x2 = xr[..., : rot // 2], xr[..., rot // 2:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([xr * c + torch.cat([-x2, x1], -1) * s, xp], -1)


# ---- attention -------------------------------------------------------------------------------
def attention(q, k, v, scale: float, causal: bool, window: Optional[int] = None,
              softcap: Optional[float] = None):
    """q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D]; queries sit at the last Sq positions of the keys."""
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    sq, sk = q.shape[1], k.shape[1]
    mask = None
    if causal or window:
        qpos = torch.arange(sk - sq, sk)[:, None]
        kpos = torch.arange(sk)[None, :]
        mask = torch.ones(sq, sk, dtype=torch.bool)
        if causal:
            mask &= kpos <= qpos
        if window:
            mask &= kpos > qpos - window
    if softcap is None:
        out = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, scale=scale,
                                             enable_gqa=qt.shape[1] != kt.shape[1])
    else:
        rep = qt.shape[1] // kt.shape[1]
        kt, vt = kt.repeat_interleave(rep, 1), vt.repeat_interleave(rep, 1)
        s = (qt @ kt.transpose(-1, -2)) * scale
        s = softcap * torch.tanh(s / softcap)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        out = s.softmax(-1) @ vt
    return out.transpose(1, 2)


class GatedMLP(nn.Module):
    def __init__(self, hidden: int, inter: int, act: str, bias: bool = False):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=bias)
        self.up_proj = nn.Linear(hidden, inter, bias=bias)
        self.down_proj = nn.Linear(inter, hidden, bias=bias)
        self.act = ACT[act]

    def forward(self, x):
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class PlainMLP(nn.Module):
    def __init__(self, hidden: int, inter: int, act: str, bias: bool = True):
        super().__init__()
        self.fc1 = nn.Linear(hidden, inter, bias=bias)
        self.fc2 = nn.Linear(inter, hidden, bias=bias)
        self.act = ACT[act]

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def make_mlp(hidden: int, inter: int, act: str, gated: bool, bias: bool) -> nn.Module:
    return GatedMLP(hidden, inter, act, bias) if gated else PlainMLP(hidden, inter, act, bias)


class SelfAttention(nn.Module):
    """Projections + optional q/k norm + RoPE (cos/sin given) + attention + output projection."""

    def __init__(self, hidden: int, at, norm=None):
        super().__init__()
        self.at = at
        kb = at.qkv_bias if at.k_bias is None else at.k_bias
        self.q_proj = nn.Linear(hidden, at.num_heads * at.head_dim, bias=at.qkv_bias)
        self.k_proj = nn.Linear(hidden, at.num_kv_heads * at.head_dim, bias=kb)
        self.v_proj = nn.Linear(hidden, at.num_kv_heads * at.head_dim, bias=at.qkv_bias)
        self.o_proj = nn.Linear(at.num_heads * at.head_dim, hidden, bias=at.o_bias)
        if at.qk_norm == "head":
            self.q_norm, self.k_norm = make_norm(norm, at.head_dim), make_norm(norm, at.head_dim)
        elif at.qk_norm == "full":
            self.q_norm = make_norm(norm, at.num_heads * at.head_dim)
            self.k_norm = make_norm(norm, at.num_kv_heads * at.head_dim)

    def forward(self, x, cos=None, sin=None, window=None):
        at = self.at
        b, s, _ = x.shape
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if at.qk_norm == "full":
            q, k = self.q_norm(q), self.k_norm(k)
        q = q.view(b, s, at.num_heads, at.head_dim)
        k = k.view(b, s, at.num_kv_heads, at.head_dim)
        v = v.view(b, s, at.num_kv_heads, at.head_dim)
        if at.qk_norm == "head":
            q, k = self.q_norm(q), self.k_norm(k)
        if cos is not None:
            q, k = rotate_half_apply(q, cos, sin), rotate_half_apply(k, cos, sin)
        o = attention(q, k, v, at.softmax_scale, at.causal, window, at.logit_softcap)
        return self.o_proj(o.reshape(b, s, -1))


def build(ctor, params: dict[str, torch.Tensor]) -> nn.Module:
    """Construct a module on the meta device (no weights, no init cost), then fill it from params."""
    with torch.device("meta"):
        module = ctor()
    return load_params(module.to_empty(device="cpu"), params)


def load_params(module: nn.Module, params: dict[str, torch.Tensor]) -> nn.Module:
    """Copy given tensors into the module's parameters (by dotted path), in float32."""
    module = module.float()
    names = dict(module.named_parameters())
    missing = set(names) - set(params)
    if missing:
        raise KeyError(f"parameters not provided: {sorted(missing)}")
    with torch.no_grad():
        for path, t in params.items():
            p = names[path]
            if tuple(p.shape) != tuple(t.shape):
                raise ValueError(f"{path}: module shape {tuple(p.shape)} != input {tuple(t.shape)}")
            p.copy_(t.float())
    return module


def f32(t: torch.Tensor) -> torch.Tensor:
    return t.float() if t.is_floating_point() else t
