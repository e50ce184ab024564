"""Engine pages of the wrong shape, and hostile numbers in them, are no figure to judge.

A real server on loopback answers each engine page (/metrics, /v1/models, /props, /info,
/server_info, /api/ps, /slots, streamed /v1/completions) with a body of the wrong shape or
with hostile numbers: ``data`` an object or a number, ``models`` a number, a 400-digit
sample value, ``max_model_len: 1e999``, NaN and infinite lengths, negative counts. Before,
these were "internal error ... please report it" in every engine probe.
"""

from __future__ import annotations

import json
import math

import pytest

from doctor import values
from doctor.seam.live import LiveHost
from doctor.workload.loadgen import RequestTarget, Workload, run_requests
from doctor.model import Level, ScanOptions
from probes.engine import ollama as engine_ollama
from probes.helpers.promtext import PageError, parse
from probes.registry import PROBES
from doctor.scan import scan
from tests.builtin_rules import builtin_rules
from tests.hostile_http import RawServer, Request, response

RULES = builtin_rules()
QUICK_ENGINE_PROBES = tuple(p for p in PROBES if p.name.startswith("engine.")
                            and p.level == Level.QUICK)
ACTIVE_PROBES = tuple(p for p in PROBES if p.name in ("engine.discovery", "engine.warmup",
                                                       "engine.output"))
HUGE = "9" * 400


@pytest.fixture(autouse=True)
def no_local_engines(monkeypatch):
    monkeypatch.setattr("probes.helpers.engine_discovery.engine_processes", lambda host: ())
    # engine.ollama reads /api/ps a second time 2 s after discovery (a reload between the two
    # is what it looks for); the shapes here are the same on both reads, so no wait is needed
    monkeypatch.setitem(engine_ollama.READ_INTERVAL_S, Level.QUICK, 0.01)


def _serving(pages: dict[str, str]) -> RawServer:
    def answer(request: Request) -> bytes:
        body = pages.get(request.path.split("?")[0])
        if body is None:
            return response(404, b'{"detail":"Not Found"}', "Content-Type: application/json")
        return response(200, body.encode(), "Content-Type: application/json")
    return RawServer(answer)


def _scan(server: RawServer, probes=QUICK_ENGINE_PROBES, level=Level.QUICK):
    report = scan(LiveHost(), ScanOptions(level=level, endpoints=(server.origin,)), probes, RULES)
    for probe in report.probes:
        assert "internal error" not in (probe.reason or ""), (probe.name, probe.reason)
    return {p.name: p for p in report.probes}


def _engine(probes):
    (engine,) = probes["engine.discovery"].record.engines
    return engine


def _all_figures_finite(record) -> None:
    for name in ("max_model_len", "max_num_seqs", "max_num_batched_tokens", "block_size",
                 "tensor_parallel_size"):
        value = getattr(record, name)
        assert value is None or (isinstance(value, int) and 1 <= value <= 2**53), (name, value)
    share = record.gpu_memory_utilization
    assert share is None or 0 <= share <= 1


SHAPES = {
    "v1-models-data-an-object": {"/v1/models": '{"object": "list", "data": {"0": {"id": "m"}}}'},
    "v1-models-data-a-number": {"/v1/models": '{"data": 5}'},
    "v1-models-data-a-string": {"/v1/models": '{"data": "models"}'},
    "v1-models-data-numbers": {"/v1/models": '{"data": [1, 2, 3]}'},
    "v1-models-a-list": {"/v1/models": '[{"id": "m"}]'},
    "v1-models-id-an-object": {"/v1/models": '{"data": [{"id": {"a": 1}, "owned_by": ["vllm"], '
                                             '"root": 7, "max_model_len": "many"}]}'},
    "api-ps-models-a-number": {"/api/ps": '{"models": 5}'},
    "api-ps-models-objects": {"/api/ps": '{"models": [{"name": 1, "context_length": {"x": 1}}]}'},
    "props-settings-a-list": {"/props": '{"total_slots": "four", '
                                        '"default_generation_settings": [1], "model_path": 3}'},
    "info-wrong-types": {"/info": '{"model_id": [], "max_total_tokens": true, '
                                  '"max_concurrent_requests": {"n": 1}}'},
    "server-info-wrong-types": {"/server_info": '{"mem_fraction_static": "lots", "tp_size": [2], '
                                                '"context_length": null, "page_size": -16, '
                                                '"api_key": {"k": 1}, "disable_cuda_graph": "no"}'},
    "nested-100000-deep": {"/v1/models": "[" * 100000 + "]" * 100000},
    "not-json": {"/v1/models": "<html>502</html>", "/props": "{", "/api/ps": "\x00\xff"},
}


