"""CPU model of the flash attention segment (kernels_cuda/compiler/attention_flash.cu), block by block.

It runs what a generated lowering launches, read the way the GPU does: the launch arguments are
evaluated from the lowering's own expressions (so a wrong stride, offset or argument order in the
generator shows up here), the grid is walked CTA by CTA, each CTA takes the kv blocks its causal /
window bounds and split give it, and every block goes through the kernel's steps in fp32: S = Q K^T,
the score modifiers (or the kernel's plain-scale fast path where it takes it), the base-2 online
softmax with its -inf guards, P rounded to the input dtype for P V, the epilogue (1/l, NaN or 0
for empty rows, natural-log lse) or the split-KV partials and the combine. Fragment layouts and
shared-memory staging are not modelled (the NVRTC compile and the GPU check cover those).

torch only; for tests on small shapes.
"""

from __future__ import annotations

import math
import re

import torch

from .attention import AttentionLowering

_SCALAR = re.compile(r"^(int32|int64|uint32|uint64|float32|float64):(.+)$")
_TORCH_DT = {0: torch.float32, 1: torch.float16, 2: torch.bfloat16}
LOG2E = 1.4426950408889634


def _evaluate(expr: str, env: dict):
    from ...problem import axis_expr
    return axis_expr.evaluate(expr, env)


def _args(launch: dict, tensors: dict, env: dict) -> list:
    out = []
    for a in launch["args"]:
        m = _SCALAR.match(a)
        if m:
            v = _evaluate(m.group(2), env)
            out.append(int(v) if m.group(1).startswith(("int", "uint")) else float(torch.tensor(v, dtype=torch.float32)))
        else:
            out.append(tensors[a].reshape(-1))
    return out


def _view(flat: torch.Tensor, off: int, strides, size) -> torch.Tensor:
    return flat.as_strided(size, list(strides), flat.storage_offset() + off)


