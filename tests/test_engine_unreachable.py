"""A dead engine is never OK (issue 14 §1): refused, hung, 5xx and non-engine endpoints,
named or discovered, each give the critical engine-unreachable finding and exit code 2.

Every endpoint is real and on loopback: a port nothing listens on, the standard library's
``http.server`` serving a directory, a server answering 500/503, a socket that accepts and
never answers, the real llama-server stopped with SIGSTOP, and engine processes found in
the process table (a program named llama-server) whose port refuses or hangs. Each scan is
``python -m doctor.commands.cli scan --level quick --format json`` in a subprocess.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

import pytest

from tests import llama_server
from tests.conftest import REPO

SCAN_TIMEOUT_S = 90  # a quick scan takes 1-8 s here; a hung endpoint adds its one 3 s bound


def _scan(*args: str) -> tuple[int, dict]:
    result = subprocess.run([sys.executable, "-m", "doctor.commands.cli", "scan", "--level",
                             "quick", "--format", "json", "--no-progress", *args],
                            capture_output=True, text=True, timeout=SCAN_TIMEOUT_S, cwd=REPO)
    assert result.stdout, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, json.loads(result.stdout)


def _unreachable(report: dict, endpoint: str) -> dict:
    found = [f for f in report["findings"]
             if f["rule"] == "engine-unreachable" and f["key"] == endpoint]
    assert len(found) == 1, [f["title"] for f in report["findings"]]
    finding = found[0]
    assert finding["severity"] == "critical" and finding["cause"] == "engine-unreachable"
    assert endpoint in finding["title"]
    assert report["findings"][0]["rule"] == "engine-unreachable"  # the first thing shown
    return finding


def _free_port() -> int:
    """A loopback port that was just bound and closed: nothing listens on it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _serving(handler: type[http.server.BaseHTTPRequestHandler]):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@contextlib.contextmanager