@pytest.mark.parametrize("name", list(SHAPES))
def test_a_page_of_the_wrong_shape_is_no_figure_and_no_probe_fails(name):
    with _serving(SHAPES[name]) as server:
        probes = _scan(server)
    engine = _engine(probes)
    _all_figures_finite(engine)
    assert engine.model is None or isinstance(engine.model, str)
    assert engine.model_path is None or isinstance(engine.model_path, str)


NUMBERS = [
    # (the max_model_len a page gives, as JSON text) → max_model_len kept
    ("1e999", None), ("-1e999", None), ("NaN", None), ("Infinity", None), (HUGE, None),
    ("-4096", None), ("0", None), ("4096.5", None), ('"4096"', 4096), ("4096", 4096),
    ("4096.0", 4096), ("true", None), ('"1e999"', None), ('"' + HUGE + '"', None),
]


@pytest.mark.parametrize("given,kept", NUMBERS, ids=[n[0][:12] for n in NUMBERS])
# /api/ps is read twice 2 s apart (engine.ollama's reload check): slow, the others are not
@pytest.mark.parametrize("page", ["/v1/models", "/props", "/info", "/server_info",
                                  pytest.param("/api/ps", marks=pytest.mark.slow)])
def test_a_hostile_length_on_any_page_is_no_length(page, given, kept):
    body = {"/v1/models": '{"data": [{"id": "m", "owned_by": "vllm", "max_model_len": %s}]}',
            "/props": '{"total_slots": 4, "default_generation_settings": {"n_ctx": %s}}',
            "/info": '{"model_id": "m", "max_total_tokens": %s}',
            "/server_info": '{"mem_fraction_static": 0.9, "context_length": %s}',
            "/api/ps": '{"models": [{"name": "m", "context_length": %s}]}'}[page] % given
    with _serving({page: body}) as server:
        engine = _engine(_scan(server))
    assert engine.max_model_len == kept
    _all_figures_finite(engine)


METRICS_HEAD = "# TYPE vllm:num_requests_running gauge\n"


@pytest.mark.parametrize("sample,says", [
    (f"vllm:num_requests_running {HUGE}", "a number too large for a float"),
    (f"vllm:num_requests_running 1 {HUGE}", "a number too large for a float"),
])
def test_a_400_digit_sample_makes_the_page_no_prometheus_page(sample, says):
    with _serving({"/metrics": METRICS_HEAD + sample + "\n"}) as server:
        probes = _scan(server)
    metrics = probes["engine.metrics"]
    assert metrics.status == "error" and says in metrics.reason
    with pytest.raises(PageError, match=says):
        parse(sample + "\n", "src")


HOSTILE_GAUGES = """\
vllm:num_requests_running NaN
vllm:num_requests_waiting -3
vllm:gpu_cache_usage_perc 5.0
vllm:kv_cache_usage_perc +Inf
vllm:num_preemptions_total -Inf
vllm:prompt_tokens_total 1e308
vllm:generation_tokens_total 1e308
vllm:cache_config_info{block_size="1e999",num_gpu_blocks="-5",gpu_memory_utilization="NaN",cache_dtype="auto"} 1
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="NaN"} 3
vllm:time_to_first_token_seconds_bucket{le="0.1"} 1e308
vllm:time_to_first_token_seconds_bucket{le="1e308"} 1e308
vllm:time_to_first_token_seconds_bucket{le="+Inf"} 1e308
vllm:time_to_first_token_seconds_bucket{le="+Inf",engine="1"} 1e308
vllm:time_to_first_token_seconds_count 1e308
vllm:time_to_first_token_seconds_sum Inf
# TYPE vllm:request_prompt_tokens histogram
vllm:request_prompt_tokens_bucket{le="-5"} 1
vllm:request_prompt_tokens_bucket{le="1e300"} -2
vllm:request_prompt_tokens_bucket{le="+Inf"} NaN
"""