def emulate(low: AttentionLowering, tensors: dict, env: dict) -> None:
    """Run the lowering on CPU tensors (written in place, as the kernels would). `tensors` maps
    launch argument names to contiguous tensors; "workspace" is made here when the lowering needs
    scratch (the spec's scratch_offset must then be 0). `env`: axes, scalars (params are added)."""
    p = low.config
    env = {**env, **{k: v for k, v in low.params.items() if isinstance(v, (int, float))}}
    tensors = dict(tensors)
    scratch = int(_evaluate(low.scratch_bytes, env))
    if scratch and "workspace" not in tensors:
        tensors["workspace"] = torch.full((scratch // 4,), float("nan"), dtype=torch.float32)
    fwd = low.launches[0]
    a = _args(fwd, tensors, env)
    grid = [int(_evaluate(g, env)) for g in fwd["grid"]]
    (q, qo, *qs), (k, ko, *ks), (v, vo, *vs), (o, oo, *os_) = a[0:6], a[6:12], a[12:18], a[18:24]
    Sq, Sk, scale, coff, window, softcap = a[24:30]
    rest = a[30:]
    bias = mask = lse = ws = None
    if p["HAS_BIAS"]:
        bias, rest = rest[:6], rest[6:]
    if p["HAS_MASK"]:
        mask, rest = rest[:6], rest[6:]
    if p["HAS_LSE"]:
        lse, rest = rest[:5], rest[5:]
    NS = 1
    if p["NSPLIT"] > 1:
        ws, NS, rest = rest[:2], rest[2], rest[3:]
        assert 1 <= NS <= p["NSPLIT"] and grid[2] % NS == 0
    assert not rest, f"{len(rest)} arguments left over"

    G, BM, BN = p["GROUP"], p["BLOCK_M"], p["BLOCK_N"]
    DQK, DV = p["DQK"], p["DV"]
    in_dt = _TORCH_DT[p["IN_DTYPE"]]
    B, Hkv = grid[2] // NS, grid[1]
    H = Hkv * G
    rows_total = Sq * G
    nrows = B * H * Sq
    simple = bool(p["SIMPLE_MOD"])

    def rs(x):
        return x.to(in_dt).float() if p["ROUND_S"] else x

    for z in range(grid[2]):
        b, split = divmod(z, NS)
        for kvh in range(Hkv):
            K = _view(k, ko + b * ks[0] + kvh * ks[1], (ks[2], ks[3]), (Sk, DQK)).float()
            V = _view(v, vo + b * vs[0] + kvh * vs[1], (vs[2], vs[3]), (Sk, DV)).float()
            for bx in range(grid[0] // p["DV_SPLIT"]):   # DV_SPLIT CTAs share a tile's math
                m0 = bx * BM
                gr = torch.arange(m0, m0 + BM)
                row_ok = gr < rows_total
                i = gr // G
                h = kvh * G + gr % G
                ic, hc = i.clamp(max=Sq - 1), h
                Q = torch.zeros(BM, DQK)
                qrows = _view(q, qo + b * qs[0], (qs[1], qs[2], qs[3]), (H, Sq, DQK))
                Q[row_ok] = qrows[hc[row_ok], ic[row_ok]].float()
                i_first, i_last = m0 // G, min(Sq - 1, (m0 + BM - 1) // G)
                kv_lo, kv_hi = 0, Sk
                if p["CAUSAL"]:
                    kv_hi = max(0, min(Sk, i_last + coff + 1))
                if p["WINDOW"]:
                    kv_lo = max(0, i_first + coff - window + 1)
                nb_lo = kv_lo // BN
                nb_all = (kv_hi + BN - 1) // BN - nb_lo if kv_hi > kv_lo else 0
                per = (nb_all + NS - 1) // NS
                blk_begin = nb_lo + min(nb_all, split * per)
                n_blocks = min(nb_all, (split + 1) * per) - min(nb_all, split * per)

                DVC = p["DVP"] // p["DV_SPLIT"]
                for chunk in range(p["DV_SPLIT"]):   # the CTAs of one tile: O columns [dv0, dv0 + DVC)
                    dv0 = chunk * DVC
                    ncol = max(0, min(DVC, DV - dv0))
                    m = torch.full((BM,), -math.inf)
                    l = torch.zeros(BM)
                    acc = torch.zeros(BM, DVC)
                    for it in range(n_blocks):
                        n0 = (blk_begin + it) * BN
                        j = torch.arange(n0, n0 + BN)
                        jv = j < Sk
                        Kb = torch.zeros(BN, DQK)
                        Vb = torch.zeros(BN, DVC)
                        Kb[jv] = K[j[jv]]
                        Vb[jv, :ncol] = V[j[jv], dv0:dv0 + ncol]
                        s = Q @ Kb.T
                        s = _modify(s, p, simple, n0, BN, Sk, Sq, m0, G, row_ok, i, h, j, b, scale, coff, window,
                                    softcap, bias, mask, rs)
                        mx = torch.maximum(m, s.max(dim=1).values)
                        base = torch.where(mx == -math.inf, torch.zeros_like(mx), mx)
                        alpha = torch.exp2(m - base)
                        m = mx
                        pm = torch.exp2(s - base[:, None])
                        l = l * alpha + pm.sum(dim=1)
                        acc = acc * alpha[:, None] + pm.to(in_dt).float() @ Vb
                    inv = torch.where(l > 0, 1.0 / l, torch.zeros_like(l))
                    out_rows = acc * inv[:, None]
                    lse2 = torch.where(l > 0, m + torch.log2(l), torch.full_like(l, -math.inf))
                    sel = row_ok.nonzero().flatten()
                    if NS > 1:
                        wflat, woff = ws
                        wo = wflat[woff:]
                        ridx = ((split * B + b) * H + h[sel]) * Sq + i[sel]
                        for d in range(ncol):
                            wo[ridx * DV + dv0 + d] = out_rows[sel, d]
                        if dv0 == 0:
                            wo[NS * nrows * DV + ridx] = lse2[sel]
                    else:
                        _write_rows(o, oo, os_, b, h[sel], i[sel], out_rows[sel], l[sel] > 0, dv0, ncol, p)
                        if lse is not None and dv0 == 0:
                            _write_lse(lse, b, h[sel], i[sel], lse2[sel])
    if NS > 1:
        _combine(low, tensors, env, nrows, B, H, Sq, DV, NS, p)


def _modify(s, p, simple, n0, BN, Sk, Sq, m0, G, row_ok, i, h, j, b, scale, coff, window, softcap, bias, mask, rs):
    """The kernel's `plain` test and its `mod` lambda, on a [BLOCK_M, BLOCK_N] block."""
    warps = s.shape[0] // 16
    out = torch.empty_like(s)
    for w in range(warps):
        rows = slice(w * 16, w * 16 + 16)
        wi_lo = (m0 + w * 16) // G
        wi_hi = min(Sq - 1, (m0 + w * 16 + 15) // G)
        plain = n0 + BN <= Sk and simple
        if p["CAUSAL"]:
            plain = plain and n0 + BN - 1 <= wi_lo + coff
        if p["WINDOW"]:
            plain = plain and wi_hi + coff - n0 < window
        if plain:
            out[rows] = s[rows] * float(torch.tensor(scale * LOG2E, dtype=torch.float32))
            continue
        x = s[rows]
        ii, hh, ok = i[rows][:, None], h[rows][:, None], row_ok[rows][:, None]
        jj = j[None, :]
        dead = ~ok | (jj >= Sk)
        if p["CAUSAL"]:
            dead |= jj > ii + coff
        if p["WINDOW"]:
            dead |= ii + coff - jj >= window
        ic = ii.clamp(0, Sq - 1)
        jc = jj.clamp(0, Sk - 1)
        if mask is not None:
            flat, off, *st = mask
            mv = flat[off + b * st[0] + hh * st[1] + ic * st[2] + jc * st[3]] != 0
            dead |= mv != bool(p["MASK_KEEP"])
        x = rs(rs(x) * scale)
        if p["SOFTCAP"]:
            x = rs(rs(torch.tanh(rs(x / softcap))) * softcap)
        if bias is not None:
            flat, off, *st = bias
            x = rs(x + flat[off + b * st[0] + hh * st[1] + ic * st[2] + jc * st[3]].float())
        out[rows] = torch.where(dead, torch.full_like(x, -math.inf), x * LOG2E)
    return out


def _write_rows(o, oo, os_, b, h, i, rows, nonempty, dv0, ncol, p):
    empty = float("nan") if p["EMPTY_NAN"] else 0.0
    vals = torch.where(nonempty[:, None], rows, torch.full_like(rows, empty))
    for d in range(ncol):
        o[oo + b * os_[0] + h * os_[1] + i * os_[2] + (dv0 + d) * os_[3]] = vals[:, d].to(o.dtype)


def _write_lse(lse, b, h, i, lse2):
    flat, off, *st = lse
    flat[off + b * st[0] + h * st[1] + i * st[2]] = lse2 * math.log(2.0)


def _combine(low, tensors, env, nrows, B, H, Sq, DV, NS, p):
    comb = low.launches[1]
    a = _args(comb, tensors, env)
    (o, oo, *os_), (wflat, woff) = a[0:6], a[6:8]
    assert a[11] == NS, "combine and forward disagree on the split count"
    wo = wflat[woff:]
    parts = wo[: NS * nrows * DV].reshape(NS, nrows, DV)
    lses = wo[NS * nrows * DV: NS * nrows * DV + NS * nrows].reshape(NS, nrows)
    M = lses.max(dim=0).values
    f = torch.where(lses == -math.inf, torch.zeros_like(lses), torch.exp2(lses - M))
    L = f.sum(dim=0)
    outv = (f[:, :, None] * parts).sum(dim=0) * torch.where(L > 0, 1.0 / L, torch.zeros_like(L))[:, None]
    r = torch.arange(nrows)
    i, h, b = r % Sq, (r // Sq) % H, r // (Sq * H)
    empty = float("nan") if p["EMPTY_NAN"] else 0.0
    outv = torch.where((L > 0)[:, None], outv, torch.full_like(outv, empty))
    for d in range(DV):
        o[oo + b * os_[0] + h * os_[1] + i * os_[2] + d * os_[3]] = outv[:, d].to(o.dtype)
    if p["HAS_LSE"]:
        flat, off, *st = a[12:17]
        flat[off + b * st[0] + h * st[1] + i * st[2]] = torch.where(L > 0, M + torch.log2(L), torch.full_like(L, -math.inf)) * math.log(2.0)
