"""Ollama as an engine kind: real processes whose command line reads ``ollama serve`` (and
``ollama runner``), started with OLLAMA_* settings in their environment, answering Ollama's
pages from tests/engine_pages/ollama-* (tests/engine_pages/ollama_impostor.py). There
is no Ollama here: its pages are recorded, its processes and sockets are real."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from doctor.inputs import Inputs
from doctor.model import Level, ProbeResult, ScanOptions
from doctor.rules.evaluate import evaluate
from doctor.seam.live import LiveHost
from doctor.seam.recorded import RecordedHost, RecordWriter
from probes.engine import discovery, ollama
from tests.builtin_rules import builtin_rules
from tests.ollama_process import start, stop

pytestmark = pytest.mark.timeout(90)

PAGES = Path(__file__).parent / "engine_pages"
QUICK = ScanOptions(level=Level.QUICK)
THRASH = next(r for r in builtin_rules() if r.id == "model-reload-thrash")


def mine(record, port: int):
    (found,) = [e for e in record.engines if e.base_url == f"http://127.0.0.1:{port}"]
    return found


def thrash(engine: ollama.OllamaEngine):
    findings, errors = evaluate([THRASH], [ProbeResult("engine.ollama", "ok", 0.0, None,
                                                       ollama.OllamaRecord((engine,)))])
    assert errors == []
    return findings


CALM_ENV = {"OLLAMA_NUM_PARALLEL": "2", "OLLAMA_KEEP_ALIVE": "24h", "OLLAMA_CONTEXT_LENGTH": "8192",
            "OLLAMA_FLASH_ATTENTION": "1", "OLLAMA_KV_CACHE_TYPE": "q8_0", "SECRET_TOKEN": "s3cret"}


@pytest.mark.slow
def test_ollama_settings_models_and_version(tmp_path):
    process, port = start(tmp_path, "ollama-calm", CALM_ENV)
    try:
        host = LiveHost()
        found = discovery.probe(host, QUICK)  # as a scan: engine.ollama is handed its record
        record = ollama.probe(host, QUICK, Inputs({"engine.discovery": found}))
    finally:
        stop(process)
    (reached,) = [r for r in found.reachability if r.endpoint == f"http://127.0.0.1:{port}"]
    (engine,) = [e for e in found.engines if e.pid == process.pid]
    assert engine.kind == "ollama" and reached.outcome == "engine" and reached.basis == "listening"
    e = mine(record, port)
    assert (e.pid, e.version, e.available) == (process.pid, "0.12.6", 2)
    assert (e.num_parallel, e.keep_alive, e.keep_alive_s, e.keep_alive_forever) == (2, "24h", 86400.0, False)
    assert (e.context_length, e.flash_attention, e.kv_cache_type) == (8192, True, "q8_0")
    assert e.settings_unset == ("OLLAMA_MAX_LOADED_MODELS",) and e.settings_absent is None
    (model,) = e.loaded
    assert (model.name, model.size_bytes, model.size_vram_bytes, model.context_length) == (
        "llama3.2:3b", 3394117632, 3394117632, 8192)
    assert model.expires_in_s is not None and 86000 < model.expires_in_s <= 86400
    assert (e.loads, e.unloads, e.context_changes, e.requests_seen) == ((), (), (), 0)
    assert e.read_interval_s is not None and e.read_interval_s >= 1.5
    assert "s3cret" not in repr(record)
    assert thrash(e) == []  # the healthy partner of the reloading Ollama below


@pytest.mark.slow
def test_ollama_reloading_between_the_reads(tmp_path):
    """OLLAMA_KEEP_ALIVE=10s; between discovery's /api/ps and engine.ollama's, llama3.2 came
    back at num_ctx 8192 (it had 4096: a request asked for another num_ctx) and qwen2.5 was
    unloaded (its keep-alive ran out)."""
    process, port = start(tmp_path, "ollama-reloading", {"OLLAMA_KEEP_ALIVE": "10s"})
    try:
        host = LiveHost()
        found = discovery.probe(host, QUICK)  # as a scan: engine.ollama is handed its record
        record = ollama.probe(host, QUICK, Inputs({"engine.discovery": found}))
    finally:
        stop(process)
    e = mine(record, port)
    assert (e.keep_alive, e.keep_alive_s) == ("10s", 10.0)
    assert (e.context_changes, e.unloads, e.loads) == (("llama3.2:3b",), ("qwen2.5:7b",), ())
    assert e.read_interval_s is not None and e.request_keep_alive_s is not None
    assert 9.0 <= e.request_keep_alive_s <= 10.0 + e.read_interval_s + 1.0
    (finding,) = thrash(e)
    assert finding.rule == "model-reload-thrash" and finding.severity.label == "warning"
    assert "reloaded for another num_ctx: llama3.2:3b" in finding.title
    assert "unloaded qwen2.5:7b" in finding.title and "server keep-alive 10 s" in finding.title


@pytest.mark.slow
def test_an_ollama_runner_is_no_engine_of_its_own(tmp_path):
    """``ollama runner`` (one per loaded model) listens on its own loopback port and serves
    none of Ollama's API: discovery does not list it; engine.ollama counts it."""
    server, port = start(tmp_path, "ollama-calm", {})
    runner, runner_port = start(tmp_path, "ollama-calm", {}, role="runner")
    try:
        host = LiveHost()
        found = discovery.probe(host, QUICK)
        record = ollama.probe(host, QUICK, Inputs({"engine.discovery": found}))
    finally:
        stop(server, runner)
    pids = {e.pid for e in found.engines}
    assert server.pid in pids and runner.pid not in pids
    assert not any(e.base_url == f"http://127.0.0.1:{runner_port}" for e in found.engines)
    assert mine(record, port).runners >= 1
    assert mine(record, port).settings_unset == ollama.SETTINGS  # all unset: defaults
    assert mine(record, port).keep_alive_s == ollama.DEFAULT_KEEP_ALIVE_S


