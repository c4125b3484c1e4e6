"""Reference-code fragments shared by several blocks (activations, norms, RoPE frequencies).

Each fragment is plain, step-by-step PyTorch that ends up verbatim in a definition's `reference`;
only the fragments a block needs are emitted, so every reference stays short and self-contained.
"""

from __future__ import annotations

ACT_FN = {
    "silu": '''def _act(g):
    # SiLU
    return g * torch.sigmoid(g)''',
    "gelu": '''def _act(g):
    # exact GELU
    return 0.5 * g * (1.0 + torch.erf(g / math.sqrt(2.0)))''',
    "gelu_tanh": '''def _act(g):
    # GELU, tanh approximation
    return 0.5 * g * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (g + 0.044715 * g.pow(3))))''',
    "quick_gelu": '''def _act(g):
    # quick GELU (CLIP)
    return g * torch.sigmoid(1.702 * g)''',
}

# derivative of the activation, for backward problems
ACT_GRAD = {
    "silu": '''def _act_grad(g):
    s = torch.sigmoid(g)
    return s * (1.0 + g * (1.0 - s))''',
    "gelu_tanh": '''def _act_grad(g):
    c = math.sqrt(2.0 / math.pi)
    t = torch.tanh(c * (g + 0.044715 * g.pow(3)))
    return 0.5 * (1.0 + t) + 0.5 * g * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * g * g)''',
    "gelu": '''def _act_grad(g):
    cdf = 0.5 * (1.0 + torch.erf(g / math.sqrt(2.0)))
    pdf = torch.exp(-0.5 * g * g) / math.sqrt(2.0 * math.pi)
    return cdf + g * pdf''',
}

RMSNORM_FN = '''def _rmsnorm(x, weight, eps):
    # float32 statistics; Gemma-style models add NORM_WEIGHT_OFFSET (1.0) to the stored weight
    variance = x.pow(2).mean(dim=-1, keepdim=True)
    return x * torch.rsqrt(variance + eps) * (NORM_WEIGHT_OFFSET + weight)'''

LAYERNORM_FN = '''def _layernorm(x, weight, bias, eps):
    mean = x.mean(dim=-1, keepdim=True)
    centered = x - mean
    variance = centered.pow(2).mean(dim=-1, keepdim=True)
    y = centered * torch.rsqrt(variance + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y'''

ATTENTION_FN = '''def _attention(q, k, v, scale, causal, window, softcap):
    """q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D] in float32; queries are the last Sq key positions."""
    batch, q_len, num_qo_heads, _ = q.shape
    kv_len, num_kv_heads = k.shape[1], k.shape[2]
    group = num_qo_heads // num_kv_heads
    qh = q.transpose(1, 2)
    kh = k.transpose(1, 2)[:, :, None].expand(batch, num_kv_heads, group, kv_len, k.shape[-1])
    vh = v.transpose(1, 2)[:, :, None].expand(batch, num_kv_heads, group, kv_len, v.shape[-1])
    kh = kh.reshape(batch, num_qo_heads, kv_len, k.shape[-1])
    vh = vh.reshape(batch, num_qo_heads, kv_len, v.shape[-1])
    scores = torch.matmul(qh, kh.transpose(-1, -2)) * scale
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)
    q_pos = torch.arange(kv_len - q_len, kv_len, device=q.device)[:, None]
    k_pos = torch.arange(kv_len, device=q.device)[None, :]
    if causal:
        scores = scores.masked_fill(k_pos > q_pos, float("-inf"))
    if window is not None:
        scores = scores.masked_fill(k_pos <= q_pos - window, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return torch.matmul(probs, vh).transpose(1, 2)  # [B, Sq, Hq, Dv]'''

ROTATE_HALF_FN = '''def _rope_rotate_half(x, cos, sin):
    """x [B, S, H, D]; cos/sin [S, R] with R <= D: rotate channel pairs (i, i + R/2) of the first R."""
    rot = cos.shape[-1]
    xr, x_pass = x[..., :rot], x[..., rot:]
    x1, x2 = xr[..., : rot // 2], xr[..., rot // 2:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    rotated = torch.cat((-x2, x1), dim=-1)
    return torch.cat((xr * c + rotated * s, x_pass), dim=-1)'''

