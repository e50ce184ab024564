"""Inline SVG line charts for the HTML report: no script, no external resource.

Every text that reaches the markup goes through ``html.escape``; the caller marks the
result safe for the template.
"""

from __future__ import annotations

import time
from html import escape

from rich.cells import cell_len

from doctor import i18n

WIDTH, PLOT_HEIGHT = 640, 180  # PLOT_HEIGHT: title, plot and time axis; the legend adds rows
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 22, 26
# Tableau's ten: enough for an 8-GPU host's series, each its own colour.
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b",
           "#e377c2", "#7f7f7f", "#bcbd22")
MAX_SERIES = len(PALETTE)
LEGEND_ROW, LEGEND_CHAR_W, SWATCH = 14, 6.2, 10  # px; 10 px text is about 6 px a character

Points = list[tuple[float, float]]


def _fmt(value: float) -> str:
    if abs(value) >= 1e9:
        return f"{value / 1e9:.3g}G"
    if abs(value) >= 1e6:
        return f"{value / 1e6:.3g}M"
    if abs(value) >= 1e4:
        return f"{value / 1e3:.3g}k"
    return f"{value:.3g}"


CEILING, NOTE = -2, -1  # legend entries that are not a series


def _legend(labels: list[str], ceiling: float | None,
            omitted: int) -> tuple[list[tuple[float, int, str, int]], int]:
    """Lay the legend out in rows under the plot: (x, row, text, palette index or CEILING or
    NOTE), and the number of rows."""
    entries, x, row = [], float(LEFT), 0
    texts = [(label, i) for i, label in enumerate(labels)]
    if ceiling is not None:
        texts.append((i18n.t("ceiling {value}", value=_fmt(ceiling)), CEILING))
    if omitted:
        texts.append((i18n.t("+{omitted} more series not drawn", omitted=omitted), NOTE))
    for text, index in texts:
        width = SWATCH + 4 + cell_len(text) * LEGEND_CHAR_W + 14  # a CJK character: 2 cells
        if x > LEFT and x + width > WIDTH - RIGHT:
            x, row = float(LEFT), row + 1
        entries.append((x, row, text, index))
        x += width
    return entries, (row + 1 if texts else 0)


def line_chart(title: str, series: dict[str, Points], ceiling: float | None = None,
               omitted: int = 0) -> str:
    """One chart: each series a polyline, x from the first point to the last (unix times).

    At most MAX_SERIES series are drawn (the caller puts the ones that matter first); the
    legend sits under the time axis, a row per line of entries, and says how many series the
    caller (``omitted``) or this limit left out, so a chart never hides a GPU silently.
    """
    drawn = list(series.items())[:MAX_SERIES]
    omitted += len(series) - len(drawn)
    points = [p for _, pts in drawn for p in pts]
    if not points:
        return ""
    t0 = min(t for t, _ in points)
    now = max(t for t, _ in points)
    span_t = max(now - t0, 1.0)
    values = [v for _, v in points] + ([ceiling] if ceiling is not None else [])
    low, high = min(values + [0.0]), max(values)
    if high == low:
        high = low + 1.0
    plot_w, plot_h = WIDTH - LEFT - RIGHT, PLOT_HEIGHT - TOP - BOTTOM

    def x(t: float) -> float:
        return LEFT + (t - t0) / span_t * plot_w

    def y(v: float) -> float:
        return TOP + (1 - (v - low) / (high - low)) * plot_h

    legend, rows = _legend([label for label, _ in drawn], ceiling, omitted)
    height = PLOT_HEIGHT + rows * LEGEND_ROW + (4 if rows else 0)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" role="img" viewBox="0 0 {WIDTH} {height}" '
             f'width="{WIDTH}" height="{height}" class="chart">',
             f"<title>{escape(title)}</title>",
             f'<text x="{LEFT}" y="14" class="ct">{escape(title)}</text>',
             f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" class="frame"/>']
    for value in (low, (low + high) / 2, high):
        parts.append(f'<text x="{LEFT - 4}" y="{y(value) + 4:.1f}" class="ax" '
                     f'text-anchor="end">{escape(_fmt(value))}</text>')
    minutes = span_t / 60
    parts.append(f'<text x="{LEFT}" y="{PLOT_HEIGHT - 8}" class="ax">-{minutes:.0f} min</text>')
    last = time.strftime("%H:%M:%SZ", time.gmtime(now))
    parts.append(f'<text x="{WIDTH - RIGHT}" y="{PLOT_HEIGHT - 8}" class="ax" '
                 f'text-anchor="end">{last}</text>')
    if ceiling is not None:
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(ceiling):.1f}" '
                     f'y2="{y(ceiling):.1f}" class="ceiling"/>')
    for i, (_, pts) in enumerate(drawn):
        color = PALETTE[i]
        coords = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in pts)
        if len(pts) == 1:
            parts.append(f'<circle cx="{x(pts[0][0]):.1f}" cy="{y(pts[0][1]):.1f}" r="2.5" '
                         f'fill="{color}"/>')
        else:
            parts.append(f'<polyline points="{coords}" fill="none" stroke="{color}" '
                         'stroke-width="1.5"/>')
    for x0, row, text, index in legend:
        y0 = PLOT_HEIGHT + row * LEGEND_ROW + 2
        if index >= 0:
            parts.append(f'<rect x="{x0:.0f}" y="{y0}" width="{SWATCH}" height="{SWATCH}" '
                         f'fill="{PALETTE[index]}"/>')
        elif index == CEILING:
            parts.append(f'<line x1="{x0:.0f}" x2="{x0 + SWATCH:.0f}" y1="{y0 + 5}" '
                         f'y2="{y0 + 5}" class="ceiling"/>')
        if index != NOTE:
            x0 += SWATCH + 4
        parts.append(f'<text x="{x0:.0f}" y="{y0 + 9}" class="lg">{escape(text)}</text>')
    parts.append("</svg>")
    return "".join(parts)
