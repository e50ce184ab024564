"""Inline SVG plots of what one scan measured: bars against their limits, and a curve by level.

No script and no external resource, so the report opens offline and prints. Each plot has a
``<title>`` and a ``<desc>`` (the alt text a screen reader says: every value drawn, in words),
a title line and axis labels with units; a plot with nothing to draw is a "not measured" box
that says why, never an empty frame. The viewBox is WIDTH wide and the page's stylesheet
scales it to its column. Every text that reaches the markup goes through ``html.escape``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
import textwrap
import unicodedata

from doctor.display import number
from doctor.i18n import t

WIDTH = 560
LABEL_W, NOTE_W = 92, 168  # px of the viewBox: row labels on the left, the value on the right
ROW_H, BAR_H, TOP = 22, 12, 30
# a bar's parts (running, then waiting) and its marks (the ceiling, then a second limit)
PART_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c")
MARK_STYLES = (("#b3261e", "4 2"), ("#6a3d9a", "2 2"), ("#555555", "6 3"))
MAX_ROWS = 32  # bars of one plot: 8 GPUs with 2 rows each, and room


@dataclass(frozen=True, slots=True)
class Bar:
    """One row: its parts stacked from 0 (name, value), its limits drawn as ticks across it
    (name, value), and the text to its right. No parts: the row says ``note`` alone."""

    label: str
    parts: tuple[tuple[str, float], ...]
    marks: tuple[tuple[str, float], ...]
    note: str


def _head(title: str, desc: str, height: float, kind: str) -> list[str]:
    return [f'<svg xmlns="http://www.w3.org/2000/svg" role="img" class="plot {kind}" '
            f'viewBox="0 0 {WIDTH} {height:.0f}" preserveAspectRatio="xMinYMin meet">',
            f"<title>{escape(title)}</title><desc>{escape(desc)}</desc>",
            f'<text x="0" y="14" class="ct">{escape(title)}</text>']


def not_measured(title: str, why: str) -> str:
    """The box a plot leaves when nothing it draws was measured: its title and why, the why
    wrapped onto up to three lines (a path breaks at its slashes)."""
    why = why or t("not measured")
    lines = _wrapped(t("not measured: {why}", why=why), 84, 3)
    height = 36 + 15 * len(lines)
    parts = _head(title, t("Not measured: {why}", why=why), height + 4, "empty")
    parts.append(f'<rect x="0.5" y="22.5" width="{WIDTH - 1}" height="{height - 22}" class="frame"/>')
    for i, line in enumerate(lines):
        parts.append(f'<text x="10" y="{42 + 15 * i}" class="nm">{escape(line)}</text>')
    return "".join(parts) + "</svg>"


def _wrapped(text: str, width: int, most: int) -> list[str]:
    # a path is one long word: a space-and-marker after each slash lets textwrap break there,
    # and the markers (with their spaces) go again once it has
    words = text.replace("/", "/\u200b").split()
    lines = textwrap.wrap(" ".join(words).replace("\u200b", " \u200b"), width,
                          break_long_words=True)
    lines = [line.replace(" \u200b", "").replace("\u200b", "") for line in lines]
    if len(lines) > most:
        lines = lines[:most - 1] + [_cut(lines[most - 1] + " …", width)]
    return lines


def text_width(text: str) -> float:
    """About how wide ``text`` is at the legend's 10 px: 6.2 px a Latin letter, 10 px a CJK
    character (full width), so that a Chinese legend's entries do not overlap."""
    return sum(10.0 if unicodedata.east_asian_width(c) in "WF" else 6.2 for c in text)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _ticks(high: float) -> list[float]:
    """0, and round steps up to ``high`` (1, 2 or 5 times a power of ten)."""
    raw = high / 4
    scale = 10 ** len(str(int(raw))) / 10 if raw >= 1 else 1.0
    while scale > raw:
        scale /= 10
    step = next(s * scale for s in (1, 2, 2.5, 5, 10) if s * scale >= raw)
    return [i * step for i in range(int(high / step) + 1)]


def _axis_number(value: float) -> str:
    return number(value, ",.0f") if value >= 10 or value == 0 else number(value, ".2g")


