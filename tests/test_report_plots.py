"""The HTML report's plots of what a scan measured, and its layout at 1280 px in Chromium.

The story: a recorded GPU host (the a100 PCIe box with its bandwidth measured, the 8-GPU
h100 box without) beside the recorded vLLM engine under KV pressure, and an engine.load record
whose saved sweep has a knee at 16. The report must draw each bandwidth against its ceiling,
the knee curve, KV use and the queue, GPU temperatures, clocks and power against their limits;
say "not measured" and why where nothing was; and fit a laptop's 1280 px with no horizontal
scroll.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import xml.etree.ElementTree as ET

import pytest

from doctor.model import Level, ProbeResult, ScanOptions, ScanReport
from doctor.scan import scan
from doctor.seam.live import LiveHost
from doctor.seam.recorded import RecordedHost
from doctor.workload import knee
from probes.engine import load as engine_load
from probes.engine.load import EngineLoad, LoadRecord, SweepPoint
from probes.registry import PROBES
from reports import html, plots
from tests.conftest import FIXTURE_HOSTS
from tests.test_fixtures import RULES

URL = "http://127.0.0.1:8000"
# (concurrency, output tokens/s, TTFT p50 ms): flat from 16 on, TTFT climbing past it
SWEEP = ((1, 310.0, 41.0), (2, 590.0, 44.0), (4, 1080.0, 52.0), (8, 1760.0, 70.0),
         (16, 2010.0, 160.0), (32, 2050.0, 410.0), (64, 2040.0, 980.0))


def _scan(name: str) -> ScanReport:
    host = RecordedHost(FIXTURE_HOSTS / name)
    return scan(host, ScanOptions(level=Level.parse("full")), PROBES, RULES)


def gpu_host_with_engine(gpu_host: str) -> ScanReport:
    """The GPU host's scan with the recorded vLLM engine's probes in place of its own, and an
    engine.load record carrying a saved sweep."""
    gpu, engine = _scan(gpu_host), _scan("vllm-v1-kv-pressure")
    engines = {p.name: p for p in engine.probes if p.name.startswith("engine.")}
    load = LoadRecord((EngineLoad(URL, "vllm", "/models/llama-3-8b-instruct", 48, 12, "/metrics", 16,
                                  "found", "2026-11-29T10:00:00Z", "/state/knee-63767aa5615d.json",
                                  None, tuple(SweepPoint(*p, True) for p in SWEEP)),), ())
    engines["engine.load"] = ProbeResult("engine.load", "ok", 0.01, None, load,
                                         summary=engine_load.summary(load))
    probes = [engines.get(p.name, p) for p in gpu.probes]
    return dataclasses.replace(gpu, probes=probes, findings=[*gpu.findings, *engine.findings])


def _svgs(page: str, kind: str) -> list[ET.Element]:
    found = re.findall(rf'<svg [^>]*class="plot {kind}".*?</svg>', page, re.S)
    return [ET.fromstring(s) for s in found]  # each one well-formed XML


def _texts(svg: ET.Element) -> str:
    return " ".join(e.text or "" for e in svg.iter())


@pytest.mark.slow
def test_a_gpu_host_with_an_engine_has_every_plot_with_title_axes_and_alt_text():
    page = html.render(gpu_host_with_engine("a100-pcie-gen3x8"))
    drawn = _svgs(page, "(?:bars|curve)")
    titles = [svg.find("{http://www.w3.org/2000/svg}title").text for svg in drawn]
    assert titles == ["Host memory bandwidth (STREAM)", "GPU memory bandwidth (device to device)",
                      "PCIe bandwidth, pinned memory (h2d: host to GPU)",
                      f"Throughput knee of {URL.removeprefix('http://')}",
                      "KV cache use per engine", "Requests running and waiting per engine",
                      "GPU temperature against its slowdown and shutdown limits",
                      "GPU clocks against their maximum (SM and memory)",
                      "GPU power draw against its limit"]
    assert _svgs(page, "empty") == []  # everything was measured
    for svg in drawn:
        desc = svg.find("{http://www.w3.org/2000/svg}desc").text
        assert desc and "None" not in desc and "nan" not in desc
    texts = {svg.find("{http://www.w3.org/2000/svg}title").text: _texts(svg) for svg in drawn}
    # the measured value against its ceiling, with the unit on the axis
    assert "362 GB/s, 79% of 461" in texts["Host memory bandwidth (STREAM)"]
    assert "GB/s" in texts["PCIe bandwidth, pinned memory (h2d: host to GPU)"]
    assert "6.61 GB/s, 84% of 7.88" in texts["PCIe bandwidth, pinned memory (h2d: host to GPU)"]
    knee_plot = texts[f"Throughput knee of {URL.removeprefix('http://')}"]
    assert "knee at 16" in knee_plot and "output tokens/s" in knee_plot and "TTFT p50 (ms)" in knee_plot
    assert "99% used" in texts["KV cache use per engine"]
    assert "48 running, 12 waiting" in texts["Requests running and waiting per engine"]
    assert "°C" in texts["GPU temperature against its slowdown and shutdown limits"]
    assert "MHz" in texts["GPU clocks against their maximum (SM and memory)"]


@pytest.mark.slow
def test_a_plot_with_nothing_measured_says_why_instead_of_an_empty_frame():
    """In one line beside the plots drawn (an empty frame each was a wall of them)."""
    page = html.render(gpu_host_with_engine("h100-sxm-8x-nvswitch"))  # no bandwidth recorded
    assert not _svgs(page, "empty")
    (line,) = re.findall(r'<p class="unmeasured">(.*?)</p>', page, re.S)
    for title in ("Host memory bandwidth (STREAM)", "GPU memory bandwidth (device to device)",
                  "PCIe bandwidth, pinned memory (h2d: host to GPU)"):
        assert title in line, line
    assert "measurements.json" in line
    # the eight GPUs' temperatures are drawn, a row each
    (temps,) = [s for s in _svgs(page, "bars") if "temperature" in _texts(s)]
    assert all(f"GPU{i}" in _texts(temps) for i in range(8))


def test_a_cpu_host_without_engine_has_no_gpu_or_engine_plots():
    page = html.render(_scan("this-vm-epyc-2cpu"))
    titles = re.findall(r'class="plot [a-z]+"[^>]*><title>([^<]*)', page)
    assert titles == ["Host memory bandwidth (STREAM)"]


HOSTILE = [
    {"name": "gpu.thermal_power", "status": "ok", "data": {"gpus": [
        {"index": True, "temp_c": "hot", "slowdown_c": 1e308, "sm_clock_mhz": -5,
         "sm_clock_max_mhz": 10**400, "missing": []}, "not a gpu", None]}},
    {"name": "gpu.inventory", "status": "ok", "data": {"gpus": []}},
    {"name": "gpu.bandwidth", "status": "ok", "data": {"gpus": {"0": 1}, "errors": [1]}},
    {"name": "host.memory_bandwidth", "status": "ok", "data": {"triad_gbps": "fast",
                                                                "ceiling_gbps": float("inf")}},
    {"name": "engine.load", "status": "ok", "data": {"engines": [
        {"base_url": ["x"], "sweep": [{"concurrency": 10**400}, {"concurrency": "4"},
                                       {"concurrency": 2, "output_tokens_per_s": float("nan"),
                                        "ttft_p50_ms": -1}, 7],
         "knee_concurrency": 0, "running": 2.5, "waiting": -1},
        {"base_url": "<script>", "sweep": "no"}]}},
    {"name": "engine.kv_cache", "status": "ok", "data": {"engines": [
        {"endpoint": "<b>", "kv_cache_use": 99, "max_num_seqs": "many"}]}},
    {"name": "engine.metrics", "status": "error", "reason": None, "data": None},
]


def test_hostile_records_of_a_saved_report_draw_nothing_they_do_not_hold():
    for heading, svgs in plots.sections(HOSTILE):
        for svg in svgs:
            tree = ET.fromstring(str(svg))  # escaped and well-formed
            text = _texts(tree)
            assert "<script>" not in str(svg) and "nan" not in text and "None" not in text, heading
            for value in re.findall(r' (?:x|y|width|height|cx|cy|x1|x2|y1|y2)="([^"]+)"', str(svg)):
                assert math.isfinite(float(value)), (heading, value)
    first, second = dict(plots.sections(HOSTILE))["Throughput knee"]
    # c=2 (NaN tokens/s, TTFT -1 ms) and c="4" (nothing) are left: neither has a value to draw
    assert "not measured: the saved sweep has no level" in _texts(ET.fromstring(str(first)))
    assert "no saved sweep" in _texts(ET.fromstring(str(second)))


def test_the_saved_sweep_travels_in_the_record_bounded_and_read_as_hostile_input(monkeypatch,
                                                                                  tmp_path):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    path = knee.knee_path(URL)
    path.parent.mkdir(parents=True)
    levels = [{"concurrency": c, "output_tokens_per_s": 100.0 * c, "ttft": {"p50_ms": 10.0 + c},
               "unusable": None} for c in range(1, 41)]
    levels[1] = {"concurrency": True, "output_tokens_per_s": 1}  # not a concurrency: left out
    levels[2] = {"concurrency": 3, "output_tokens_per_s": "1e999", "ttft": [],
                 "unusable": "client late"}
    path.write_text(json.dumps({"schema": knee.SCHEMA, "measured_at": "2026-11-29T10:00:00Z",
                                "knee": {"status": "found", "concurrency": 4}, "levels": levels}))
    (concurrency, status, _, _), points = engine_load.saved_sweep(LiveHost(), URL)
    assert (concurrency, status) == (4, "found")
    assert len(points) == engine_load.MAX_SWEEP_LEVELS - 1  # 32 read, one of them refused
    assert points[0] == SweepPoint(1, 100.0, 11.0, True)
    assert points[1] == SweepPoint(3, None, None, False)
    path.write_text(json.dumps({"schema": "llm-doctor/load/1", "levels": levels}))
    assert engine_load.saved_sweep(LiveHost(), URL)[1] == ()  # an outdated sweep is not drawn
    path.write_text(json.dumps({"schema": knee.SCHEMA, "levels": {"1": 2}}))
    assert engine_load.saved_sweep(LiveHost(), URL)[1] == ()


from tests.test_html_report import _chromium  # noqa: E402  (one finder of Debian's chromium)


@pytest.mark.browser
@pytest.mark.timeout(180)
@pytest.mark.parametrize("gpu_host", ["a100-pcie-gen3x8", "h100-sxm-8x-nvswitch"])
def test_the_report_fits_1280_px_in_chromium_with_every_plot_drawn(tmp_path, gpu_host):
    sync_api = pytest.importorskip("playwright.sync_api") if os.environ.get("CI") != "true" \
        else __import__("playwright.sync_api", fromlist=["sync_playwright"])
    page_file = tmp_path / "report.html"
    page_file.write_text(html.render(gpu_host_with_engine(gpu_host)))
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"],
                                     timeout=60_000)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(page_file.as_uri(), timeout=30_000)
            assert page.evaluate("document.documentElement.scrollWidth") <= 1280
            drawn = page.evaluate("""[...document.querySelectorAll('svg.plot')].map(s => {
                const r = s.getBoundingClientRect();
                return [s.querySelector('title').textContent, r.width, r.height,
                        s.childElementCount, r.right];
            })""")
            # the H100's recording holds no bandwidth: its three say so in one line instead
            assert len(drawn) == {"a100-pcie-gen3x8": 9, "h100-sxm-8x-nvswitch": 6}[gpu_host], drawn
            for title, width, height, children, right in drawn:
                assert width > 300 and height > 40 and children > 3 and right <= 1280, title
            # pids and numbers never wrap: each .n is one line high
            heights = page.evaluate("[...document.querySelectorAll('.n')].map("
                                    "e => e.getClientRects().length)")
            assert heights and max(heights) == 1
            shot = tmp_path / "report-1280.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 50_000
            page.emulate_media(media="print")
            assert page.evaluate("document.documentElement.scrollWidth") <= 1280
        finally:
            browser.close()


def test_a_sweep_saved_by_llm_doctor_load_comes_back_level_by_level(monkeypatch, tmp_path):
    from tests.test_load_probes import _levels

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    levels = _levels((1, 10, 0.1), (2, 19, 0.1), (4, 19.5, 0.3), (8, 19, 0.6))
    found = knee.find_knee(levels)
    knee.save_sweep(knee.sweep_json(URL, {}, levels, found, "2026-11-29T10:00:00Z"))
    (concurrency, _, _, _), points = engine_load.saved_sweep(LiveHost(), URL)
    assert concurrency == found.concurrency == 2
    assert [p.concurrency for p in points] == [lv.concurrency for lv in levels]
    assert [p.output_tokens_per_s for p in points] == [lv.output_tokens_per_s for lv in levels]
    assert [p.ttft_p50_ms for p in points] == [lv.ttft.p50_ms for lv in levels]