@pytest.mark.parametrize(("value", "seconds", "forever"), [
    ("5m", 300.0, False), ("300", 300.0, False), ("1h30m", 5400.0, False), ("0", 0.0, False),
    ("-1", None, True), ("-1m", None, True), ("10s", 10.0, False), ("1.5h", 5400.0, False),
    ("soon", None, None), ("", None, None), ("5m;rm", None, None), ("9" * 400 + "h", None, None)])
def test_keep_alive_as_ollama_reads_it(value, seconds, forever):
    assert ollama.keep_alive_seconds(value) == (seconds, forever)


def _recorded(tmp_path: Path, environ: str) -> RecordedHost:
    writer = RecordWriter(tmp_path)
    writer.file("/proc/77/cmdline", "/usr/local/bin/ollama\0serve\0")
    writer.file("/proc/77/comm", "ollama\n")
    writer.file("/proc/77/environ", environ)
    writer.save({"hostname": "t", "captured_at": "2026-12-01T00:00:00Z", "level": "quick",
                 "llm_doctor_version": "0", "model_dirs": []})
    return RecordedHost(tmp_path)


@pytest.mark.parametrize(("value", "url"), [
    ("0.0.0.0:8080", "http://127.0.0.1:8080"), (":9000", "http://127.0.0.1:9000"),
    ("http://10.0.0.5:11500", "http://10.0.0.5:11500"), ("127.0.0.1", "http://127.0.0.1:11434"),
    ("https://[::1]:443", "https://[::1]:443"), ("0.0.0.0:99999", None), ("a b:80", None),
    ("", None)])
def test_ollama_host_names_its_address(tmp_path, value, url):
    """With its sockets unseen (another user's process, a recording without /proc/net/tcp)
    Ollama is where OLLAMA_HOST puts it; a capture keeps that value (KEPT_ENV)."""
    host = _recorded(tmp_path, f"HOME=/root\0OLLAMA_HOST={value}\0")
    assert discovery.ollama_base_url(host, 77) == url
    (engine,) = [e for e in discovery.discover(host, ScanOptions()) if e.pid == 77]
    assert engine.kind == "ollama" and engine.base_url == (url or "http://127.0.0.1:11434")
    basis = discovery.reachability(host, ScanOptions())[engine.base_url].basis
    assert basis == ("flagged" if url else "default")


def test_a_recording_keeps_the_settings_and_masks_the_rest(tmp_path):
    environ = "".join(f"{k}={v}\0" for k, v in CALM_ENV.items())
    host = _recorded(tmp_path, environ)
    engine = replace(discovery.discover(host, ScanOptions())[0], base_url="http://127.0.0.1:11434")
    e = ollama._one(host, ScanOptions(), engine)
    assert (e.num_parallel, e.keep_alive, e.context_length, e.flash_attention, e.kv_cache_type) == (
        2, "24h", 8192, True, "q8_0")
    kept = "".join(p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file())
    assert "s3cret" not in kept and "OLLAMA_KEEP_ALIVE=24h" in kept


HOSTILE_PS = [
    '{"models":[{"name":5,"size":"NaN","size_vram":-1,"context_length":1e999,"expires_at":12}]}',
    '{"models":[{"name":"x","expires_at":"0001-01-01T00:00:00Z"},{"name":"x"},"junk",null]}',
    '{"models":[{"name":"y","expires_at":"9999-12-31T23:59:59+14:00","context_length":"4096"}]}',
    '{"models":{"name":"z"}}', '[]', 'not json', '{"models":[' + '{"name":"m"},' * 500 + '{}]}',
]


@pytest.mark.slow
@pytest.mark.parametrize("page", HOSTILE_PS)
def test_hostile_ps_pages_are_no_crash(tmp_path, page):
    """Whatever /api/ps says, engine.ollama gives a record and the rule judges it."""
    pages = tmp_path / "pages"
    pages.mkdir()
    (pages / "api_ps.json").write_text(page)
    (pages / "api_version.json").write_text('{"version": ["0.12"]}')
    (pages / "api_tags.json").write_text('{"models": 7}')
    (tmp_path / "run").mkdir()
    process, port = start(tmp_path / "run", str(pages), {"OLLAMA_KEEP_ALIVE": "1e999",
                                                         "OLLAMA_NUM_PARALLEL": "-3",
                                                         "OLLAMA_FLASH_ATTENTION": "maybe"})
    try:
        record = ollama.probe(LiveHost(), QUICK)
    finally:
        stop(process)
    e = mine(record, port)
    assert len(e.loaded) <= ollama.MAX_MODELS and e.version is None and e.available is None
    assert (e.keep_alive_s, e.num_parallel, e.flash_attention) == (None, None, None)
    thrash(e)