def bars(title: str, desc: str, unit: str, rows: Sequence[Bar]) -> str:
    """Horizontal bars on one axis in ``unit`` (0 to the largest value or limit), a row each."""
    rows = list(rows)[:MAX_ROWS]
    values = [sum(v for _, v in r.parts) for r in rows] + [v for r in rows for _, v in r.marks]
    high = max([v for v in values if v > 0] or [1.0]) * 1.04
    plot_w = WIDTH - LABEL_W - NOTE_W
    names = list(dict.fromkeys(n for r in rows for n, _ in r.marks))[:len(MARK_STYLES)]
    parts_named = list(dict.fromkeys(n for r in rows for n, _ in r.parts))[:len(PART_COLOURS)]

    def x(v: float) -> float:
        return LABEL_W + min(max(v, 0.0), high) / high * plot_w

    legend = [(n, "part", i) for i, n in enumerate(parts_named) if len(parts_named) > 1]
    legend += [(n, "mark", i) for i, n in enumerate(names)]
    axis_y = TOP + len(rows) * ROW_H + 4
    height = axis_y + 30 + (16 if legend else 0)
    out = _head(title, desc, height, "bars")
    for i, row in enumerate(rows):
        y = TOP + i * ROW_H
        out.append(f'<text x="{LABEL_W - 6}" y="{y + 14}" class="lb" text-anchor="end">'
                   f"{escape(_cut(row.label, 15))}</text>")
        out.append(f'<rect x="{LABEL_W}" y="{y + 4}" width="{plot_w}" height="{BAR_H}" '
                   'class="track"/>')
        start = 0.0
        for name, value in row.parts:
            colour = PART_COLOURS[parts_named.index(name) if name in parts_named else 0]
            out.append(f'<rect x="{x(start):.1f}" y="{y + 4}" width="{x(start + value) - x(start):.1f}" '
                       f'height="{BAR_H}" fill="{colour}"/>')
            start += value
        for name, value in row.marks:
            colour, dash = MARK_STYLES[names.index(name) if name in names else 0]
            out.append(f'<line x1="{x(value):.1f}" x2="{x(value):.1f}" y1="{y + 1}" y2="{y + 19}" '
                       f'stroke="{colour}" stroke-width="2" stroke-dasharray="{dash}"/>')
        cls = "vl" if row.parts else "vl nm"
        out.append(f'<text x="{WIDTH - NOTE_W + 6}" y="{y + 14}" class="{cls}">'
                   f"{escape(_cut(row.note, 30))}</text>")
    out.append(f'<line x1="{LABEL_W}" x2="{LABEL_W + plot_w}" y1="{axis_y}" y2="{axis_y}" '
               'class="axis"/>')
    for tick in _ticks(high):
        out.append(f'<text x="{x(tick):.1f}" y="{axis_y + 12}" class="ax" text-anchor="middle">'
                   f"{escape(_axis_number(tick))}</text>")
    out.append(f'<text x="{LABEL_W + plot_w / 2:.0f}" y="{axis_y + 25}" class="ax" '
               f'text-anchor="middle">{escape(unit)}</text>')
    out += _legend(legend, height - 4)
    return "".join(out) + "</svg>"


def _legend(entries: list[tuple[str, str, int]], y: float) -> list[str]:
    out, x0 = [], float(LABEL_W)
    for name, kind, i in entries:
        if kind == "part":
            out.append(f'<rect x="{x0:.0f}" y="{y - 9}" width="10" height="10" '
                       f'fill="{PART_COLOURS[i]}"/>')
        else:
            colour, dash = MARK_STYLES[i]
            out.append(f'<line x1="{x0 + 5:.0f}" x2="{x0 + 5:.0f}" y1="{y - 11}" y2="{y + 1}" '
                       f'stroke="{colour}" stroke-width="2" stroke-dasharray="{dash}"/>')
        out.append(f'<text x="{x0 + 14:.0f}" y="{y}" class="lg">{escape(_cut(name, 30))}</text>')
        x0 += 24 + text_width(_cut(name, 30))
    return out


@dataclass(frozen=True, slots=True)
class Curve:
    """One y axis of a curve plot: its name with unit, and a value per level (None: none)."""

    name: str
    values: tuple[float | None, ...]


