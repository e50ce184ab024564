"""A credential never leaves the origin it was given for: redirects are followed within the
origin only (doctor/seam/http.py).

Each test runs a real engine impostor on loopback that redirects, and a second real server
that records every connection and request it gets: nothing may connect there, whatever
the redirect status and wherever the Location points (another port, another host, another
scheme), for a Bearer key and for ``user:pw@`` Basic credentials.
"""

from __future__ import annotations

import base64

import pytest

from doctor.seam.host import HostReadError, Reason
from doctor.seam.live import LiveHost
from doctor.model import Level, ScanOptions
from probes.registry import PROBES
from doctor.scan import scan
from tests.builtin_rules import builtin_rules
from tests.hostile_http import RawServer, Request, response

KEY = "sk-redirect-test-4f9a0c1e77d2"
USER, PASSWORD = "admin", "pw-redirect-test-93be1d"
STATUSES = (301, 302, 303, 307, 308)
ELSEWHERE = ("other-port", "localhost", "127.0.0.2", "https-same-port", "https-other-port")


def _ok(request: Request) -> bytes:
    return response(200, b"recorded\n")


@pytest.fixture
def recorder():
    with RawServer(_ok) as server:
        yield server


@pytest.fixture
def recorder_2():
    with RawServer(_ok, host="127.0.0.2") as server:
        yield server


def _location(where: str, origin: RawServer, recorder: RawServer, recorder_2: RawServer) -> str:
    return {"other-port": f"http://127.0.0.1:{recorder.port}/x",
            "localhost": f"http://localhost:{recorder.port}/x",  # same address, other host name
            "127.0.0.2": f"http://127.0.0.2:{recorder_2.port}/x",
            "https-same-port": f"https://127.0.0.1:{origin.port}/x",
            "https-other-port": f"https://127.0.0.1:{recorder.port}/x"}[where]


def _redirector(status: int, where: str, recorder: RawServer, recorder_2: RawServer):
    box: dict[str, str] = {}

    def answer(request: Request) -> bytes:
        if request.path.startswith("/x"):  # the origin itself, asked over plain HTTP again
            return response(200, b"origin\n")
        return response(status, b"", f"Location: {box['location']}", reason="Moved")

    server = RawServer(answer)
    box["location"] = _location(where, server, recorder, recorder_2)
    return server


def _arrived(server: RawServer) -> list[str]:
    return [r.raw.decode("latin-1") for r in server.requests]


@pytest.mark.parametrize("where", ELSEWHERE)
@pytest.mark.parametrize("status", STATUSES)
@pytest.mark.parametrize("credential", ["bearer", "basic"])
def test_a_redirect_to_another_origin_is_not_followed(status, where, credential, recorder,
                                                      recorder_2):
    with _redirector(status, where, recorder, recorder_2) as origin:
        url, headers = f"{origin.origin}/metrics", {"Authorization": f"Bearer {KEY}"}
        if credential == "basic":
            url, headers = url.replace("http://", f"http://{USER}:{PASSWORD}@"), {}
        with pytest.raises(HostReadError) as err:
            LiveHost().http_get(url, timeout_s=3, headers=headers)
        assert err.value.reason == Reason.FAILED
        assert "redirected to another origin" in err.value.detail
        assert origin.requests and origin.requests[0].headers.get("authorization")
        first_origin_requests = len(origin.requests)
    basic = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    for server in (recorder, recorder_2):
        assert server.connections == 0, _arrived(server)
        for raw in _arrived(server):
            assert KEY not in raw and PASSWORD not in raw and basic not in raw
    if where == "https-same-port":  # the origin was not asked again over TLS or otherwise
        assert first_origin_requests == 1 and origin.connections == 1
    assert PASSWORD not in str(err.value) and KEY not in str(err.value)


@pytest.mark.parametrize("status", STATUSES)
def test_a_redirect_within_the_origin_is_followed_with_the_key(status):
    def answer(request: Request) -> bytes:
        if request.path == "/metrics":
            return response(status, b"", "Location: /metrics/", reason="Moved")
        return response(200, b"# a page\n", "Content-Type: text/plain")

    with RawServer(answer) as origin:
        got = LiveHost().http_get(f"{origin.origin}/metrics", timeout_s=3,
                                  headers={"Authorization": f"Bearer {KEY}"})
        assert (got.status, got.body) == (200, "# a page\n")
        assert got.url == f"{origin.origin}/metrics"  # the URL asked, as a recording keys it
        assert [r.path for r in origin.requests] == ["/metrics", "/metrics/"]
        assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in origin.requests)


def test_an_absolute_location_on_the_same_origin_is_followed():
    def answer(request: Request) -> bytes:
        if request.path == "/metrics":
            return response(302, b"", f"Location: http://127.0.0.1:{origin.port}/m2")
        return response(200, b"ok")

    origin = RawServer(answer)
    with origin:
        assert LiveHost().http_get(f"{origin.origin}/metrics", timeout_s=3).body == "ok"


def test_redirects_are_bounded_in_count():
    def answer(request: Request) -> bytes:
        hop = int(request.path.strip("/") or 0)
        return response(302, b"", f"Location: /{hop + 1}")

    with RawServer(answer) as origin:
        with pytest.raises(HostReadError, match="more than 5 redirects"):
            LiveHost().http_get(f"{origin.origin}/0", timeout_s=3)
        assert len(origin.requests) == 6


@pytest.mark.parametrize("location", ["ftp://127.0.0.1/x", "http://[::1/x", "http://127.0.0.1:99999/",
                                      "file:///etc/passwd", "http://:80/"])
def test_a_redirect_to_no_usable_url_is_a_named_failure(location):
    with RawServer(lambda r: response(302, b"", f"Location: {location}")) as origin:
        with pytest.raises(HostReadError, match="redirected to a URL that is not http"):
            LiveHost().http_get(f"{origin.origin}/metrics", timeout_s=3)


RULES = builtin_rules()
ENGINE_PROBES = tuple(p for p in PROBES if p.name.startswith("engine."))


@pytest.mark.parametrize("userinfo,secret", [(f":{KEY}", KEY), (f"{USER}:{PASSWORD}", PASSWORD)])
def test_a_scan_never_sends_the_endpoint_key_to_where_the_engine_redirects(
        monkeypatch, recorder, userinfo, secret):
    """The issue's example: /metrics answers 302 to another port; the key stays home."""
    monkeypatch.setattr("probes.helpers.engine_discovery.engine_processes", lambda host: ())
    location = f"http://127.0.0.1:{recorder.port}/x"
    with RawServer(lambda r: response(302, b"", f"Location: {location}")) as origin:
        options = ScanOptions(level=Level.QUICK,
                              endpoints=(f"http://{userinfo}@127.0.0.1:{origin.port}",))
        report = scan(LiveHost(), options, ENGINE_PROBES, RULES)
        assert any(r.headers.get("authorization") == f"Bearer {secret}" for r in origin.requests)
    assert recorder.connections == 0, _arrived(recorder)
    metrics = {p.name: p for p in report.probes}["engine.metrics"]
    assert metrics.status == "error" and "redirected to another origin" in metrics.reason
    assert f"http://127.0.0.1:{recorder.port}" in metrics.reason