ROPE_INTERLEAVED_FN = '''def _rope_interleaved(x, cos, sin):
    """x [..., S, H, R]; cos/sin [S, R/2]: rotate adjacent channel pairs (2i, 2i+1)."""
    c, s = cos[:, None, :], sin[:, None, :]
    x_even, x_odd = x[..., 0::2], x[..., 1::2]
    out_even = x_even * c - x_odd * s
    out_odd = x_even * s + x_odd * c
    return torch.stack((out_even, out_odd), dim=-1).flatten(-2)'''

INV_FREQ = {
    "default": '''def _inv_freq(rot_dim, device):
    exponents = torch.arange(0, rot_dim, 2, dtype=torch.float64, device=device) / rot_dim
    return 1.0 / (ROPE_THETA ** exponents)''',
    "linear": '''def _inv_freq(rot_dim, device):
    exponents = torch.arange(0, rot_dim, 2, dtype=torch.float64, device=device) / rot_dim
    # linear position interpolation: every frequency divided by the factor
    return 1.0 / (ROPE_THETA ** exponents) / ROPE_FACTOR''',
    "llama3": '''def _inv_freq(rot_dim, device):
    exponents = torch.arange(0, rot_dim, 2, dtype=torch.float64, device=device) / rot_dim
    inv_freq = 1.0 / (ROPE_THETA ** exponents)
    # Llama 3 scaling: long wavelengths divided by the factor, short kept, the band between blended
    low_freq_wavelen = ORIGINAL_MAX_POSITION / LOW_FREQ_FACTOR
    high_freq_wavelen = ORIGINAL_MAX_POSITION / HIGH_FREQ_FACTOR
    wavelen = 2.0 * math.pi / inv_freq
    smooth = (ORIGINAL_MAX_POSITION / wavelen - LOW_FREQ_FACTOR) / (HIGH_FREQ_FACTOR - LOW_FREQ_FACTOR)
    blended = (1.0 - smooth) * inv_freq / ROPE_FACTOR + smooth * inv_freq
    out = torch.where(wavelen < high_freq_wavelen, inv_freq, blended)
    return torch.where(wavelen > low_freq_wavelen, inv_freq / ROPE_FACTOR, out)''',
    "yarn": '''def _inv_freq(rot_dim, device):
    exponents = torch.arange(0, rot_dim, 2, dtype=torch.float64, device=device) / rot_dim
    inv_freq = 1.0 / (ROPE_THETA ** exponents)
    # YaRN: interpolate low frequencies, extrapolate high ones, linear ramp between
    def correction_dim(num_rotations):
        return rot_dim * math.log(ORIGINAL_MAX_POSITION / (num_rotations * 2 * math.pi)) / (2 * math.log(ROPE_THETA))
    low = max(math.floor(correction_dim(BETA_FAST)), 0)
    high = min(math.ceil(correction_dim(BETA_SLOW)), rot_dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(rot_dim // 2, dtype=torch.float64, device=device) - low) / (high - low)).clamp(0, 1)
    extrapolation = 1.0 - ramp
    return inv_freq / ROPE_FACTOR * (1.0 - extrapolation) + inv_freq * extrapolation''',
}


def rope_constants(rope, theta: float | None = None, scaled: bool = True) -> dict:
    """The constants the _inv_freq fragment of this rope type reads."""
    c: dict = {"ROPE_THETA": float(theta or rope.theta)}
    t = rope.type if scaled else "default"
    if t in ("linear", "llama3", "yarn"):
        c["ROPE_FACTOR"] = float(rope.factor)
    if t in ("llama3", "yarn"):
        c["ORIGINAL_MAX_POSITION"] = int(rope.original_max_position_embeddings)
    if t == "llama3":
        c["LOW_FREQ_FACTOR"] = float(rope.low_freq_factor)
        c["HIGH_FREQ_FACTOR"] = float(rope.high_freq_factor)
    if t == "yarn":
        c["BETA_FAST"] = float(rope.beta_fast)
        c["BETA_SLOW"] = float(rope.beta_slow)
    return c


def join(*parts: str) -> str:
    return "\n\n\n".join(p.strip("\n") for p in parts if p)
