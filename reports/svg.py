"""Inline SVG line charts for the HTML report: no script, no external resource.

Every text that reaches the markup goes through ``html.escape``; the caller marks the
result safe for the template.
"""

from __future__ import annotations

import time
from html import escape

WIDTH, HEIGHT = 640, 180
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 22, 26
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf")

Points = list[tuple[float, float]]


def _fmt(value: float) -> str:
    if abs(value) >= 1e9:
        return f"{value / 1e9:.3g}G"
    if abs(value) >= 1e6:
        return f"{value / 1e6:.3g}M"
    if abs(value) >= 1e4:
        return f"{value / 1e3:.3g}k"
    return f"{value:.3g}"


def line_chart(title: str, series: dict[str, Points], ceiling: float | None = None) -> str:
    """One chart: each series a polyline, x from the first point to the last (unix times)."""
    points = [p for pts in series.values() for p in pts]
    if not points:
        return ""
    t0 = min(t for t, _ in points)
    now = max(t for t, _ in points)
    span_t = max(now - t0, 1.0)
    values = [v for _, v in points] + ([ceiling] if ceiling is not None else [])
    low, high = min(values + [0.0]), max(values)
    if high == low:
        high = low + 1.0
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(t: float) -> float:
        return LEFT + (t - t0) / span_t * plot_w

    def y(v: float) -> float:
        return TOP + (1 - (v - low) / (high - low)) * plot_h

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" role="img" viewBox="0 0 {WIDTH} {HEIGHT}" '
             f'width="{WIDTH}" height="{HEIGHT}" class="chart">',
             f"<title>{escape(title)}</title>",
             f'<text x="{LEFT}" y="14" class="ct">{escape(title)}</text>',
             f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" class="frame"/>']
    for value in (low, (low + high) / 2, high):
        parts.append(f'<text x="{LEFT - 4}" y="{y(value) + 4:.1f}" class="ax" '
                     f'text-anchor="end">{escape(_fmt(value))}</text>')
    minutes = span_t / 60
    parts.append(f'<text x="{LEFT}" y="{HEIGHT - 8}" class="ax">-{minutes:.0f} min</text>')
    last = time.strftime("%H:%M:%SZ", time.gmtime(now))
    parts.append(f'<text x="{WIDTH - RIGHT}" y="{HEIGHT - 8}" class="ax" '
                 f'text-anchor="end">{last}</text>')
    if ceiling is not None:
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(ceiling):.1f}" '
                     f'y2="{y(ceiling):.1f}" class="ceiling"/>')
    for i, (label, pts) in enumerate(sorted(series.items())[: len(PALETTE)]):
        color = PALETTE[i]
        coords = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in pts)
        if len(pts) == 1:
            parts.append(f'<circle cx="{x(pts[0][0]):.1f}" cy="{y(pts[0][1]):.1f}" r="2.5" '
                         f'fill="{color}"/>')
        else:
            parts.append(f'<polyline points="{coords}" fill="none" stroke="{color}" '
                         'stroke-width="1.5"/>')
        parts.append(f'<text x="{WIDTH - RIGHT - 4}" y="{TOP + 12 + 12 * i}" class="lg" '
                     f'text-anchor="end" fill="{color}">{escape(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)