def _silent_listener():
    """A socket that listens and never accepts: the kernel completes each connection,
    and no answer ever comes (as from a stopped engine)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield s


@pytest.mark.slow
def test_a_refused_endpoint_is_critical_and_exits_2():
    port = _free_port()
    rc, report = _scan("--endpoint", f"127.0.0.1:{port}")
    finding = _unreachable(report, f"http://127.0.0.1:{port}")
    assert rc == 2
    assert finding["evidence"]["answer"] == "connection refused"
    assert finding["evidence"]["tried"] == "/metrics: connection refused"


@pytest.mark.slow
def test_a_plain_http_server_is_no_engine(tmp_path, monkeypatch):
    (tmp_path / "index-me.txt").write_text("a plain directory listing\n")

    class Listing(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(tmp_path), **kwargs)

        def log_message(self, *args):
            pass

    with _serving(Listing) as url:
        rc, report = _scan("--endpoint", url)
    finding = _unreachable(report, url)
    assert rc == 2
    evidence = finding["evidence"]
    assert evidence["outcome"] == "not-engine"
    assert "as no serving engine" in finding["title"]
    assert "/metrics: HTTP 404" in evidence["tried"] and "/v1/models: HTTP 404" in evidence["tried"]


def _answering(status: int, message: str) -> type[http.server.BaseHTTPRequestHandler]:
    class Failing(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"error": {"code": status, "message": message,
                                         "type": "unavailable_error"}}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    return Failing


@pytest.mark.slow
def test_an_endpoint_answering_503_loading_model_is_starting_not_down():
    """Issue 28 §6: llama.cpp's 503 "Loading model" is a load in progress: engine-loading
    (info, no restart advised), never the critical engine-unreachable."""
    with _serving(_answering(503, "Loading model")) as url:
        rc, report = _scan("--endpoint", url)
    rules = {f["rule"] for f in report["findings"] if f["key"] == url}
    assert "engine-unreachable" not in rules and "engine-loading" in rules
    finding = next(f for f in report["findings"] if f["rule"] == "engine-loading")
    assert finding["severity"] == "info" and "then restart" not in finding["remediation"]
    assert finding["evidence"]["outcome"] == "loading"
    assert "Do not restart" in finding["remediation"]
    assert rc < 2


@pytest.mark.slow
@pytest.mark.parametrize("status", [500, 503])
def test_an_endpoint_answering_5xx_is_critical_with_its_message(status):
    class Failing(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"error": {"code": status, "message": "Internal failure",
                                         "type": "server_error"}}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    with _serving(Failing) as url:
        rc, report = _scan("--endpoint", url)
    finding = _unreachable(report, url)
    assert rc == 2
    assert finding["evidence"]["answer"] == f"HTTP {status} (Internal failure)"
    assert f"HTTP {status} (Internal failure)" in finding["title"]


def _connections_made(listener: socket.socket) -> int:
    """The connections the kernel completed on the silent ``listener`` (each waits in its
    backlog, unanswered, until accepted here)."""
    listener.setblocking(False)
    made = 0
    while True:
        try:
            conn, _ = listener.accept()
        except BlockingIOError:
            return made
        conn.close()
        made += 1


@pytest.mark.slow
def test_a_socket_that_accepts_and_never_answers_costs_one_timeout():
    with _silent_listener() as listener:
        port = listener.getsockname()[1]
        rc, report = _scan("--endpoint", f"http://127.0.0.1:{port}")
        made = _connections_made(listener)
    finding = _unreachable(report, f"http://127.0.0.1:{port}")
    assert rc == 2
    assert finding["evidence"]["outcome"] == "timeout"
    assert "timed out after 3 s" in finding["title"]
    probes = {p["name"]: p for p in report["probes"]}
    # one 3 s bound, at discovery: load and exposure ask it nothing more (they waited 10 s
    # and 5 s on it before), and metrics takes discovery's read. Counted in connections,
    # not in seconds: how long a scan takes is the machine's.
    assert made == 1, made
    for name in ("engine.load", "engine.exposure"):
        assert probes[name]["status"] == "skipped" or f"127.0.0.1:{port}" not in json.dumps(
            probes[name]["data"]), (name, probes[name])


@pytest.mark.slow
def test_a_healthy_engine_gives_no_finding():
    body = (b"# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 0\n"
            b"# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 0\n")

    class Engine(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            ok = self.path == "/metrics"
            self.send_response(200 if ok else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body) if ok else 0))
            self.end_headers()
            if ok:
                self.wfile.write(body)

        def log_message(self, *args):
            pass

    with _serving(Engine) as url:
        _, report = _scan("--endpoint", url)
    assert not [f for f in report["findings"]
                if f["rule"] == "engine-unreachable" and f["key"] == url], report["findings"]


def _named_llama_server(tmp_path: Path, code: str, port: int) -> subprocess.Popen:
    """A process the process table shows as ``llama-server --port PORT`` (a Python
    interpreter run through a link of that name), running ``code``."""
    link = tmp_path / "llama-server"
    link.symlink_to(os.path.realpath(sys.executable))
    return subprocess.Popen([str(link), "-c", code, "--port", str(port)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def _wait_listening(port: int, deadline_s: float = 20) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return
        time.sleep(0.1)
    raise AssertionError(f"nothing listens on {port} after {deadline_s} s")


def _stop(process: subprocess.Popen) -> None:
    process.kill()
    process.wait(10)


@pytest.mark.slow
def test_a_discovered_engine_whose_port_refuses_is_critical(tmp_path):
    port = _free_port()
    process = _named_llama_server(tmp_path, "import time; time.sleep(120)", port)
    try:
        time.sleep(0.3)  # its command line is in /proc once exec'd
        rc, report = _scan()
    finally:
        _stop(process)
    finding = _unreachable(report, f"http://127.0.0.1:{port}")
    assert rc == 2
    evidence = finding["evidence"]
    assert evidence["answer"] == "connection refused" and evidence["found_by"] == "flagged"
    assert f"pid {process.pid}" in evidence["engine"] and "llama.cpp" in finding["title"]


@pytest.mark.slow
def test_a_discovered_engine_that_listens_and_never_answers_is_critical(tmp_path):
    port = _free_port()
    code = ("import socket, time; s = socket.socket(); "
            "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
            f"s.bind(('127.0.0.1', {port})); s.listen(16); time.sleep(120)")
    process = _named_llama_server(tmp_path, code, port)
    try:
        _wait_listening(port)
        rc, report = _scan()
    finally:
        _stop(process)
    finding = _unreachable(report, f"http://127.0.0.1:{port}")
    assert rc == 2
    evidence = finding["evidence"]
    assert evidence["outcome"] == "timeout" and evidence["found_by"] == "listening"
    assert "timed out after 3 s" in finding["title"] and f"pid {process.pid}" in finding["title"]


@pytest.mark.live
def test_the_real_llama_server_stopped_with_sigstop(tmp_path):
    server = llama_server.start(tmp_path)  # skips when the binary or the model is absent
    try:
        os.kill(server.pid, signal.SIGSTOP)
        try:
            rc, named = _scan("--endpoint", server.base_url)
            rc_found, found = _scan()
        finally:
            os.kill(server.pid, signal.SIGCONT)
    finally:
        llama_server.stop(server)
    for code, report in ((rc, named), (rc_found, found)):
        finding = _unreachable(report, server.base_url)
        assert code == 2
        assert "timed out" in finding["title"] and server.base_url in finding["title"]
        assert finding["evidence"]["tried"].startswith("/metrics: timed out after 3 s")
    assert f"pid {server.pid}" in _unreachable(found, server.base_url)["title"]
    for report in (named, found):  # and no probe after discovery waits on it again
        slots = next(p for p in report["probes"] if p["name"] == "engine.slots")
        (engine,) = [e for e in slots["data"]["engines"] if e["base_url"] == server.base_url]
        assert engine["error"].startswith(f"{server.base_url}: not asked, engine.discovery got no answer"), engine


@pytest.mark.slow
def test_a_recorded_hung_endpoint_replays_as_the_same_finding(tmp_path):
    with _silent_listener() as listener:
        port = listener.getsockname()[1]
        recorded = subprocess.run([sys.executable, "-m", "doctor.commands.cli", "capture",
                                   str(tmp_path / "host"), "--level", "quick", "--endpoint",
                                   f"http://127.0.0.1:{port}", "--no-progress"],
                                  capture_output=True, text=True, timeout=SCAN_TIMEOUT_S, cwd=REPO)
    assert "Traceback" not in recorded.stderr, recorded.stderr
    # a recording keeps the pages read, not the flags: the replay names the endpoint again
    rc, report = _scan("--replay", str(tmp_path / "host"), "--endpoint", f"127.0.0.1:{port}")
    finding = _unreachable(report, f"http://127.0.0.1:{port}")
    assert rc == 2
    assert "timed out after 3 s" in finding["title"]


@pytest.mark.slow
def test_a_capture_keeps_its_endpoints_without_the_key_and_the_replay_uses_them(tmp_path):
    port = _free_port()
    key = "sk-planted-7c1d"
    recorded = subprocess.run([sys.executable, "-m", "doctor.commands.cli", "capture",
                               str(tmp_path / "host"), "--level", "quick", "--endpoint",
                               f"http://:{key}@127.0.0.1:{port}", "--no-progress"],
                              capture_output=True, text=True, timeout=SCAN_TIMEOUT_S, cwd=REPO)
    assert "Traceback" not in recorded.stderr, recorded.stderr
    manifest = tomllib.loads((tmp_path / "host" / "host.toml").read_text())
    assert manifest["host"]["endpoints"] == [f"http://127.0.0.1:{port}"]
    assert not any(key in p.read_text(errors="replace")
                   for p in (tmp_path / "host").rglob("*") if p.is_file())
    rc, report = _scan("--replay", str(tmp_path / "host"))  # no --endpoint: the capture's
    assert rc == 2
    assert "refused" in _unreachable(report, f"http://127.0.0.1:{port}")["title"]


@pytest.mark.slow
def test_a_recorded_host_with_a_broken_endpoint_is_a_named_error(tmp_path):
    recorded = subprocess.run([sys.executable, "-m", "doctor.commands.cli", "capture",
                               str(tmp_path / "host"), "--level", "quick", "--no-progress"],
                              capture_output=True, text=True, timeout=SCAN_TIMEOUT_S, cwd=REPO)
    assert "Traceback" not in recorded.stderr, recorded.stderr
    manifest = tmp_path / "host" / "host.toml"
    text = manifest.read_text()
    assert "endpoints = []" in text
    manifest.write_text(text.replace("endpoints = []", 'endpoints = ["ftp://[::1"]', 1))
    result = subprocess.run([sys.executable, "-m", "doctor.commands.cli", "scan", "--replay",
                             str(tmp_path / "host"), "--no-progress"],
                            capture_output=True, text=True, timeout=SCAN_TIMEOUT_S, cwd=REPO)
    assert result.returncode == 3, result.stderr
    assert "Traceback" not in result.stderr
    assert "[host] endpoints" in result.stderr and "host.toml" in result.stderr
