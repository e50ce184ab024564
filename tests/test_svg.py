"""The report's inline SVG charts: every series drawn or counted, a legend that stays off the
plot and off itself, every text escaped."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from reports.svg import LEFT, MAX_SERIES, PLOT_HEIGHT, WIDTH, line_chart

NS = "{http://www.w3.org/2000/svg}"


def _series(n: int, label: str = "gpu={i}, uuid=GPU-{i:08x}-0000") -> dict:
    return {label.format(i=i): [(1000.0 + t, 40.0 + i + t / 100) for t in range(0, 3600, 600)]
            for i in range(n)}


def _legend(svg: str) -> list[ET.Element]:
    return [e for e in ET.fromstring(svg).iter(NS + "text") if e.get("class") == "lg"]


@pytest.mark.parametrize(("n", "drawn", "note"), [
    (1, 1, None),
    (8, 8, None),  # an 8-GPU host: every GPU its own line and colour
    (MAX_SERIES, MAX_SERIES, None),
    (12, MAX_SERIES, "+2 more series not drawn"),
])
def test_every_series_is_drawn_or_counted(n, drawn, note):
    svg = line_chart("llm_doctor_gpu_thermal_power_temperature_celsius", _series(n))
    root = ET.fromstring(svg)
    assert len(list(root.iter(NS + "polyline"))) == drawn
    texts = [e.text for e in _legend(svg)]
    assert len(texts) == drawn + (1 if note else 0)
    assert (texts[-1] == note) if note else all("more series" not in t for t in texts)
    colours = {e.get("fill") for e in root.iter(NS + "rect") if e.get("class") != "frame"}
    assert len(colours) == drawn


def test_series_left_out_by_the_caller_are_counted_too():
    svg = line_chart("x", _series(3), omitted=5)
    assert _legend(svg)[-1].text == "+5 more series not drawn"


def test_the_legend_sits_under_the_plot_and_its_entries_do_not_overlap():
    svg = line_chart("x", _series(MAX_SERIES), ceiling=120.0)
    root = ET.fromstring(svg)
    height = float(root.get("height"))
    rows: dict[float, list[tuple[float, float]]] = {}
    for text in _legend(svg):
        y = float(text.get("y"))
        assert PLOT_HEIGHT < y <= height  # under the time axis, inside the picture
        x = float(text.get("x"))
        right = x + len(text.text) * 6.2
        assert LEFT <= x and right <= WIDTH
        rows.setdefault(y, []).append((x, right))
    assert len(rows) > 1  # ten long labels need more than one row
    for spans in rows.values():
        spans.sort()
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    assert [t.text for t in _legend(svg)][-1] == "ceiling 120"


def test_the_callers_order_is_kept_so_the_findings_item_comes_first():
    series = {"gpu=7": [(0.0, 1.0), (60.0, 2.0)], "gpu=0": [(0.0, 1.0), (60.0, 2.0)]}
    assert [t.text for t in _legend(line_chart("x", series))] == ["gpu=7", "gpu=0"]


def test_labels_and_title_are_escaped():
    svg = line_chart("<b>t</b>", {'<script>alert(1)</script>': [(0.0, 1.0)]})
    assert "<script>" not in svg and "<b>" not in svg
    assert _legend(svg)[0].text == "<script>alert(1)</script>"  # shown as text


def test_no_points_no_chart():
    assert line_chart("x", {"a": []}) == ""
