"""engine.* probes against recorded engine pages served on loopback, and hostile endpoints.

The server (tests/engine_pages/server.py) answers the first scrape with a scenario's first
page and later ones with its second, so counters and histograms move between the two
scrapes as they do on a running engine.
"""

from __future__ import annotations

import json
import time

import pytest

from doctor.seam.live import LiveHost
from doctor.model import Level, ScanOptions
from probes.registry import PROBES, by_name
from doctor.scan import scan
from tests import engine_pages
from tests.builtin_rules import builtin_rules
from tests.engine_pages.server import API_KEY, SGLANG_KEY

engine_server = engine_pages.engine_server  # a fixture
RULES = builtin_rules()
ENGINE_PROBES = tuple(p for p in PROBES if p.name.startswith("engine."))


@pytest.fixture(autouse=True)
def no_local_engines(monkeypatch):
    """Only the --endpoint engines: an engine that happens to run on this machine (another
    test's llama-server) must not answer for the impostor."""
    monkeypatch.setattr("probes.helpers.engine_discovery.engine_processes", lambda host: ())


def scan_endpoints(*urls: str, probes=ENGINE_PROBES):
    options = ScanOptions(level=Level.QUICK, endpoints=tuple(urls))
    return scan(LiveHost(), options, probes, RULES)


def render(report, fmt: str) -> str:
    """The report as each output format writes it."""
    if fmt == "json":
        from reports.json_report import render as json_render
        return json_render(report)
    if fmt == "markdown":
        from reports.markdown import render as md_render
        return md_render(report)
    import io

    from rich.console import Console

    from reports.terminal import render as term_render
    out = io.StringIO()
    term_render(report, Console(file=out, width=200))
    return out.getvalue()


def status(report) -> dict:
    return {p.name: p for p in report.probes}


def only(report, *names):
    """The findings of the given rules about the test's engines (not this host's own)."""
    return [f for f in report.findings if f.rule in names]


@pytest.mark.slow
def test_kv_pressure_page_gives_pressure_and_preemption(engine_server):
    report = scan_endpoints(f"{engine_server.url}/vllm-v1-kv-pressure")
    probes = status(report)
    assert probes["engine.metrics"].status == "ok", probes["engine.metrics"].reason
    metrics = probes["engine.metrics"].record.engines[0]
    assert metrics.kind == "vllm" and metrics.kv_cache_use == 0.99
    assert metrics.requests_waiting == 12 and metrics.preemptions_in_window == 15
    assert metrics.latency_window == "between scrapes" and metrics.latency_requests == 20
    assert 1.5 < metrics.ttft_p50_s < metrics.ttft_p95_s <= metrics.ttft_p99_s
    pressure = only(report, "kv-cache-pressure")
    assert len(pressure) == 1 and pressure[0].severity.label == "critical"
    assert pressure[0].symptoms == ("stream-cutoff", "queueing-under-load", "crash-under-concurrency")
    assert pressure[0].evidence["kv_cache_use"] == 0.99
    assert pressure[0].evidence["requests_waiting"] == 12
    preemption = only(report, "engine-preemption")
    assert len(preemption) == 1 and preemption[0].evidence["preemptions_in_window"] == 15
    assert preemption[0].symptoms == ("stream-cutoff", "queueing-under-load")
    discovered = probes["engine.discovery"].record.engines[0]
    assert discovered.max_model_len == 32768 and discovered.block_size == 16
    assert discovered.gpu_memory_utilization == 0.9 and "/v1/models" in discovered.config_from
    assert engine_server.scrapes["vllm-v1-kv-pressure"] >= 2


@pytest.mark.slow
def test_calm_page_gives_neither(engine_server):
    report = scan_endpoints(f"{engine_server.url}/vllm-v1-calm")
    assert status(report)["engine.metrics"].status == "ok"
    assert only(report, "kv-cache-pressure", "engine-preemption") == []
    record = status(report)["engine.metrics"].record.engines[0]
    assert record.kv_cache_use == 0.41 and record.preemptions_in_window == 0
    assert record.ttft_p99_s < 0.1


@pytest.mark.slow
def test_big_blocks_for_short_requests_are_fragmentation(engine_server):
    report = scan_endpoints(f"{engine_server.url}/vllm-v1-short-requests-big-blocks")
    found = only(report, "kv-cache-fragmentation")
    assert len(found) == 1
    assert found[0].evidence["block_size"] == 128 and found[0].evidence["recommended_block_size"] == 16
    assert found[0].evidence["block_waste_fraction"] > 0.5


