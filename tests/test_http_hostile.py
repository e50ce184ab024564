"""Every way an HTTP exchange can go wrong is a named read failure of that URL (doctor/seam/http.py).

A real server on loopback sends each hostile answer byte for byte: a status line that is
not HTTP, ``HTTP/2``, more than 100 headers, a 1 MB header line, a lying Content-Length,
broken chunking, a drip feed. ``http.client``'s own exceptions (BadStatusLine, LineTooLong,
IncompleteRead, RemoteDisconnected...) escaped before, and every engine probe reported an
internal error.
"""

from __future__ import annotations

import time

import pytest

from doctor.seam.host import HostReadError, Reason
from doctor.seam.live import LiveHost
from doctor.model import Level, ScanOptions
from probes.registry import PROBES
from doctor.scan import scan
from tests.builtin_rules import builtin_rules
from tests.hostile_http import RawServer, Request, response

OK = b"HTTP/1.1 200 OK\r\n"
HOSTILE = {
    # name: (what the server sends, what the failure says)
    "not-http": (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", "status line is not HTTP: 'SSH-2.0-OpenSSH_9.6'"),
    "http2": (b"HTTP/2 200\r\ncontent-length: 2\r\n\r\nok", "answered in 'HTTP/2', not HTTP/1.x"),
    "http2-preface": (b"\x00\x00\x12\x04\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\x64",
                      "status line is not HTTP"),
    "status-1000": (b"HTTP/1.1 1000 Huge\r\n\r\n", "status line is not HTTP"),
    "no-status": (b"HTTP/1.1\r\n\r\n", "status line is not HTTP"),
    "101-headers": (OK + b"".join(b"X-%d: y\r\n" % i for i in range(101)) + b"\r\n",
                    "more than 100 headers"),
    "1mb-header": (OK + b"X-Big: " + b"a" * (1 << 20) + b"\r\n\r\n",
                   "a line longer than 65536 bytes (header line)"),
    "1mb-status": (b"HTTP/1.1 200 " + b"O" * (1 << 20) + b"\r\n\r\n",
                   "a line longer than 65536 bytes (status line)"),
    "lying-length": (OK + b"Content-Length: 100\r\n\r\nonly 14 bytes.",
                     "body shorter than its Content-Length: 14 bytes read, 86 more promised"),
    "bad-chunk": (OK + b"Transfer-Encoding: chunked\r\n\r\nzz\r\nok\r\n0\r\n\r\n",
                  "chunked encoding broken"),
    "cut-chunk": (OK + b"Transfer-Encoding: chunked\r\n\r\n10\r\nshort",
                  "chunked encoding broken"),
    "long-chunk-line": (OK + b"Transfer-Encoding: chunked\r\n\r\n" + b"1" * 70000 + b"\r\n",
                        "a line longer than 65536 bytes (chunk size)"),
    "silence-then-close": (b"", "closed the connection without answering"),
    "too-big": (OK + b"Content-Length: 5000000\r\n\r\n" + b"x" * 1000, "body larger than 1000 bytes"),
}


@pytest.fixture(scope="module")
def hostile():
    def answer(request: Request) -> bytes:
        return HOSTILE[request.path.strip("/")][0]

    with RawServer(answer) as server:
        yield server


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_answer_is_a_named_failure_of_the_url(hostile, name):
    url = f"{hostile.origin}/{name}"
    with pytest.raises(HostReadError) as err:
        LiveHost().http_get(url, timeout_s=3, max_bytes=1000)
    assert err.value.reason == Reason.FAILED
    assert err.value.path == url
    assert HOSTILE[name][1] in err.value.detail


def test_a_close_delimited_body_and_odd_header_bytes_are_read():
    body = b"vllm:num_requests_running 1\n"
    answers = {"/close": OK + b"Content-Type: text/plain\r\nX-Odd: \xe9\xff\r\n\r\n" + body,
               "/bad-length": OK + b"Content-Length: abc\r\n\r\n" + body}
    with RawServer(lambda r: answers[r.path]) as server:
        for path in answers:
            got = LiveHost().http_get(f"{server.origin}{path}", timeout_s=3)
            assert (got.status, got.body) == (200, body.decode())


def test_a_status_nobody_uses_is_an_answer_not_a_failure():
    with RawServer(lambda r: response(599, b"odd", reason="Whatever")) as server:
        assert LiveHost().http_get(f"{server.origin}/x", timeout_s=3).status == 599


@pytest.mark.slow
@pytest.mark.parametrize("what", ["status line", "headers", "body", "100-continue"])
def test_a_drip_feed_is_cut_at_the_deadline_wherever_it_drips(what):
    """One byte every 0.2 s never trips a per-read timeout; the whole exchange has one."""
    head = OK + b"Content-Length: 1000\r\n\r\n"
    if what == "status line":
        drip = [(bytes([b]), 0.2) for b in head]
    elif what == "headers":
        drip = [(OK, 0)] + [(b"X-Drip: 1\r\n"[i:i + 1], 0.2) for i in range(11)] * 8
    elif what == "body":
        drip = [(head, 0)] + [(b"x", 0.2)] * 1000
    else:  # an endless run of interim answers, each arriving in time
        drip = [(b"HTTP/1.1 100 Continue\r\n\r\n", 0.1)] * 1000
    with RawServer(lambda r: drip) as server:
        started = time.monotonic()
        with pytest.raises(HostReadError) as err:
            LiveHost().http_get(f"{server.origin}/drip", timeout_s=1.0)
        took = time.monotonic() - started
    assert err.value.reason == Reason.TIMEOUT
    # cut by the exchange's one deadline, while the server still dripped: a per-read timeout
    # would have read to the drip's end (each byte comes in time)
    dripped_s = min(sum(delay for _, delay in drip), RawServer.max_drip_s)
    assert took < dripped_s, f"{took:.2f} s: read to the drip's end ({dripped_s:.1f} s)"


@pytest.mark.slow
def test_tls_spoken_to_a_plain_server_is_a_named_tls_failure():
    with RawServer(lambda r: response(200, b"plain")) as server:
        with pytest.raises(HostReadError) as err:
            LiveHost().http_get(f"https://127.0.0.1:{server.port}/metrics", timeout_s=1)
    assert err.value.reason in (Reason.FAILED, Reason.TIMEOUT)
    assert err.value.path == f"https://127.0.0.1:{server.port}/metrics"


@pytest.mark.parametrize("url,says", [
    ("http://127.0.0.1:99999/metrics", "Port out of range"),
    ("http://127.0.0.1:80x/metrics", "Port could not be cast"),
    ("http://[::1/metrics", "Invalid IPv6 URL"),
    ("http://127.0.0.1:8000/me trics\r\nX: y", "the URL holds ' '"),
    ("http://h\u00e9llo.invalid:8000/", "non-ASCII"),
    ("gopher://127.0.0.1/", "not an http(s) URL"),
])
def test_a_url_that_cannot_be_asked_is_a_named_failure(url, says):
    with pytest.raises(HostReadError) as err:
        LiveHost().http_get(url, timeout_s=1)
    assert err.value.reason == Reason.FAILED and says in err.value.detail


RULES = builtin_rules()
ENGINE_PROBES = tuple(p for p in PROBES if p.name.startswith("engine."))


@pytest.mark.parametrize("name", ["not-http", "http2", "101-headers", "1mb-header", "lying-length",
                                  "bad-chunk"])
def test_a_scan_of_a_hostile_endpoint_names_it_and_no_probe_fails_inside(monkeypatch, name):
    monkeypatch.setattr("probes.helpers.engine_discovery.engine_processes", lambda host: ())
    with RawServer(lambda r: HOSTILE[name][0]) as server:
        options = ScanOptions(level=Level.QUICK, endpoints=(server.origin,))
        report = scan(LiveHost(), options, ENGINE_PROBES, RULES)
    for probe in report.probes:
        assert "internal error" not in (probe.reason or ""), (probe.name, probe.reason)
    metrics = {p.name: p for p in report.probes}["engine.metrics"]
    assert metrics.status == "error"
    assert f"{server.origin}/metrics" in metrics.reason and HOSTILE[name][1] in metrics.reason


ECHO_KEY = "sk-echo-test-0d15ea5e0d15"


def _echo(request: Request) -> bytes:
    """An engine that quotes the Authorization header it got, everywhere it can."""
    got = request.headers.get("authorization", "")
    if request.path == "/status-line":
        return f"HTTP/1.1 2x0 {got}\r\n\r\n".encode()
    if request.path == "/redirect":
        return response(302, b"", f"Location: http://{got.split()[-1]}.invalid/")
    return response(401, f'{{"error": "bad key {got}", "upper": "{got.upper()}"}}'.encode(),
                    f"Content-Type: text/{got.split()[-1]}")


@pytest.mark.parametrize("path", ["/page", "/status-line", "/redirect"])
def test_an_answer_that_echoes_the_key_comes_back_without_it(path):
    with RawServer(_echo) as server:
        for url, headers, secret in [
                (f"{server.origin}{path}", {"Authorization": f"Bearer {ECHO_KEY}"}, ECHO_KEY),
                (f"http://admin:{ECHO_KEY}@127.0.0.1:{server.port}{path}", {}, ECHO_KEY)]:
            try:
                got = LiveHost().http_get(url, timeout_s=3, headers=headers)
                shown = f"{got.body} {got.content_type}"
            except HostReadError as exc:
                shown = str(exc)
            assert secret.lower() not in shown.lower(), shown
            assert "***" in shown or path == "/redirect"


def test_a_stream_that_echoes_the_key_is_measured_without_it():
    from doctor.workload.loadgen import RequestTarget, Workload, run_requests

    def answer(request: Request) -> bytes:
        got = request.headers.get("authorization", "")
        body = (f'data: {{"choices": [{{"text": "you sent {got}"}}]}}\n\n'
                f'data: {{"error": "{got}"}}\n\n').encode()
        return response(200, body, "Content-Type: text/event-stream")

    with RawServer(answer) as server:
        (result,) = run_requests(RequestTarget(server.origin, api_key=ECHO_KEY),
                                 Workload(16, 4, timeout_s=5), 1, 1, 10)
    assert result.text == "you sent Bearer ***" and ECHO_KEY not in (result.error or "")
