"""A raw HTTP server on loopback that answers with whatever bytes a test gives it.

``RawServer(answer)`` listens on 127.0.0.1 (or another loopback address) at an ephemeral
port. For each request it reads the head (at most 64 KiB, 2 s), records it as a
``Request`` (path, headers, the raw bytes) and calls ``answer(request)``, which returns
the bytes to send, or a list of (bytes, seconds to wait before sending them) for a drip
feed; the connection is then closed. It counts connections too, so a test can tell that
nothing connected at all (a TLS ClientHello is a connection without a request).

Every connection has its own thread and is bounded: 2 s to send the head, drips cut at
``max_drip_s``. For tests (tests/test_http_*.py) and the fuzz kind ``endpoint``
(tests/fuzz_endpoint.py).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

Drip = list[tuple[bytes, float]]


@dataclass
class Request:
    path: str
    headers: dict[str, str]  # names in lower case
    raw: bytes


@dataclass
class RawServer:
    answer: Callable[[Request], bytes | Drip]
    host: str = "127.0.0.1"
    max_drip_s: float = 20.0
    requests: list[Request] = field(default_factory=list)
    connections: int = 0
    port: int = 0

    def __post_init__(self) -> None:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((self.host, 0))
        self._sock.listen(64)
        self._sock.settimeout(0.05)
        self.port = self._sock.getsockname()[1]
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def origin(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self._sock.close()

    def __enter__(self) -> "RawServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except (socket.timeout, OSError):
                continue
            with self._lock:
                self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(2.0)
            raw = b""
            try:
                while b"\r\n\r\n" not in raw and len(raw) < 65536:
                    data = conn.recv(65536)
                    if not data:
                        break
                    raw += data
                request = _parse(raw)
                if request is None:
                    return
                # read a POST's body too: closing with it unread would reset the connection
                left = min(_length(request), 1 << 20) - len(raw.partition(b"\r\n\r\n")[2])
                while left > 0:
                    data = conn.recv(min(left, 65536))
                    if not data:
                        break
                    left -= len(data)
            except OSError:
                return
            with self._lock:
                self.requests.append(request)
            try:
                answer = self.answer(request)
                parts = [(answer, 0.0)] if isinstance(answer, bytes) else answer
                started = time.monotonic()
                for data, wait in parts:
                    if self._stop.wait(wait) or time.monotonic() - started > self.max_drip_s:
                        return
                    conn.sendall(data)
                conn.shutdown(socket.SHUT_WR)
            except OSError:  # the client gave up first: what a bounded client does
                return


def _parse(raw: bytes) -> Request | None:
    head = raw.split(b"\r\n\r\n", 1)[0].decode("latin-1")
    lines = head.split("\r\n")
    fields = lines[0].split(" ")
    if len(fields) < 2:
        return None
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Request(fields[1], headers, raw)


def _length(request: Request) -> int:
    value = request.headers.get("content-length", "0")
    return int(value) if value.isdigit() and len(value) < 10 else 0


def response(status: int = 200, body: bytes = b"", *headers: str,
             reason: str = "OK") -> bytes:
    """A well-formed HTTP/1.1 answer with a Content-Length."""
    head = [f"HTTP/1.1 {status} {reason}", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