def curve(title: str, desc: str, x_name: str, levels: Sequence[int], left: Curve,
          right: Curve, mark: int | None = None, hollow: Sequence[bool] = ()) -> str:
    """Two lines over the same levels (evenly spaced: a sweep doubles its concurrency), the
    left one on the left axis, the right one on the right; ``mark`` draws a dashed line at
    that level (the knee), ``hollow`` levels are drawn as open circles (not judged)."""
    x0, x1, top, bottom = 62.0, WIDTH - 62.0, 40.0, 210.0
    height = bottom + 44
    out = _head(title, desc, height, "curve")
    out.append(f'<rect x="{x0}" y="{top}" width="{x1 - x0}" height="{bottom - top}" class="frame"/>')
    n = len(levels)

    def x(i: int) -> float:
        return x0 + 16 + (i / (n - 1) if n > 1 else 0.5) * (x1 - x0 - 32)

    for i, level in enumerate(levels):
        out.append(f'<text x="{x(i):.1f}" y="{bottom + 13}" class="ax" text-anchor="middle">'
                   f"{level}</text>")
    out.append(f'<text x="{(x0 + x1) / 2:.0f}" y="{bottom + 28}" class="ax" text-anchor="middle">'
               f"{escape(x_name)}</text>")
    if mark is not None and mark in levels:
        mx = x(list(levels).index(mark))
        out.append(f'<line x1="{mx:.1f}" x2="{mx:.1f}" y1="{top}" y2="{bottom}" class="knee"/>')
        out.append(f'<text x="{mx + 4:.1f}" y="{top + 12}" class="lg">{escape(t("knee at {level}", level=mark))}</text>')
    for side, axis, colour in (("left", left, PART_COLOURS[0]), ("right", right, "#d62728")):
        known = [v for v in axis.values if v is not None]
        high = max(known + [0.0]) * 1.1 or 1.0

        def y(v: float, high: float = high) -> float:
            return bottom - v / high * (bottom - top)

        ax_x, anchor = (x0 - 4, "end") if side == "left" else (x1 + 4, "start")
        for tick in _ticks(high):
            out.append(f'<text x="{ax_x}" y="{y(tick) + 4:.1f}" class="ax" text-anchor="{anchor}" '
                       f'fill="{colour}">{escape(_axis_number(tick))}</text>')
        label_x = 12 if side == "left" else WIDTH - 4
        out.append(f'<text transform="translate({label_x} {(top + bottom) / 2:.0f}) rotate(-90)" '
                   f'class="ax" text-anchor="middle" fill="{colour}">{escape(axis.name)}</text>')
        run: list[str] = []
        for i, v in enumerate(list(axis.values) + [None]):
            if v is None:
                if len(run) > 1:
                    out.append(f'<polyline points="{" ".join(run)}" fill="none" stroke="{colour}" '
                               'stroke-width="2"/>')
                run = []
                continue
            run.append(f"{x(i):.1f},{y(v):.1f}")
            open_dot = i < len(hollow) and hollow[i]
            out.append(f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="3.5" stroke="{colour}" '
                       f'fill="{"#fff" if open_dot else colour}"/>')
    legend_y = height - 4
    out.append(f'<rect x="{x0}" y="{legend_y - 9}" width="10" height="10" fill="{PART_COLOURS[0]}"/>'
               f'<text x="{x0 + 14}" y="{legend_y}" class="lg">{escape(left.name)}</text>')
    rx = x0 + 40 + text_width(left.name)
    out.append(f'<rect x="{rx:.0f}" y="{legend_y - 9}" width="10" height="10" fill="#d62728"/>'
               f'<text x="{rx + 14:.0f}" y="{legend_y}" class="lg">{escape(right.name)}</text>')
    if any(hollow):
        hx = rx + 40 + text_width(right.name)
        out.append(f'<circle cx="{hx + 5:.0f}" cy="{legend_y - 4}" r="3.5" stroke="#555" fill="#fff"/>'
                   f'<text x="{hx + 14:.0f}" y="{legend_y}" class="lg">{escape(t("level not judged"))}</text>')
    return "".join(out) + "</svg>"
