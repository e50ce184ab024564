"""engine.slots against hostile llama.cpp pages served on loopback: slot counts that are
NaN, 1e999, negative or strings, /slots that is no list or a list of junk, /metrics that is
garbage. Each is "not a number to judge" with the reason naming the URL: never a crash, a
rule error or "None" in a title."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from doctor.model import ProbeResult, ScanOptions
from doctor.rules.evaluate import evaluate
from doctor.seam.live import LiveHost
from probes.engine import slots as engine_slots
from tests.builtin_rules import builtin_rules

RULE = next(r for r in builtin_rules() if r.id == "too-few-slots")
DEFERRED = "llamacpp:requests_processing {busy}\nllamacpp:requests_deferred {deferred}\n"
# name -> (/props body, /slots body, /metrics body)
PAGES = {
    "nan-slots": ('{"total_slots": NaN, "default_generation_settings": {"n_ctx": -5}}',
                  '[{"id": 0, "is_processing": true, "n_ctx": 1e999}]',
                  DEFERRED.format(busy="NaN", deferred="+Inf")),
    "huge-slots": ('{"total_slots": 1e999}', '{"slots": "not a list"}',
                   DEFERRED.format(busy=1, deferred=-3)),
    "string-slots": ('{"total_slots": "four", "default_generation_settings": []}',
                     '[1, "x", null, {"is_processing": "yes"}]', "<html>oops</html>"),
    "slots-not-json": ('{"total_slots": 1}', "{{{{", DEFERRED.format(busy=1, deferred=2.5)),
    "deep": ('{"total_slots": 2}', "[" * 5000 + "]" * 5000, DEFERRED.format(busy=2, deferred=7)),
}


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        props, slots, metrics = PAGES[self.server.scenario]  # type: ignore[attr-defined]
        body = {"/props": props, "/slots": slots, "/metrics": metrics,
                "/health": '{"status":"ok"}'}.get(self.path)
        data = (body if body is not None else "not found").encode()
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Type", "text/plain" if self.path == "/metrics" else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def serve():
    servers = []

    def start(scenario: str) -> str:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        server.scenario = scenario  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.mark.slow
@pytest.mark.parametrize("scenario", sorted(PAGES))
def test_hostile_pages_are_no_numbers(serve, scenario):
    url = serve(scenario)
    record = engine_slots.probe(LiveHost(), ScanOptions(endpoints=(url,)))
    (mine,) = [e for e in record.engines if e.base_url == url]
    assert mine.kind == "llama.cpp"
    for name in ("slots", "busy", "deferred", "offered", "ctx_per_slot", "suggested_slots",
                 "suggested_ctx"):
        value = getattr(mine, name)
        assert value is None or (isinstance(value, int) and 0 <= value < 2**53), (name, value)
    if mine.slots is None:
        assert mine.slots_absent
    findings, errors = evaluate([RULE], [ProbeResult("engine.slots", "ok", 0.0, None,
                                                     engine_slots.SlotsRecord((mine,)))])
    assert errors == []
    assert all("None" not in f.title for f in findings)
    json.dumps([f.evidence for f in findings])  # the evidence is plain data


@pytest.mark.slow
def test_slots_page_that_is_no_list_names_its_url(serve):
    url = serve("huge-slots")
    (mine,) = [e for e in engine_slots.probe(LiveHost(), ScanOptions(endpoints=(url,))).engines
               if e.base_url == url]
    assert mine.slots is None and mine.busy is None and mine.deferred is None
    assert mine.error and f"{url}/slots" in mine.error


@pytest.mark.slow
def test_deep_nesting_is_not_json(serve):
    url = serve("deep")
    (mine,) = [e for e in engine_slots.probe(LiveHost(), ScanOptions(endpoints=(url,))).engines
               if e.base_url == url]
    assert mine.slots == 2 and mine.busy is None and mine.deferred == 7
    assert mine.error and f"{url}/slots" in mine.error