@pytest.mark.slow
def test_nan_infinite_and_negative_samples_are_no_figures_with_a_reason():
    with _serving({"/metrics": HOSTILE_GAUGES}) as server:
        probes = _scan(server)
    assert probes["engine.metrics"].status == "ok", probes["engine.metrics"].reason
    (m,) = probes["engine.metrics"].record.engines
    assert m.requests_running is None and m.requests_waiting is None
    assert m.kv_cache_use is None and m.preemptions_total is None
    for name in ("ttft_p50_s", "ttft_p95_s", "ttft_p99_s", "prompt_tokens_per_s",
                 "generation_tokens_per_s", "latency_requests"):
        value = getattr(m, name)
        assert value is None or (math.isfinite(value) and value >= 0), (name, value)
    assert all(math.isfinite(v) and v >= 0 for v in m.request_tokens_mix)
    assert any(a.startswith("running:") and "no finite value" in a for a in m.absent)
    assert any(a.startswith("requests_waiting:") and "-3" in a for a in m.absent)
    assert any(a.startswith("kv_cache_use:") for a in m.absent)
    kv = probes["engine.kv_cache"]
    assert kv.status == "ok", kv.reason
    (e,) = kv.record.engines
    assert e.block_size is None and e.num_gpu_blocks is None
    _all_figures_finite(_engine(probes))
    load = probes["engine.load"]  # no running figure on /metrics, no /slots: every read failed
    assert load.status == "error" and "no running-requests figure" in load.reason, load.reason


@pytest.mark.parametrize("slots", ['{"slots": []}', "[1, 2, null]", '[{"is_processing": "yes"}]',
                                   "5", "[" * 50000])
def test_slots_of_the_wrong_shape_are_no_load_figure(slots):
    with _serving({"/slots": slots}) as server:
        probes = _scan(server)
    load = probes["engine.load"]
    if load.status == "ok":
        assert load.record.engines[0].running == 0  # a list with no slot processing
    else:  # issue 28: every read failed is the probe's error, named, never "ok"
        assert load.status == "error" and "/slots" in load.reason, load.reason


def _stream(*events: str) -> bytes:
    body = "".join(f"data: {e}\n\n" for e in events).encode()
    return response(200, body, "Content-Type: text/event-stream")


STREAMS = {
    "choices-an-object": _stream('{"choices": {"0": {"text": "a"}}}', "[DONE]"),
    "text-a-number": _stream('{"choices": [{"text": 5}]}', '{"choices": [{"delta": []}]}'),
    "usage-a-list": _stream('{"choices": [{"text": "a"}], "usage": [1]}', "[DONE]"),
    "usage-hostile": _stream('{"choices": [{"text": "a"}], "usage": {"completion_tokens": 1e999, '
                             f'"prompt_tokens": {HUGE}}}}}', "[DONE]"),
    "error-nested": _stream('{"error": {"message": {"deep": [1, 2]}}}'),
    "nested-deep": _stream("[" * 100000),
    "event-a-number": _stream("5", "null", '"text"'),
    "endless-line": b"HTTP/1.1 200 OK\r\nX: " + b"a" * 200000 + b"\r\n\r\n",
    "huge-chunk": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffff\r\nabc",
    "negative-chunk": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\nabc",
    "status-unicode-digits": "HTTP/1.1 ²00 OK\r\n\r\n".encode(),
}


