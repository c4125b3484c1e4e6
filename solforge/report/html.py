"""The self-contained HTML report: inline CSS and inline SVG, no script, no network, one file."""

from __future__ import annotations

from html import escape
from typing import Any, Optional, Sequence

import polars as pl

from . import analysis, svg

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px auto;
max-width:1180px;color:#222;padding:0 16px}
h1{font-size:22px;margin-bottom:4px}h2{font-size:17px;margin-top:32px;border-bottom:1px solid #ddd;
padding-bottom:4px}.meta{color:#555;font-size:13px}.source{background:#fff8e1;border:1px solid #f0d98c;
padding:8px 12px;font-size:13px;margin:12px 0}table{border-collapse:collapse;font-size:12.5px;margin:8px 0}
th,td{border-bottom:1px solid #e5e5e5;padding:3px 8px;text-align:right}th{background:#f5f5f5}
td.l,th.l{text-align:left}.grid{display:flex;flex-wrap:wrap;gap:10px}.note{color:#666;font-size:12.5px}
.good{color:#1b7a1b}.bad{color:#b3261e}code{font-size:12px}
"""


def _num(v: Any, digits: int = 3, pct: bool = False) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        if v != v:  # NaN
            return "–"
        return f"{100 * v:.0f}%" if pct else f"{v:.{digits}f}"
    return escape(str(v))


def table(df: pl.DataFrame, columns: Sequence[tuple[str, str, str]], cls: str = "") -> str:
    """columns: (column, header, format) with format one of 'text', 'pct', 'num', 'num1', 'usd', 'x'."""
    if df is None or df.height == 0:
        return '<p class="note">none</p>'
    head = "".join(f'<th class="{"l" if f == "text" else ""}">{escape(h)}</th>' for _, h, f in columns)
    rows = []
    for r in df.iter_rows(named=True):
        cells = []
        for c, _, f in columns:
            v = r.get(c)
            if f == "text":
                cells.append(f'<td class="l">{escape("" if v is None else str(v))}</td>')
            elif f == "pct":
                cells.append(f"<td>{_num(v, pct=True)}</td>")
            elif f == "usd":
                cells.append(f"<td>{'–' if v is None else f'${v:,.2f}'}</td>")
            elif f == "x":
                k = "" if v is None else (' class="good"' if v > 1 else ' class="bad"')
                cells.append(f"<td{k}>{'–' if v is None else f'{v:.2f}x'}</td>")
            elif f == "num1":
                cells.append(f"<td>{_num(v, 1)}</td>")
            else:
                cells.append(f"<td>{_num(v)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f'<table class="{cls}"><tr>{head}</tr>' + "".join(rows) + "</table>"


def _source_block(d: analysis.ReportData, source_label: Optional[str]) -> str:
    items = []
    for s in d.sources:
        cfg = s.get("config") or {}
        src = cfg.get("source") if isinstance(cfg, dict) else None
        items.append(f"<li><code>{escape(s['id'][:12])}</code> {escape(s.get('kind') or '')} "
                     f"({escape(s.get('status') or '')}, {escape(str(s.get('started_at'))[:19])})"
                     + (f" — {escape(s['note'])}" if s.get("note") else "")
                     + (f" — source <code>{escape(src)}</code>" if src else "") + "</li>")
    label = f"<b>Data source:</b> {escape(source_label)}<br>" if source_label else ""
    return (f'<div class="source">{label}<b>Runs in this report</b> ({len(d.sources)}):'
            f'<ul>{"".join(items) or "<li>none</li>"}</ul></div>')


def _improvement(d: analysis.ReportData, max_problems: int = 40) -> str:
    tl = d.timeline
    if tl is None or tl.height == 0:
        return '<p class="note">No attempts.</p>'
    order = d.problems["problem"].to_list()[:max_problems]
    charts = []
    for p in order:
        t = tl.filter(pl.col("problem") == p)
        xs = t["attempt_no"].to_list()
        series = [("best so far", xs, t["best_sol_so_far"].to_list()),
                  ("attempt", xs, [s if ok else None for s, ok in
                                   zip(t["sol_score"].to_list(), t["all_correct"].to_list())])]
        charts.append(svg.line_chart(f"improvement:{p}", p, series, xlabel="attempt",
                                     ylabel="SOL score", width=280, height=170, step=True,
                                     legend=False, ylim=(0.0, 1.0), hline=0.5,
                                     dots_only=("attempt",)))
    more = (f'<p class="note">{len(d.problems) - max_problems} more problems not drawn.</p>'
            if len(d.problems) > max_problems else "")
    return (f'<p class="note">Blue: best SOL score of a correct attempt so far; orange: each correct '
            f'attempt; dashed: 0.5 (the baseline\'s own score).</p><div class="grid">'
            + "".join(charts) + "</div>" + more)


def _planner(d: analysis.ReportData) -> str:
    p = d.planner
    if p is None or p.height == 0:
        return ('<p class="note">No planner decisions in the runs of this report (imported '
                'measurements and offline sweeps have none).</p>')
    out = []
    for res, label in (("attempts", "attempts"), ("gpu_seconds", "GPU seconds"), ("dollars", "LLM $")):
        series, caps = [], []
        for run in p["run_id"].unique(maintain_order=True).to_list():
            r = p.filter(pl.col("run_id") == run)
            series.append((f"run {run[:8]}", r["t_s"].to_list(), r[f"spent_{res}"].to_list()))
            caps += [c for c in r[f"cap_{res}"].to_list() if c is not None]
        out.append(svg.line_chart(f"planner:{res}", f"planner budget: {label} spent", series,
                                  xlabel="seconds since the run's first planner round", ylabel=label,
                                  step=True, hline=max(caps) if caps else None, width=370, height=230))
    return ('<p class="note">Spent at each planner round; dashed: the cap, when one was set.</p>'
            '<div class="grid">' + "".join(out) + "</div>")


def _llm(d: analysis.ReportData) -> str:
    if d.llm is None or d.llm.height == 0:
        return '<p class="note">No LLM spend recorded in the runs of this report.</p>'
    pts = [(r["problem"], r["cost_usd"], r["best_speedup"])
           for r in d.llm.iter_rows(named=True) if r["best_speedup"] is not None]
    chart = svg.scatter("llm-spend", "LLM $ per problem vs best speedup", pts, xlabel="LLM $",
                        ylabel="best geomean speedup") if pts else ""
    tab = table(d.llm, [("problem", "problem", "text"), ("subset", "subset", "text"),
                        ("cost_usd", "LLM $", "usd"), ("best_speedup", "best speedup", "x"),
                        ("usd_per_speedup_gain", "$ per 1x gained", "usd"),
                        ("best_sol_score", "best SOL", "num"),
                        ("usd_per_sol_point", "$ per SOL point over 0.5", "usd")])
    runs = table(d.llm_runs, [("run_id", "run", "text"), ("model", "model", "text"),
                              ("calls", "calls", "num1"), ("failed_calls", "failed", "num1"),
                              ("prompt_tokens", "prompt tok", "num1"),
                              ("completion_tokens", "completion tok", "num1"),
                              ("cost_usd", "$", "usd")])
    return chart + tab + "<h3>Per run and model</h3>" + runs


def render(d: analysis.ReportData, source_label: Optional[str] = None,
           title: str = "solforge report") -> str:
    sol_labels, sol_counts = analysis.sol_histogram(d.problems)
    sp_labels, sp_counts = analysis.speedup_histogram(d.problems)
    parts = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{escape(title)}"
             f"</title><style>{CSS}</style></head><body>",
             f"<h1>{escape(title)}</h1>",
             f'<p class="meta">database <code>{escape(d.db.rsplit("/", 1)[-1])}</code>'
             + (f" · run <code>{escape(d.run)}</code>" if d.run else " · all runs")
             + f" · generated {escape(d.generated_at)} · {d.attempts.height if d.attempts is not None else 0}"
               f" attempts on {d.problems.height if d.problems is not None else 0} problems</p>",
             _source_block(d, source_label)]
    if d.empty:
        parts.append('<p class="note" data-state="empty">Nothing scored yet: no attempts in this store '
                     '(or run). <code>solforge optimize</code> makes some; scores need a GPU.</p>'
                     '</body></html>')
        return "".join(parts)
    if not d.scored:
        parts.append('<p class="note" data-state="unscored">Nothing scored yet: '
                     f'{d.attempts.height} attempt(s), none with a correct, timed result. Correctness '
                     'and timing need a GPU (<code>solforge doctor</code> says what this machine has).</p>')
    parts += [
        "<h2>Summary per subset</h2>",
        '<p class="note">Best correct attempt per problem. "Beat baseline": share of attempted '
        "problems whose best geomean speedup over T_b is above 1; geomean over problems with a correct "
        "kernel; SOL score S = 1/(1+(T_k−T_sol)/(T_b−T_sol)), 0.5 = baseline, 1 = speed of light.</p>",
        table(d.subsets, [("subset", "subset", "text"), ("problems", "problems", "num1"),
                          ("solved", "with a correct kernel", "num1"),
                          ("share_beat_baseline", "beat baseline", "pct"),
                          ("share_over_2x", "over 2x", "pct"), ("geomean_speedup", "geomean speedup", "x"),
                          ("median_sol_score", "median SOL score", "num"),
                          ("attempts", "attempts", "num1"), ("cost_usd", "LLM $", "usd")]),
        '<div class="grid">',
        svg.bar_chart("sol-histogram", "Best SOL score per problem", sol_labels, sol_counts,
                      xlabel="SOL score bin (lower edge)", ylabel="problems"),
        svg.bar_chart("speedup-histogram", "Best geomean speedup per problem", sp_labels, sp_counts,
                      xlabel="speedup over T_b", ylabel="problems"),
        "</div>",
        "<h2>Leaderboard</h2>",
        table(d.problems, [("problem", "problem", "text"), ("subset", "subset", "text"),
                           ("best_speedup", "best speedup", "x"), ("best_sol_score", "best SOL", "num"),
                           ("attempts", "attempts", "num1"), ("correctness", "correct", "pct"),
                           ("best_language", "lang", "text"), ("cost_usd", "LLM $", "usd"),
                           ("best_attempt_id", "best attempt", "text")]),
        "<h2>Improvement over attempts</h2>", _improvement(d),
        "<h2>Planner budget over time</h2>", _planner(d),
        "<h2>LLM spend per unit of speedup</h2>", _llm(d),
        "<h2>Failures by kind</h2>",
        table(d.failures, [("stage", "stage", "text"), ("kind", "kind", "text"), ("n", "rows", "num1"),
                           ("problems", "problems", "num1"), ("latest_message", "latest message", "text")]),
        '<p class="note">Generated by <code>solforge report</code> from the DuckDB views of '
        "migration 070 (docs/reports.md). No script, no external resources.</p>",
        "</body></html>"]
    return "\n".join(parts)
