"""One place builds a scan's options, for `scan`, `capture` and the daemon: the same flags
give the same probes and options, and the daemon reads an engine named with --endpoint."""

from __future__ import annotations

from doctor.endpoints import Endpoint

import http.server
import threading

import pytest

from doctor.commands.setup import load_daemon, load_setup, scan_options
from doctor.config import ConfigError
from doctor.model import Level
from tests import live_stack
from tests.conftest import REPO

PAGE = (REPO / "tests" / "engine_pages" / "vllm-v1-calm" / "metrics.1.txt").read_bytes()


def _config(tmp_path, text: str):
    path = tmp_path / "llm-doctor.toml"
    path.write_text(text)
    return str(path)



def _urls(options) -> tuple[str, ...]:
    """The named endpoints' base URLs: they travel parsed, as doctor.endpoints.Endpoint."""
    assert all(isinstance(e, Endpoint) for e in options.endpoints), options.endpoints
    return tuple(e.base_url for e in options.endpoints)

def test_the_daemon_and_a_scan_given_the_same_flags_have_the_same_options(tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    path = _config(tmp_path, "")
    flags = {"level": "quick", "model_dirs": (str(models),), "endpoints": ("http://127.0.0.1:8000",)}
    _, config = load_setup(path)
    # but for requests to engines: the daemon sends none unless [daemon] requests = true
    scanned = scan_options(config, "quick", (str(models),), ("http://127.0.0.1:8000",),
                           no_requests=True)
    daemon = load_daemon(path, (), flags).options
    assert daemon == scanned
    assert _urls(daemon) == ("http://127.0.0.1:8000",) and daemon.level == Level.QUICK


@pytest.mark.slow
def test_the_daemon_takes_its_table_then_scan_then_the_defaults(tmp_path):
    path = _config(tmp_path, '[scan]\nlevel = "quick"\nendpoints = ["http://127.0.0.1:7001"]\n')
    assert load_daemon(path, (), {}).options.level == Level.QUICK  # as a scan would
    assert _urls(load_daemon(path, (), {}).options) == ("http://127.0.0.1:7001",)
    path = _config(tmp_path, '[scan]\nlevel = "quick"\n[daemon]\nlevel = "full"\n'
                             'endpoints = ["http://127.0.0.1:7002"]\n')
    loaded = load_daemon(path, (), {})
    assert loaded.options.level == Level.FULL and _urls(loaded.options) == ("http://127.0.0.1:7002",)
    assert _urls(load_daemon(path, (), {"endpoints": ("http://[::1]:7003",)}).options) == \
        ("http://[::1]:7003",)  # the flag wins
    assert load_daemon(_config(tmp_path, ""), (), {}).options.level == Level.STANDARD


@pytest.mark.parametrize("text, words", [
    ('[daemon]\nendpoints = ["http://127.0.0.1:99999"]\n', "daemon.endpoints"),
    ('[scan]\nendpoints = ["http://[127.0.0.1]:8000"]\n', "scan.endpoints"),
    ('[daemon]\nendpoints = 5\n', "daemon.endpoints"),
])
def test_a_bad_endpoint_in_the_config_names_its_key(tmp_path, text, words):
    with pytest.raises(ConfigError, match=words):
        load_daemon(_config(tmp_path, text), (), {})


class _Engine(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # a vLLM engine's /metrics, nothing else
        body = PAGE if self.path == "/metrics" else b"{}"
        self.send_response(200 if self.path == "/metrics" else 404)
        self.send_header("Content-Type", "text/plain" if self.path == "/metrics" else "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.mark.slow
def test_the_daemon_exports_an_engine_named_with_endpoint(tmp_path):
    engine = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Engine)
    threading.Thread(target=engine.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{engine.server_address[1]}"
    proc, address = live_stack.daemon(tmp_path, "", "--level", "quick", "--interval", "1s",
                                      "--endpoint", url)
    try:
        page = live_stack.wait_for(
            "the engine on /metrics",
            lambda: (text := live_stack.get(f"http://{address}/metrics"))
            and f'endpoint="{url}"' in text and text, 60)
        assert "llm_doctor_engine_info{" in page
        assert 'kind="vllm"' in page
    finally:
        proc.stop()
        engine.shutdown()
