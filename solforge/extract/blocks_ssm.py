"""State-space blocks: Mamba-2 SSD chunked scan and single-step update, Mamba-1 selective scan,
causal depthwise conv1d + SiLU, Mamba-2 gated RMSNorm. The modules are sequential recurrences
(or a masked quadratic form); the references are the chunked / step-by-step formulations."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from . import modules as m
from .blocks_core import DT, _out
from .spec import BlockSpec, T, const, expr, var

_A2 = '-torch.exp(torch.rand(a["nheads"], device=device) * math.log(16.0))'
_DT_BIAS = ('torch.log(torch.expm1(torch.exp(torch.rand({n}, device=device) * math.log(100.0) + '
            'math.log(0.001))))')
SCAN_PAIRS = [(1, 128), (1, 512), (1, 1024), (1, 2048), (1, 4096), (1, 8192), (2, 1024), (4, 512),
              (8, 256), (16, 128)]


def _ssm_step(state, x, dt, A, B, C, D):
    """One recurrence step for [b, h, p] x, [b, h] dt (already softplus'ed), [b, h, n] B and C."""
    state = state * torch.exp(dt * A)[..., None, None] + (dt[..., None] * x)[..., None] * B[:, :, None, :]
    return state, torch.einsum("bhpn,bhn->bhp", state, C) + D[:, None] * x


class Mamba2Scan(nn.Module):
    def __init__(self, nheads: int):
        super().__init__()
        self.A_log, self.D, self.dt_bias = (nn.Parameter(torch.zeros(nheads)) for _ in range(3))

    def forward(self, x, dt, B, C, state=None):
        b, s, h, p = x.shape
        rep = h // B.shape[2]
        B, C = B.repeat_interleave(rep, 2), C.repeat_interleave(rep, 2)
        dt = F.softplus(dt + self.dt_bias)
        A = -torch.exp(self.A_log)
        state = torch.zeros(b, h, p, B.shape[-1], dtype=x.dtype) if state is None else state
        ys = []
        for t in range(s):
            state, y = _ssm_step(state, x[:, t], dt[:, t], A, B[:, t], C[:, t], self.D)
            ys.append(y)
        return torch.stack(ys, 1), state


def _mamba2_inputs(dt_, seq: bool):
    lead = ["batch_size", "seq_len"] if seq else ["batch_size"]
    return {
        "x": T(lead + ["nheads", "headdim"], dt_, "SSM input (after conv)"),
        "dt": T(lead + ["nheads"], dt_, "time step, before softplus",
                "0.5 * torch.randn(" + ", ".join(f'a["{d}"]' for d in lead) + ', a["nheads"], device=device)'),
        "A": T(["nheads"], "float32", "state decay rate (negative)", _A2),
        "B": T(lead + ["ngroups", "dstate"], dt_, "input projection to the state"),
        "C": T(lead + ["ngroups", "dstate"], dt_, "state read-out"),
        "D": T(["nheads"], "float32", "skip connection", "gain"),
        "dt_bias": T(["nheads"], "float32", "time-step bias", _DT_BIAS.format(n='a["nheads"]')),
    }


def _scan_params(x):
    return {"A_log": torch.log(-x["A"]), "D": x["D"], "dt_bias": x["dt_bias"]}


def _ssm_axes(s, nheads, with_seq=True):
    ax = {"batch_size": var()}
    if with_seq:
        ax["seq_len"] = var()
    ax.update(nheads=const(nheads), headdim=const(s.headdim), ngroups=const(s.ngroups), dstate=const(s.d_state))
    return ax


def build_mamba2_scan(cfg) -> BlockSpec:
    s, dt_ = cfg.ssm, cfg.dtype
    nheads = s.d_inner // s.headdim
    body = '''def run(x, dt, A, B, C, D, dt_bias):
    batch, seqlen, nheads, headdim = x.shape
    rep = nheads // B.shape[2]
    xf = x.to(torch.float32)
    dtf = torch.nn.functional.softplus(dt.to(torch.float32) + dt_bias)           # [b, s, h]
    Bf = B.to(torch.float32).repeat_interleave(rep, dim=2)                       # [b, s, h, n]
    Cf = C.to(torch.float32).repeat_interleave(rep, dim=2)
    # pad to whole chunks: dt = 0 there, so padding neither decays nor feeds the state
    pad = (-seqlen) % CHUNK_SIZE
    if pad:
        xf, dtf, Bf, Cf = (torch.nn.functional.pad(t, (0, 0) * (t.dim() - 2) + (0, pad)) for t in (xf, dtf, Bf, Cf))
    nchunks = xf.shape[1] // CHUNK_SIZE
    xc, Bc, Cc = (t.reshape(batch, nchunks, CHUNK_SIZE, nheads, -1) for t in (xf, Bf, Cf))
    dtc = dtf.reshape(batch, nchunks, CHUNK_SIZE, nheads)
    cum = torch.cumsum(dtc * A, dim=2)                                           # [b, c, l, h]
    # 1) within each chunk: y[t] = sum_{s <= t} (C_t . B_s) exp(cum_t - cum_s) dt_s x_s
    diff = cum[:, :, :, None, :] - cum[:, :, None, :, :]                         # [b, c, t, s, h]
    causal = torch.tril(torch.ones(CHUNK_SIZE, CHUNK_SIZE, dtype=torch.bool, device=x.device))
    decay = torch.exp(diff.masked_fill(~causal[None, None, :, :, None], float("-inf")))
    scores = torch.einsum("bcthn,bcshn->bctsh", Cc, Bc) * decay * dtc[:, :, None, :, :]
    y = torch.einsum("bctsh,bcshp->bcthp", scores, xc)
    # 2) the state each chunk leaves behind, from its own inputs
    to_end = torch.exp(cum[:, :, -1:, :] - cum) * dtc                            # [b, c, l, h]
    chunk_states = torch.einsum("bclhn,bclh,bclhp->bchpn", Bc, to_end, xc)
    # 3) carry states across chunks
    chunk_decay = torch.exp(cum[:, :, -1, :])                                    # [b, c, h]
    state = torch.zeros(batch, nheads, headdim, Bf.shape[-1], device=x.device)
    entering = []
    for c in range(nchunks):
        entering.append(state)
        state = state * chunk_decay[:, c, :, None, None] + chunk_states[:, c]
    entering = torch.stack(entering, dim=1)                                      # [b, c, h, p, n]
    # 4) what the entering state contributes to each position
    y = y + torch.einsum("bclhn,bchpn,bclh->bclhp", Cc, entering, torch.exp(cum))
    y = y.reshape(batch, nchunks * CHUNK_SIZE, nheads, headdim)[:, :seqlen]
    y = y + xf[:, :seqlen] * D[:, None]
    return y.to(x.dtype), state'''

    def module_outputs(x):
        mod = m.build(lambda: Mamba2Scan(nheads), _scan_params(x))
        y, st = mod(x["x"].float(), x["dt"].float(), x["B"].float(), x["C"].float())
        return _out(y, dt_), st

    return BlockSpec(
        kind="mamba2_scan", name=f"mamba2_ssd_scan_h{nheads}_p{s.headdim}_g{s.ngroups}_n{s.d_state}_c{s.chunk_size}_{DT[dt_]}",
        op_type="ssm_scan",
        description=f"Mamba-2 SSD selective scan (prefill), chunked by {s.chunk_size}: {nheads} heads of "
                    f"{s.headdim}, state {s.d_state}, {s.ngroups} B/C group(s), softplus(dt + bias), D skip",
        axes=_ssm_axes(s, nheads), inputs=_mamba2_inputs(dt_, True),
        outputs={"y": T(["batch_size", "seq_len", "nheads", "headdim"], dt_, "scan output"),
                 "final_state": T(["batch_size", "nheads", "headdim", "dstate"], "float32", "last SSM state")},
        constants={"CHUNK_SIZE": s.chunk_size}, body=body,
        workloads=[{"batch_size": b, "seq_len": q} for b, q in SCAN_PAIRS], small_axes={"batch_size": 1, "seq_len": s.chunk_size + 44},  # 2 chunks, padded
        module_outputs=module_outputs, composite=True, constraints=["nheads % ngroups == 0"])


def build_mamba2_step(cfg) -> BlockSpec:
    s, dt_ = cfg.ssm, cfg.dtype
    nheads = s.d_inner // s.headdim
    inputs = {"state": T(["batch_size", "nheads", "headdim", "dstate"], "float32", "SSM state"),
              **_mamba2_inputs(dt_, False)}
    body = '''def run(state, x, dt, A, B, C, D, dt_bias):
    rep = x.shape[1] // B.shape[1]
    xf = x.to(torch.float32)
    dtf = torch.nn.functional.softplus(dt.to(torch.float32) + dt_bias)           # [b, h]
    Bh = B.to(torch.float32).repeat_interleave(rep, dim=1)                       # [b, h, n]
    Ch = C.to(torch.float32).repeat_interleave(rep, dim=1)
    decay = torch.exp(dtf * A)[:, :, None, None]
    new_state = state * decay + (dtf[:, :, None] * xf)[:, :, :, None] * Bh[:, :, None, :]
    y = torch.einsum("bhpn,bhn->bhp", new_state, Ch) + D[:, None] * xf
    return y.to(x.dtype), new_state'''

    def module_outputs(x):
        mod = m.build(lambda: Mamba2Scan(nheads), _scan_params(x))
        y, st = mod(x["x"].float()[:, None], x["dt"].float()[:, None], x["B"].float()[:, None],
                    x["C"].float()[:, None], x["state"].clone())
        return _out(y[:, 0], dt_), st

    return BlockSpec(
        kind="mamba2_step", name=f"mamba2_state_update_h{nheads}_p{s.headdim}_g{s.ngroups}_n{s.d_state}_{DT[dt_]}",
        op_type="ssm_update",
        description=f"Mamba-2 selective state update (decode, one token): {nheads} heads of {s.headdim}, state {s.d_state}",
        axes=_ssm_axes(s, nheads, with_seq=False), inputs=inputs,
        outputs={"y": T(["batch_size", "nheads", "headdim"], dt_, "output"),
                 "new_state": T(["batch_size", "nheads", "headdim", "dstate"], "float32", "updated state")},
        constants={}, body=body, workloads=[{"batch_size": b} for b in (1, 2, 4, 8, 16, 32, 64, 128, 256)],
        small_axes={"batch_size": 3}, module_outputs=module_outputs, constraints=["nheads % ngroups == 0"])


class Mamba1Scan(nn.Module):
    def __init__(self, d: int, n: int):
        super().__init__()
        self.A_log = nn.Parameter(torch.zeros(d, n))
        self.D, self.dt_bias = nn.Parameter(torch.zeros(d)), nn.Parameter(torch.zeros(d))

    def forward(self, u, delta, B, C, z):
        # masked quadratic form, stable: h_t = sum_{s<=t} exp(sum_{s<r<=t} dt_r A) dt_s B_s u_s
        dt = F.softplus(delta + self.dt_bias)                                      # [b, s, d]
        dA = dt[..., None] * -torch.exp(self.A_log)                                # [b, s, d, n]
        cum = dA.cumsum(1)
        diff = cum[:, :, None] - cum[:, None, :]                                   # [b, t, s, d, n]
        mask = torch.ones(u.shape[1], u.shape[1], dtype=torch.bool).tril()[None, :, :, None, None]
        w = torch.exp(torch.where(mask, diff, torch.tensor(float("-inf"))))
        h = torch.einsum("btsdn,bsd,bsn->btdn", w, dt * u, B)
        y = torch.einsum("btdn,btn->btd", h, C) + self.D * u
        return y * F.silu(z), h[:, -1]


def build_mamba1_scan(cfg) -> BlockSpec:
    s, dt_ = cfg.ssm, cfg.dtype
    lead = ["batch_size", "seq_len"]
    inputs = {"u": T(lead + ["d_inner"], dt_, "SSM input (after conv)"),
              "delta": T(lead + ["d_inner"], dt_, "time step before softplus",
                         '0.5 * torch.randn(a["batch_size"], a["seq_len"], a["d_inner"], device=device)'),
              "A": T(["d_inner", "dstate"], "float32", "decay rates (negative)",
                     '-torch.exp(torch.rand(a["d_inner"], a["dstate"], device=device) * math.log(a["dstate"]))'),
              "B": T(lead + ["dstate"], dt_, "input to state"), "C": T(lead + ["dstate"], dt_, "state read-out"),
              "D": T(["d_inner"], "float32", "skip connection", "gain"),
              "z": T(lead + ["d_inner"], dt_, "gate"),
              "delta_bias": T(["d_inner"], "float32", "time-step bias", _DT_BIAS.format(n='a["d_inner"]'))}
    body = '''def run(u, delta, A, B, C, D, z, delta_bias):
    batch, seqlen, d_inner = u.shape
    uf, Bf, Cf = u.to(torch.float32), B.to(torch.float32), C.to(torch.float32)
    dt = torch.nn.functional.softplus(delta.to(torch.float32) + delta_bias)      # [b, s, d]
    state = torch.zeros(batch, d_inner, A.shape[1], device=u.device)
    ys = []
    for t in range(seqlen):  # the recurrence, one step at a time
        decay = torch.exp(dt[:, t, :, None] * A)                                  # [b, d, n]
        state = state * decay + (dt[:, t] * uf[:, t])[:, :, None] * Bf[:, t, None, :]
        ys.append(torch.einsum("bdn,bn->bd", state, Cf[:, t]))
    y = torch.stack(ys, dim=1) + uf * D
    zf = z.to(torch.float32)
    y = y * (zf * torch.sigmoid(zf))                                               # gate with SiLU(z)
    return y.to(u.dtype), state'''

    def module_outputs(x):
        mod = m.build(lambda: Mamba1Scan(*x["A"].shape), {"A_log": torch.log(-x["A"]), "D": x["D"],
                                                          "dt_bias": x["delta_bias"]})
        y, st = mod(*(x[n].double() for n in ("u", "delta", "B", "C", "z")))
        return _out(y, dt_), st.float()

    return BlockSpec(
        kind="mamba1_scan", name=f"mamba1_selective_scan_d{s.d_inner}_n{s.d_state}_{DT[dt_]}", op_type="ssm_scan",
        description=f"Mamba-1 selective scan (prefill) over {s.d_inner} channels, state {s.d_state}, "
                    f"softplus(delta + bias), D skip, SiLU(z) gate",
        axes={"batch_size": var(), "seq_len": var(), "d_inner": const(s.d_inner), "dstate": const(s.d_state)},
        inputs=inputs, outputs={"y": T(lead + ["d_inner"], dt_, "gated scan output"),
                                "final_state": T(["batch_size", "d_inner", "dstate"], "float32", "last state")},
        constants={}, body=body, workloads=[{"batch_size": b, "seq_len": q} for b, q in SCAN_PAIRS if q <= 4096],
        small_axes={"batch_size": 2, "seq_len": 7}, module_outputs=module_outputs, composite=True)


def build_causal_conv(cfg, channels: int) -> BlockSpec:
    s, dt_ = cfg.ssm, cfg.dtype
    inputs = {"x": T(["batch_size", "seq_len", "channels"], dt_, "input sequence"),
              "weight": T(["channels", "kernel_size"], dt_, "depthwise taps", "weight"),
              "bias": T(["channels"], dt_, "bias", "small")}
    body = '''def run(x, weight, bias):
    seqlen, k = x.shape[1], weight.shape[1]
    xf = torch.nn.functional.pad(x.to(torch.float32), (0, 0, k - 1, 0))         # causal: pad the past
    w = weight.to(torch.float32)
    out = bias.to(torch.float32).expand(x.shape[0], seqlen, -1).clone()
    for j in range(k):  # tap j looks k - 1 - j steps back
        out = out + xf[:, j:j + seqlen, :] * w[:, j]
    return (out * torch.sigmoid(out)).to(x.dtype)                                # SiLU'''

    def module_outputs(x):
        c, k = x["weight"].shape
        mod = m.build(lambda: nn.Conv1d(c, c, k, groups=c, padding=k - 1),
                      {"weight": x["weight"][:, None, :], "bias": x["bias"]})
        y = mod(x["x"].float().transpose(1, 2))[..., : x["x"].shape[1]]
        return (_out(F.silu(y).transpose(1, 2), dt_),)

    return BlockSpec(
        kind="causal_conv1d", name=f"causal_conv1d_silu_c{channels}_k{s.d_conv}_{DT[dt_]}", op_type="conv1d",
        description=f"causal depthwise conv1d (kernel {s.d_conv}) + bias + SiLU over {channels} channels (Mamba)",
        axes={"batch_size": var(), "seq_len": var(), "channels": const(channels), "kernel_size": const(s.d_conv)},
        inputs=inputs, outputs={"out": T(["batch_size", "seq_len", "channels"], dt_, "conv output")},
        constants={}, body=body, workloads=[{"batch_size": b, "seq_len": q} for b, q in SCAN_PAIRS],
        small_axes={"batch_size": 2, "seq_len": 9}, module_outputs=module_outputs)


def build_gated_rmsnorm(cfg) -> BlockSpec:
    s, dt_ = cfg.ssm, cfg.dtype
    inputs = {"y": T(["num_tokens", "d_inner"], dt_, "scan output"), "z": T(["num_tokens", "d_inner"], dt_, "gate"),
              "weight": T(["d_inner"], dt_, "norm weight", "gain")}
    body = '''def run(y, z, weight):
    zf = z.to(torch.float32)
    gated = y.to(torch.float32) * (zf * torch.sigmoid(zf))                       # y * SiLU(z)
    groups = gated.view(gated.shape[0], NGROUPS, -1)                             # normalize per group
    variance = groups.pow(2).mean(dim=-1, keepdim=True)
    normed = (groups * torch.rsqrt(variance + EPS)).view_as(gated)
    return (normed * weight.to(torch.float32)).to(y.dtype)'''

    def module_outputs(x):
        g = F.silu(x["z"].float()) * x["y"].float()
        n = F.rms_norm(g.unflatten(-1, (s.ngroups, -1)), (g.shape[-1] // s.ngroups,), eps=cfg.norm.eps)
        return (_out(n.flatten(-2) * x["weight"].float(), dt_),)

    from .spec import token_workloads
    return BlockSpec(
        kind="gated_rmsnorm", name=f"gated_rmsnorm_d{s.d_inner}_g{s.ngroups}_{DT[dt_]}", op_type="rmsnorm",
        description=f"Mamba-2 gated RMSNorm: rmsnorm(y * silu(z)) in {s.ngroups} group(s) of {s.d_inner // s.ngroups}",
        axes={"num_tokens": var(), "d_inner": const(s.d_inner)}, inputs=inputs,
        outputs={"out": T(["num_tokens", "d_inner"], dt_, "normalized output")},
        constants={"NGROUPS": s.ngroups, "EPS": cfg.norm.eps}, body=body, workloads=token_workloads(),
        small_axes={"num_tokens": 5}, module_outputs=module_outputs)
