"""An Ollama impostor for the Ollama tests (started by tests/ollama_process.py): a real
process whose command line reads ``.../ollama serve PAGES`` (a link named ``ollama`` to the
Python interpreter, this file copied as ``serve``; copied as ``runner`` it stands for an
``ollama runner`` child), answering Ollama's pages from a folder of them, shaped as Ollama's
API docs and a real 0.12 server give them (tests/engine_pages/ollama/api_ps.json):

* ``GET /api/ps``: the n-th request gets ``api_ps.<n>.json`` (the last one there is keeps
  answering), else ``api_ps.json``: the models loaded as they change between two reads;
* ``GET /api/tags``, ``GET /api/version``: ``api_tags.json``, ``api_version.json``;
* ``POST /api/generate``: held open, as a request waiting for a slot is (at most HOLD_S),
  then 503 as a busy Ollama answers;
* anything else: 404, as Ollama answers ``/metrics``.

An ``expires_at`` of ``"now+N"`` is written as the time N seconds after the request (a
request just refreshed it), ``"start+N"`` as N seconds after the impostor started (no
request since). It prints the port it listens on (127.0.0.1, ephemeral) as its first line.
Standard library only.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PAGES = Path(sys.argv[1])
STARTED = datetime.now(timezone.utc)
SEEN = {"ps": 0}
LOCK = threading.Lock()
STAMP = re.compile(r'"(now|start)\+([0-9]+)"')
HOLD_S = 60.0


def _stamped(body: str) -> str:
    def one(match: re.Match) -> str:
        base = datetime.now(timezone.utc) if match.group(1) == "now" else STARTED
        return json.dumps((base + timedelta(seconds=int(match.group(2)))).isoformat())
    return STAMP.sub(one, body)


def _ps_page() -> Path:
    with LOCK:
        SEEN["ps"] += 1
        n = SEEN["ps"]
    numbered = sorted(PAGES.glob("api_ps.*.json"), key=lambda p: int(p.name.split(".")[1]))
    if not numbered:
        return PAGES / "api_ps.json"
    return next((p for p in numbered if p.name == f"api_ps.{n}.json"), numbered[-1])


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:  # quiet
        pass

    def _send(self, status: int, body: str) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        page = {"/api/ps": None, "/api/tags": "api_tags.json",
                "/api/version": "api_version.json"}
        if self.path not in page:
            self._send(404, "404 page not found")
            return
        path = _ps_page() if self.path == "/api/ps" else PAGES / str(page[self.path])
        if not path.is_file():
            self._send(404, "404 page not found")
            return
        self._send(200, _stamped(path.read_text()))

    def do_POST(self) -> None:  # noqa: N802
        if self.path != "/api/generate":
            self._send(404, "404 page not found")
            return
        time.sleep(HOLD_S)
        self._send(503, json.dumps({"error": "server busy, please try again"}))


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True  # a held generate request never keeps it from stopping
    print(server.server_address[1], flush=True)
    timer = threading.Timer(120.0, server.shutdown)  # bounded: a test that forgets it
    timer.daemon = True
    timer.start()
    server.serve_forever()


if __name__ == "__main__":
    main()