@pytest.mark.parametrize("name", list(STREAMS))
def test_a_streamed_completion_of_the_wrong_shape_is_a_failed_request_not_a_crash(name):
    with RawServer(lambda r: STREAMS[name]) as server:
        results = run_requests(RequestTarget(server.origin), Workload(16, 4, timeout_s=5), 1, 2, 10)
    assert results
    for result in results:
        assert isinstance(result.output_tokens, int) and result.output_tokens >= 0
        assert result.prompt_tokens is None or isinstance(result.prompt_tokens, int)
        assert isinstance(result.text, str)
        assert result.error is None or isinstance(result.error, str)


def test_a_stream_larger_than_the_bound_is_cut():
    endless = [(b"HTTP/1.1 200 OK\r\n\r\n", 0.0)] + [(b"x" * 65536, 0.0)] * 400  # 26 MB, no event
    with RawServer(lambda r: endless) as server:
        (result,) = run_requests(RequestTarget(server.origin), Workload(16, 4, timeout_s=20), 1, 1, 20)
    assert not result.ok and "larger than 16 MiB" in (result.error or "")


def test_the_active_probes_take_a_hostile_stream_without_failing_inside():
    with RawServer(lambda r: STREAMS["usage-hostile"] if "completions" in r.path
                   else response(404, b"{}")) as server:
        probes = _scan(server, ACTIVE_PROBES, Level.STANDARD)
    for name in ("engine.warmup", "engine.output"):
        assert probes[name].status == "ok", (name, probes[name].reason)


@pytest.mark.parametrize("value,number,count", [
    (4096, 4096.0, 4096), ("4096", 4096.0, 4096), (4096.0, 4096.0, 4096), (0.5, 0.5, None),
    (-3, -3.0, None), (True, None, None), (None, None, None), ([1], None, None),
    (float("nan"), None, None), (float("inf"), None, None), ("1e999", None, None),
    (10**400, None, None), ("9" * 400, None, None), ("nan", None, None), (2**60, 2.0**60, None),
    ({"a": 1}, None, None), ("0x10", None, None), ("", None, None),
])
def test_the_value_helpers(value, number, count):
    assert values.number(value) == number
    assert values.count(value) == count


def test_the_json_helpers():
    page = json.loads('{"data": [{"id": "m"}], "n": 5}')
    assert values.field(page, "data", 0, "id") == "m"
    assert values.field(page, "data", 1, "id") is None
    assert values.field(page, "n", 0) is None and values.field([1], "x") is None
    assert values.first(page, "data") == {"id": "m"} and values.first(page, "n") == {}
    assert values.fraction(0.9) == 0.9 and values.fraction(90) is None
    assert values.text("x" * 2000) is None and values.text(5) is None
    with pytest.raises(ValueError, match="nested too deeply"):
        values.page_json("[" * 100000)


def test_a_model_path_from_an_engine_elsewhere_is_not_taken_for_a_path_here(tmp_path):
    """Other probes read <model_path>/config.json: an engine at another address names a
    path on its own machine, and a hostile one would name any file of this one."""
    from doctor.seam.host import HttpResponse
    from doctor.seam.recorded import RecordedHost, RecordWriter
    from probes.engine.discovery import discover

    writer = RecordWriter(tmp_path / "h")
    page = json.dumps({"data": [{"id": "m", "owned_by": "vllm", "root": "/etc",
                                 "max_model_len": 4096}]})
    for base in ("http://10.0.0.7:8000", "http://127.0.0.1:8000"):
        writer.http(f"{base}/metrics", HttpResponse("x", 404, "", "", 0.0))
        writer.http(f"{base}/v1/models", HttpResponse("x", 200, "application/json", page, 0.0))
    writer.dir("/proc", [])
    writer.save({"level": "quick"}, hostname="h", captured_at="2026-12-01T00:00:00Z")
    host = RecordedHost(tmp_path / "h")
    host.new_scan()
    found = {e.base_url: e for e in discover(host, ScanOptions(
        endpoints=("http://10.0.0.7:8000", "http://127.0.0.1:8000")))}
    assert found["http://10.0.0.7:8000"].model_path is None
    assert found["http://10.0.0.7:8000"].max_model_len == 4096  # the rest of the page is kept
    assert found["http://127.0.0.1:8000"].model_path == "/etc"
