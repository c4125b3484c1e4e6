"""Inline SVG charts: no JavaScript, no network, nothing but text in the HTML file.

Every chart is `<svg class="plot" data-plot=NAME>`; every mark carries its number in `data-value`
(bars) or `data-x`/`data-y` (points), so a browser test can read back what was drawn.
"""

from __future__ import annotations

import math
from html import escape
from typing import Optional, Sequence

PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
           "#9c755f", "#bab0ac"]
FONT = 'font-family="system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif"'


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}".rstrip("0").rstrip(".")
    if a >= 0.01:
        return f"{v:.2f}".rstrip("0").rstrip(".")
    return f"{v:.1e}"


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=10 * mag)
    start = math.floor(lo / step) * step
    out, t = [], start
    while t <= hi + step * 1e-9:
        out.append(round(t, 12))
        t += step
    return out


class _Frame:
    """Plot area inside an SVG of width x height, with margins for axes and a title."""

    def __init__(self, width: int, height: int, left: int = 48, right: int = 12, top: int = 28,
                 bottom: int = 40):
        self.w, self.h = width, height
        self.x0, self.x1 = left, width - right
        self.y0, self.y1 = height - bottom, top  # y0 is the bottom (screen coordinates grow down)


def _open(name: str, f: _Frame, title: str) -> list[str]:
    return [f'<svg class="plot" data-plot="{escape(name)}" xmlns="http://www.w3.org/2000/svg" '
            f'width="{f.w}" height="{f.h}" viewBox="0 0 {f.w} {f.h}" role="img" '
            f'aria-label="{escape(title)}" {FONT} font-size="11">',
            f'<rect x="0" y="0" width="{f.w}" height="{f.h}" fill="#ffffff"/>',
            f'<text x="{f.w / 2:.1f}" y="16" text-anchor="middle" font-size="13" '
            f'font-weight="600">{escape(title)}</text>']