@pytest.mark.slow
@pytest.mark.parametrize("scenario,kind,absent", [
    ("sglang", "sglang", "preemptions: SGLang exports no preemption or retraction counter"),
    ("tgi", "tgi", "ttft: TGI exports no time-to-first-token histogram"),
    ("triton-trtllm", "tensorrt-llm", "ttft: TensorRT-LLM exports no time-to-first-token histogram"),
])
def test_other_engines_normalise_and_say_what_they_lack(engine_server, scenario, kind, absent):
    report = scan_endpoints(f"{engine_server.url}/{scenario}")
    record = status(report)["engine.metrics"].record.engines[0]
    assert record.kind == kind
    assert absent in record.absent
    assert record.kv_cache_use is not None and record.requests_waiting is not None
    if kind != "tensorrt-llm":
        assert record.e2e_p95_s is not None and record.latency_window == "between scrapes"


@pytest.mark.slow
def test_sglang_and_tgi_configuration_from_their_pages(engine_server):
    report = scan_endpoints(f"{engine_server.url}/sglang", f"{engine_server.url}/tgi")
    engines = {e.kind: e for e in status(report)["engine.discovery"].record.engines}
    assert engines["sglang"].gpu_memory_utilization == 0.88
    assert engines["sglang"].max_model_len == 131072 and engines["sglang"].api_key_set
    assert engines["tgi"].max_num_seqs == 128 and engines["tgi"].max_model_len == 4096
    for fmt in ("json", "markdown", "terminal"):
        assert SGLANG_KEY not in render(report, fmt)


HOSTILE = [("garbage", "not a Prometheus text page"), ("truncated", "not a Prometheus text page"),
           ("huge", "body larger than"), ("drip", "timeout"), ("silent", "timeout")]


@pytest.mark.slow
@pytest.mark.parametrize("name,says", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_endpoint_is_an_error_naming_it_and_the_scan_goes_on(engine_server, name, says):
    host_probes = tuple(p for p in PROBES if p.name in ("host.memory", "host.sysctl"))
    started = time.monotonic()
    report = scan_endpoints(f"{engine_server.url}/{name}", probes=ENGINE_PROBES + host_probes)
    took = time.monotonic() - started
    probes = status(report)
    metrics = probes["engine.metrics"]
    assert metrics.status in ("error", "timeout")
    assert f"{engine_server.url}/{name}/metrics" in metrics.reason and says in metrics.reason
    assert took < by_name()["engine.metrics"].timeout_s
    assert probes["host.memory"].status == "ok" and probes["host.sysctl"].status == "ok"


@pytest.mark.slow
def test_api_key_is_sent_and_never_shown(engine_server, tmp_path):
    url = f"http://:{API_KEY}@127.0.0.1:{engine_server.server_address[1]}/needs-key"
    report = scan_endpoints(url)
    probes = status(report)
    assert probes["engine.metrics"].status == "ok", probes["engine.metrics"].reason
    assert ("/needs-key/metrics", f"Bearer {API_KEY}") in engine_server.requests
    for fmt in ("json", "markdown", "terminal"):
        assert API_KEY not in render(report, fmt)


@pytest.mark.slow
def test_without_the_key_the_error_says_how_to_pass_it(engine_server):
    report = scan_endpoints(f"{engine_server.url}/needs-key")
    metrics = status(report)["engine.metrics"]
    assert metrics.status == "error" and "HTTP 401" in metrics.reason
    assert "--endpoint http://:KEY@host:port" in metrics.reason


@pytest.mark.slow
def test_cli_endpoint_flag_reports_the_engine(engine_server, cli):
    result = cli("scan", "--level", "quick", "--format", "json", "--no-progress",
                 "--endpoint", f"{engine_server.url}/vllm-v1-kv-pressure")
    assert result.returncode == 2, result.stderr
    report = json.loads(result.stdout)
    probes = {p["name"]: p for p in report["probes"]}
    assert probes["engine.metrics"]["status"] == "ok"
    rules = {f["rule"] for f in report["findings"]}
    assert {"kv-cache-pressure", "engine-preemption"} <= rules


def test_a_total_of_finite_values_past_any_float_is_none_not_an_error():
    """Two series of 1.8e308 and 1e308 are each finite; their sum is not, and fsum raises
    OverflowError for it (found by the engine-pages fuzz once more counters were totalled)."""
    from probes.helpers.promtext import parse

    page = parse('# TYPE x_total counter\nx_total{a="1"} 1.7976931348623157e308\n'
                 'x_total{a="2"} 1e308\n', "test")
    assert page.total("x_total") is None
