"""An alert is POSTed to the URL configured and nowhere else: a redirect is an error."""

from __future__ import annotations

import http.server
import threading
import urllib.error

import pytest

from doctor.daemon.sinks import post_json


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: list[tuple[str, str, bytes]] = []
    redirect_to = ""

    def _answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).seen.append((self.command, self.path, body))
        if self.redirect_to:
            self.send_response(int(self.path.strip("/") or 302))
            self.send_header("Location", self.redirect_to)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


def _serve(handler: type) -> http.server.ThreadingHTTPServer:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_an_alert_does_not_follow_a_redirect(code):
    other = type("Other", (_Recorder,), {"seen": [], "redirect_to": ""})
    first = type("First", (_Recorder,), {"seen": [], "redirect_to": ""})
    target, hop = _serve(other), _serve(first)
    try:
        first.redirect_to = f"http://127.0.0.1:{target.server_address[1]}/stolen"
        with pytest.raises(urllib.error.HTTPError, match="redirected to http://127.0.0.1"):
            post_json(f"http://127.0.0.1:{hop.server_address[1]}/{code}", [{"labels": {"a": "b"}}])
        assert [c for c, _, _ in first.seen] == ["POST"]
        assert other.seen == []  # the alert went nowhere else
    finally:
        target.shutdown()
        hop.shutdown()
