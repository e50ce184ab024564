"""An Ollama impostor for the slots tests: a real process whose command line reads
``.../ollama serve`` (a link named ``ollama`` to the Python interpreter, this file copied
as ``serve``), started with ``OLLAMA_NUM_PARALLEL`` in its environment, answering Ollama's
pages from what a real Ollama 0.12 served (tests/engine_pages/ollama/):

* ``GET /api/ps``: api_ps.json (one model loaded, context_length 4096);
* ``GET /api/version``: {"version": "0.12.6"};
* ``POST /api/generate``: held open, as a request waiting for a slot is (at most HOLD_S);
* anything else: 404, as Ollama answers ``/metrics``.

It prints the port it listens on (127.0.0.1, ephemeral) as its first line. Run by
tests/test_engine_slots_ollama.py; standard library only.
"""

from __future__ import annotations

import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PAGES = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent / "ollama"
HOLD_S = 60.0


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
        if self.path == "/api/ps":
            self._send(200, (PAGES / "api_ps.json").read_text())
        elif self.path == "/api/version":
            self._send(200, json.dumps({"version": "0.12.6"}))
        else:
            self._send(404, "404 page not found")

    def do_POST(self) -> None:  # noqa: N802
        time.sleep(HOLD_S)
        self._send(503, json.dumps({"error": "server busy, please try again"}))


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
