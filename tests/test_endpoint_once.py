"""An endpoint is parsed once, where it comes in (issue 29): scan_options turns the flag's,
the config's, the daemon's and a recording's URLs into doctor.endpoints.Endpoint values, and
discovery, the metrics scrape and the active probes use those values without parsing again."""

from __future__ import annotations

import pytest

import doctor.endpoints
from doctor.commands.setup import load_setup, scan_options
from doctor.endpoints import Endpoint
from doctor.model import ScanOptions
from doctor.seam.live import LiveHost
from probes.helpers import engine_discovery, engine_named
from probes.helpers.engine_discovery import discover_all

KEY = "sk-once-0123456789"


def test_scan_options_carry_parsed_endpoints(tmp_path):
    _, config = load_setup(None, ())
    options = scan_options(config, "quick", (), (f"http://:{KEY}@127.0.0.1:8000/metrics",))
    (endpoint,) = options.endpoints
    assert isinstance(endpoint, Endpoint)
    assert (endpoint.base_url, endpoint.key) == ("http://127.0.0.1:8000", KEY)
    assert KEY not in repr(options)  # the key travels, never shown


def test_discovery_uses_the_values_without_parsing_again(monkeypatch):
    options = ScanOptions(endpoints=(Endpoint("http", "127.0.0.1", 9, "", KEY),))

    def no_parse(text):
        raise AssertionError(f"parsed again: {text!r}")

    monkeypatch.setattr(doctor.endpoints, "parse", no_parse)
    monkeypatch.setattr(engine_named, "parse_endpoint", no_parse)
    monkeypatch.setattr(engine_discovery, "engine_processes", lambda host: ())
    monkeypatch.setattr(engine_discovery, "ask_engine", lambda host, e, headers, reached: e)
    host = LiveHost()
    host.new_scan()
    (engine,) = discover_all(host, options).engines
    assert engine.base_url == "http://127.0.0.1:9" and engine.source == "endpoint"
    assert engine_named.credentials(options) == {
        "http://127.0.0.1:9": {"Authorization": f"Bearer {KEY}"}}
    assert engine_named.named_bases(options) == frozenset({"http://127.0.0.1:9"})


@pytest.mark.parametrize("text", ["[127.0.0.1]:8000", "http://h:99999"])
def test_a_text_from_another_caller_is_parsed_by_discovery_and_its_error_kept(text):
    (found,) = engine_named.named(ScanOptions(endpoints=(text,)))
    assert isinstance(found, doctor.endpoints.EndpointError)