def _y_axis(f: _Frame, ticks: list[float], scale, label: str, fmt=_fmt) -> list[str]:
    out = [f'<line x1="{f.x0}" y1="{f.y0}" x2="{f.x0}" y2="{f.y1}" stroke="#333"/>']
    for t in ticks:
        y = scale(t)
        out.append(f'<line x1="{f.x0 - 4}" y1="{y:.1f}" x2="{f.x1}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        out.append(f'<text x="{f.x0 - 6}" y="{y + 4:.1f}" text-anchor="end">{escape(fmt(t))}</text>')
    if label:
        out.append(f'<text transform="translate(12,{(f.y0 + f.y1) / 2:.1f}) rotate(-90)" '
                   f'text-anchor="middle">{escape(label)}</text>')
    return out


def bar_chart(name: str, title: str, categories: Sequence[str], series: dict[str, Sequence[float]],
              *, xlabel: str = "", ylabel: str = "", width: int = 520, height: int = 260) -> str:
    """Grouped bars: one group per category, one bar per series."""
    f = _Frame(width, height, bottom=56 if xlabel else 44)
    top = max([v for vs in series.values() for v in vs] + [1])
    ticks = nice_ticks(0, top)
    ymax = ticks[-1]

    def sy(v: float) -> float:
        return f.y0 - (f.y0 - f.y1) * (v / ymax)

    out = _open(name, f, title) + _y_axis(f, ticks, sy, ylabel)
    n_cat, n_ser = max(len(categories), 1), max(len(series), 1)
    gw = (f.x1 - f.x0) / n_cat
    bw = gw * 0.8 / n_ser
    for ci, cat in enumerate(categories):
        gx = f.x0 + ci * gw
        for si, (sname, vals) in enumerate(series.items()):
            v = float(vals[ci])
            x, y = gx + gw * 0.1 + si * bw, sy(v)
            out.append(f'<rect class="bar" x="{x:.1f}" y="{y:.1f}" width="{max(bw - 1, 1):.1f}" '
                       f'height="{f.y0 - y:.1f}" fill="{color(si)}" data-series="{escape(sname)}" '
                       f'data-category="{escape(cat)}" data-value="{v:g}">'
                       f'<title>{escape(sname)} {escape(cat)}: {v:g}</title></rect>')
        out.append(f'<text x="{gx + gw / 2:.1f}" y="{f.y0 + 14}" text-anchor="middle" '
                   f'font-size="10">{escape(cat)}</text>')
    out.append(f'<line x1="{f.x0}" y1="{f.y0}" x2="{f.x1}" y2="{f.y0}" stroke="#333"/>')
    if xlabel:
        out.append(f'<text x="{(f.x0 + f.x1) / 2:.1f}" y="{f.h - 26}" text-anchor="middle">'
                   f'{escape(xlabel)}</text>')
    out += _legend(f, list(series))
    out.append("</svg>")
    return "\n".join(out)


def _legend(f: _Frame, names: list[str]) -> list[str]:
    if len(names) <= 1:
        return []
    out, x = [], f.x0
    for i, n in enumerate(names):
        out.append(f'<rect x="{x}" y="{f.h - 14}" width="10" height="10" fill="{color(i)}"/>')
        out.append(f'<text x="{x + 14}" y="{f.h - 5}">{escape(n)}</text>')
        x += 20 + 7 * len(n)
    return out


def line_chart(name: str, title: str, series: Sequence[tuple[str, Sequence[float], Sequence[float]]],
               *, xlabel: str = "", ylabel: str = "", width: int = 520, height: int = 260,
               ylim: Optional[tuple[float, float]] = None, hline: Optional[float] = None,
               step: bool = False, legend: bool = True, dashed: Sequence[str] = (),
               dots_only: Sequence[str] = ()) -> str:
    """Lines (optionally step lines) with a dot per point; x and y numeric."""
    f = _Frame(width, height, bottom=56 if legend and len(series) > 1 else 40)
    xs = [x for _, sx, _ in series for x in sx]
    ys = [y for _, _, sy_ in series for y in sy_ if y is not None]
    lo, hi = (ylim if ylim else (min(ys + [0.0]), max(ys + [1e-9])))
    if hline is not None and not ylim:
        hi = max(hi, hline)
    yt = nice_ticks(lo, hi)
    ylo, yhi = yt[0], yt[-1]
    xlo, xhi = (min(xs), max(xs)) if xs else (0, 1)
    if xhi == xlo:
        xhi = xlo + 1

    def px(x: float) -> float:
        return f.x0 + (f.x1 - f.x0) * (x - xlo) / (xhi - xlo)

    def py(y: float) -> float:
        return f.y0 - (f.y0 - f.y1) * (y - ylo) / ((yhi - ylo) or 1)

    out = _open(name, f, title) + _y_axis(f, yt, py, ylabel)
    for t in nice_ticks(xlo, xhi):
        if xlo <= t <= xhi:
            out.append(f'<text x="{px(t):.1f}" y="{f.y0 + 14}" text-anchor="middle">{_fmt(t)}</text>')
    out.append(f'<line x1="{f.x0}" y1="{f.y0}" x2="{f.x1}" y2="{f.y0}" stroke="#333"/>')
    if hline is not None and ylo <= hline <= yhi:
        out.append(f'<line x1="{f.x0}" y1="{py(hline):.1f}" x2="{f.x1}" y2="{py(hline):.1f}" '
                   f'stroke="#999" stroke-dasharray="4 3"/>')
    for i, (sname, sx, sy_) in enumerate(series):
        pts = [(x, y) for x, y in zip(sx, sy_) if y is not None]
        if not pts:
            continue
        path, prev = [], None
        for x, y in pts:
            if prev is None:
                path.append(f"M{px(x):.1f},{py(y):.1f}")
            elif step:
                path.append(f"H{px(x):.1f}V{py(y):.1f}")
            else:
                path.append(f"L{px(x):.1f},{py(y):.1f}")
            prev = (x, y)
        dash = ' stroke-dasharray="5 3"' if sname in dashed else ""
        if sname not in dots_only:
                out.append(f'<path class="line" d="{"".join(path)}" fill="none" stroke="{color(i)}" '
                       f'stroke-width="2"{dash} data-series="{escape(sname)}"/>')
        for x, y in pts:
            out.append(f'<circle class="point" cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.5" '
                       f'fill="{color(i)}" data-series="{escape(sname)}" data-x="{x:g}" '
                       f'data-y="{y:g}"><title>{escape(sname)}: {x:g}, {y:.4g}</title></circle>')
    if xlabel:
        out.append(f'<text x="{(f.x0 + f.x1) / 2:.1f}" y="{f.y0 + 28}" text-anchor="middle">'
                   f'{escape(xlabel)}</text>')
    if legend:
        out += _legend(f, [s[0] for s in series])
    out.append("</svg>")
    return "\n".join(out)


def scatter(name: str, title: str, points: Sequence[tuple[str, float, float]], *, xlabel: str = "",
            ylabel: str = "", width: int = 520, height: int = 260, logx: bool = False,
            vline: Optional[float] = None) -> str:
    """Labelled points (label, x, y)."""
    f = _Frame(width, height)
    tx = (lambda v: math.log10(v)) if logx else (lambda v: v)
    xs = [tx(x) for _, x, _ in points] or [0.0]
    ys = [y for _, _, y in points] or [0.0]
    xt, yt = nice_ticks(min(xs + [tx(vline)] if vline else xs), max(xs)), nice_ticks(min(ys + [0]), max(ys))

    def px(x: float) -> float:
        return f.x0 + (f.x1 - f.x0) * (tx(x) - xt[0]) / ((xt[-1] - xt[0]) or 1)

    def py(y: float) -> float:
        return f.y0 - (f.y0 - f.y1) * (y - yt[0]) / ((yt[-1] - yt[0]) or 1)

    out = _open(name, f, title) + _y_axis(f, yt, py, ylabel)
    for t in xt:
        label = _fmt(10 ** t) if logx else _fmt(t)
        out.append(f'<text x="{f.x0 + (f.x1 - f.x0) * (t - xt[0]) / ((xt[-1] - xt[0]) or 1):.1f}" '
                   f'y="{f.y0 + 14}" text-anchor="middle">{label}</text>')
    out.append(f'<line x1="{f.x0}" y1="{f.y0}" x2="{f.x1}" y2="{f.y0}" stroke="#333"/>')
    if vline:
        out.append(f'<line x1="{px(vline):.1f}" y1="{f.y0}" x2="{px(vline):.1f}" y2="{f.y1}" '
                   f'stroke="#999" stroke-dasharray="4 3"/>')
    for i, (label, x, y) in enumerate(points):
        out.append(f'<circle class="point" cx="{px(x):.1f}" cy="{py(y):.1f}" r="4" fill="{color(0)}" '
                   f'fill-opacity="0.75" data-x="{x:g}" data-y="{y:g}" data-label="{escape(label)}">'
                   f'<title>{escape(label)}: {x:.4g}, {y:.4g}</title></circle>')
    if xlabel:
        out.append(f'<text x="{(f.x0 + f.x1) / 2:.1f}" y="{f.y0 + 28}" text-anchor="middle">'
                   f'{escape(xlabel)}</text>')
    out.append("</svg>")
    return "\n".join(out)
