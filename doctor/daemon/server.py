"""Serves /metrics: one thread multiplexes every connection, two worker threads answer.

prometheus-client's server (``ThreadingWSGIServer``) starts a thread per connection and never
times one out: about 110 idle connections under a 2 GB address-space limit left the daemon
unable to start threads, so its scrapes and its probes failed until they closed (issue 12).
Here one thread accepts, reads and writes every connection without blocking (``selectors``),
and hands a request whose line and headers are complete to a pool of ``workers`` threads
that run the WSGI app (prometheus-client's, behind basic auth) and give back the bytes to
send. A connection costs a file descriptor and a buffer, never a thread: the daemon's
threads are the same whatever its clients do, and its probes always have theirs.

What a client gets (``Limits``; each is tested in tests/test_daemon_server_hostile.py):

- at most ``max_connections`` open; a new one beyond closes the one idle the longest (one
  whose answer is being made is never cut), so idle and slow clients never starve a scrape;
  503 when every connection is busy;
- the request line and headers within ``header_s`` of the connection (a TLS handshake
  included) or of a request's first byte (slowloris), in at most ``request_bytes`` and
  ``headers`` lines: 408, 431 or 400 and closed otherwise;
- a kept-alive connection closed after ``idle_s`` without a request;
- a response the client does not take within ``write_s`` dropped with its connection;
- no request bodies (413), HTTP/1.0 and 1.1 only (505), /metrics and / only (404);
- an exception in a handler: 500, no traceback on the wire, one line in the log.

What is answered (routes, basic auth, TLS) is doctor/daemon/metrics_app.py's. Manual
equivalent: ``curl -v http://127.0.0.1:9411/metrics``; ``ss -tnp 'sport = :9411'`` lists the
connections the daemon holds.
"""

from __future__ import annotations

import errno
import ipaddress
import itertools
import logging
import queue
import re
import selectors
import socket
import ssl
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from prometheus_client import CollectorRegistry

from doctor.config import ConfigError
from doctor.daemon.http_request import BadRequest, Request, parse_request, response
from doctor.daemon.metrics_app import metrics_app, tls_context
from doctor.daemon.settings import Settings
from doctor.i18n import t

log = logging.getLogger("llm-doctor.seam.http")


@dataclass(frozen=True, slots=True)
class Limits:
    max_connections: int = 128  # a Prometheus pair and a few people need under ten
    header_s: float = 5.0  # a request's line and headers arrive in one packet
    idle_s: float = 60.0  # longer than the usual scrape interval: a scraper's connection stays
    write_s: float = 10.0
    request_bytes: int = 16 << 10
    headers: int = 100  # as http.client
    workers: int = 2  # rendering holds the GIL: more threads would not answer faster
    backlog: int = 128


_HANDSHAKE, _READ, _BUSY, _WRITE = "handshake", "read", "busy", "write"
_HEAD_END = re.compile(rb"\r?\n\r?\n")
_BUSY_REPLY = response("503 Service Unavailable", [("Content-Type", "text/plain")],
                       b"too many connections; try again\n", keep_alive=False)
_TIMEOUT_REPLY = response("408 Request Timeout", [("Content-Type", "text/plain")],
                          b"the request's headers did not arrive in time\n", keep_alive=False)


class _Conn:
    """One client connection, owned by the loop thread (a worker sees only its request)."""

    __slots__ = ("sock", "peer", "state", "buf", "scanned", "out", "sent", "deadline", "since",
                 "serial", "idle", "keep_alive", "eof", "head")
    _serials = itertools.count()

    def __init__(self, sock: socket.socket, peer: str, state: str, now: float, limits: Limits):
        self.sock, self.peer, self.state = sock, peer, state
        self.serial = next(self._serials)  # accepted in one loop turn, they share ``now``
        self.buf = bytearray()
        self.scanned = 0  # bytes of buf already searched for the end of the headers
        self.out = b""
        self.sent = 0
        self.deadline = now + limits.header_s
        self.since = now  # when it last became idle: the longest idle goes first
        self.idle = False  # kept alive after a response, no byte of the next request yet
        self.keep_alive = False
        self.eof = False
        self.head = ""  # "GET /metrics", for the log


class MetricsServer:
    """The loop (``serve_forever`` on its own thread) and the worker pool."""

    def __init__(self, listener: socket.socket, app: Callable, tls: ssl.SSLContext | None,
                 limits: Limits) -> None:
        self.socket, self.app, self.tls, self.limits = listener, app, tls, limits
        self.server_address = listener.getsockname()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        for s in (listener, self._wake_r, self._wake_w):
            s.setblocking(False)
        self._selector.register(listener, selectors.EVENT_READ)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._conns: set[_Conn] = set()
        self._jobs: queue.SimpleQueue[tuple[_Conn, Request] | None] = queue.SimpleQueue()
        self._done: deque[_Conn] = deque()
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._accept_paused_until = 0.0
        self._warned: dict[str, float] = {}
        self._workers = [threading.Thread(target=self._work, name=f"metrics worker {i}",
                                          daemon=True) for i in range(limits.workers)]
        for worker in self._workers:  # started now: a later failure to start one cannot happen
            worker.start()

    # the loop ------------------------------------------------------------------------------
    def serve_forever(self) -> None:
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                timeout = self._expire(now)
                for key, _ in self._selector.select(timeout):
                    now = time.monotonic()
                    try:
                        if key.fileobj is self.socket:
                            self._accept(now)
                        elif key.fileobj is self._wake_r:
                            self._drain_wake(now)
                        else:
                            self._step(key.data, now)
                    # The loop's isolation boundary: a bug met by one connection closes that
                    # connection (one log line), never the loop every scrape needs.
                    except Exception as exc:  # noqa: BLE001
                        log.error("%s", t("the metrics server dropped a connection: {error}",
                                            error=_one_line(exc)))
                        if isinstance(key.data, _Conn):
                            self._close(key.data)
        finally:
            for conn in list(self._conns):
                self._close(conn)
            self._stopped.set()

    def shutdown(self) -> None:
        """Stop the loop and wait (at most 5 s) until it has closed every connection."""
        self._stop.set()
        self._wake()
        self._stopped.wait(5)

    def server_close(self) -> None:
        for _ in self._workers:
            self._jobs.put(None)
        for s in (self.socket, self._wake_r, self._wake_w):
            s.close()
        self._selector.close()

    def connections(self) -> int:
        return len(self._conns)

    def _expire(self, now: float) -> float:
        """Close what overran its deadline; the seconds until the next one (at most 1)."""
        if self._accept_paused_until and now >= self._accept_paused_until:
            self._accept_paused_until = 0.0
            self._selector.register(self.socket, selectors.EVENT_READ)
        nearest = now + 1.0
        for conn in list(self._conns):
            if conn.state == _BUSY:
                continue
            if conn.deadline <= now:
                if conn.state == _READ and conn.buf and not conn.idle and self.tls is None:
                    _try_send(conn.sock, _TIMEOUT_REPLY)  # a slow request is told why
                self._close(conn)
            else:
                nearest = min(nearest, conn.deadline)
        return max(0.0, nearest - now)

    def _accept(self, now: float) -> None:
        for _ in range(64):  # then the other connections get their turn
            try:
                sock, peer = self.socket.accept()
            except BlockingIOError:
                return
            except OSError as exc:  # out of descriptors or memory: free one, or wait a little
                if exc.errno == errno.ECONNABORTED:
                    continue
                self._warn("accept", t("cannot accept a connection: {error}; closing the "
                                       "longest idle one", error=exc.strerror))
                if not self._evict():
                    self._selector.unregister(self.socket)
                    self._accept_paused_until = now + 0.1
                return
            sock.setblocking(False)
            if len(self._conns) >= self.limits.max_connections and not self._evict():
                if self.tls is None:
                    _try_send(sock, _BUSY_REPLY)
                sock.close()
                continue
            state = _READ
            if self.tls is not None:
                try:
                    sock = self.tls.wrap_socket(sock, server_side=True,
                                                do_handshake_on_connect=False)
                except (OSError, ValueError):
                    sock.close()
                    continue
                state = _HANDSHAKE
            conn = _Conn(sock, str(peer[0]), state, now, self.limits)
            self._conns.add(conn)
            self._selector.register(sock, selectors.EVENT_READ, conn)

    def _evict(self) -> bool:
        """Close the connection idle the longest: one waiting for a request if there is one,
        else one whose client is slow to take its answer; never one being answered."""
        waiting = ([c for c in self._conns if c.state in (_HANDSHAKE, _READ)]
                   or [c for c in self._conns if c.state == _WRITE])
        if not waiting:
            return False
        self._warn("limit", t("{count} connections open: closing the longest idle ones for "
                              "new ones", count=self.limits.max_connections))
        self._close(min(waiting, key=lambda c: (c.since, c.serial)))
        return True

    def _step(self, conn: _Conn, now: float) -> None:
        if conn.state == _HANDSHAKE:
            self._handshake(conn, now)
        elif conn.state == _READ:
            self._read(conn, now)
        elif conn.state == _WRITE:
            self._write(conn, now)

    def _handshake(self, conn: _Conn, now: float) -> None:
        try:
            conn.sock.do_handshake()  # type: ignore[attr-defined]
        except ssl.SSLWantReadError:
            self._selector.modify(conn.sock, selectors.EVENT_READ, conn)
            return
        except ssl.SSLWantWriteError:
            self._selector.modify(conn.sock, selectors.EVENT_WRITE, conn)
            return
        except (OSError, ValueError):  # SSLError is an OSError: not TLS, a bad certificate...
            self._close(conn)
            return
        conn.state = _READ
        self._selector.modify(conn.sock, selectors.EVENT_READ, conn)
        self._read(conn, now)  # the request may have come with the handshake's last record

    def _read(self, conn: _Conn, now: float) -> None:
        room = self.limits.request_bytes + 1 - len(conn.buf)
        try:
            while room > 0:
                chunk = conn.sock.recv(min(room, 1 << 16))
                if not chunk:
                    conn.eof = True
                    break
                if conn.idle:  # the next request's first byte: it has header_s from now
                    conn.idle, conn.deadline = False, now + self.limits.header_s
                conn.buf += chunk
                room -= len(chunk)
        except (BlockingIOError, ssl.SSLWantReadError):
            pass
        except (OSError, ValueError):  # reset, or TLS gone wrong
            self._close(conn)
            return
        self._dispatch(conn, now)

    def _dispatch(self, conn: _Conn, now: float) -> None:
        """Hand a complete request to the workers; answer a bad one; else read on."""
        while conn.buf[:1] in (b"\r", b"\n"):  # empty lines before a request are allowed
            del conn.buf[:1]
            conn.scanned = max(0, conn.scanned - 1)
        end = _HEAD_END.search(conn.buf, max(0, conn.scanned - 3))
        if end is None or end.start() > self.limits.request_bytes:
            conn.scanned = len(conn.buf)
            if len(conn.buf) > self.limits.request_bytes:
                self._reply(conn, now, "431 Request Header Fields Too Large",
                            f"the request line and headers are over {self.limits.request_bytes} "
                            "bytes")
            elif conn.eof:
                self._close(conn)
            return
        head = bytes(conn.buf[:end.start()])
        del conn.buf[:end.end()]
        conn.scanned = 0
        try:
            request = parse_request(head, self.limits.headers)
        except BadRequest as exc:
            self._reply(conn, now, exc.status, exc.why)
            return
        conn.head = f"{request.method} {request.target[:200]}"
        conn.keep_alive = request.keep_alive and not conn.eof
        conn.state = _BUSY
        self._selector.unregister(conn.sock)
        self._jobs.put((conn, request))

    def _reply(self, conn: _Conn, now: float, status: str, why: str) -> None:
        log.debug("%s from %s: %s", status, conn.peer, why)
        conn.out = response(status, [("Content-Type", "text/plain; charset=utf-8")],
                            f"{why}\n".encode(), keep_alive=False)
        conn.keep_alive = False
        self._start_write(conn, now)

    def _start_write(self, conn: _Conn, now: float) -> None:
        conn.state, conn.sent, conn.deadline = _WRITE, 0, now + self.limits.write_s
        if self._registered(conn):
            self._selector.modify(conn.sock, selectors.EVENT_WRITE, conn)
        else:
            self._selector.register(conn.sock, selectors.EVENT_WRITE, conn)
        self._write(conn, now)

    def _write(self, conn: _Conn, now: float) -> None:
        try:
            while conn.sent < len(conn.out):
                conn.sent += conn.sock.send(memoryview(conn.out)[conn.sent:])
        except (BlockingIOError, ssl.SSLWantWriteError):
            return
        except ssl.SSLWantReadError:  # TLS wants the peer first; try again when it speaks
            self._selector.modify(conn.sock, selectors.EVENT_READ, conn)
            return
        except (OSError, ValueError):
            self._close(conn)
            return
        conn.out, conn.sent = b"", 0
        if not conn.keep_alive:
            self._close(conn)
            return
        conn.state, conn.idle, conn.since = _READ, True, now
        conn.deadline = now + self.limits.idle_s
        self._selector.modify(conn.sock, selectors.EVENT_READ, conn)
        if conn.buf:  # a pipelined request is already here
            conn.idle, conn.deadline = False, now + self.limits.header_s
        self._read(conn, now)  # TLS may hold more, decrypted already: no event would say so

    def _registered(self, conn: _Conn) -> bool:
        try:
            self._selector.get_key(conn.sock)
            return True
        except (KeyError, ValueError):
            return False

    def _close(self, conn: _Conn) -> None:
        self._conns.discard(conn)
        if self._registered(conn):
            self._selector.unregister(conn.sock)
        conn.state = "closed"
        try:
            conn.sock.close()
        except OSError:
            pass

    # the workers ---------------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            conn, request = job
            conn.out = self._answer(request, conn)
            self._done.append(conn)
            self._wake()

    def _answer(self, request: Request, conn: _Conn) -> bytes:
        """The response's bytes, whatever the app does: its exception is a 500 and one line."""
        captured: list[Any] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info=None):
            captured[:] = [status, headers]
            return lambda data: None

        try:
            result = self.app(request.environ(conn.peer, self.server_address,
                                              self.tls is not None), start_response)
            try:
                body = b"".join(result)
            finally:
                if hasattr(result, "close"):
                    result.close()
            status, headers = captured
            return response(status, headers, b"" if request.method == "HEAD" else body,
                            conn.keep_alive)
        # The server's isolation boundary: a bug behind one request must not reach the wire
        # (a traceback tells an attacker the code) nor stop the next scrape.
        except Exception as exc:  # noqa: BLE001
            log.error("%s", t("{request} from {peer}: {error}; answered 500", request=conn.head,
                                peer=conn.peer, error=_one_line(exc)))
            return response("500 Internal Server Error", [("Content-Type", "text/plain")],
                            b"the daemon could not answer this request; its log says why\n",
                            conn.keep_alive)

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except OSError:  # full (the loop is already due to wake) or closed (stopping)
            pass

    def _drain_wake(self, now: float) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass
        while self._done:
            conn = self._done.popleft()
            if conn.state == _BUSY:  # not closed by shutdown meanwhile
                self._start_write(conn, now)

    def _warn(self, what: str, message: str) -> None:
        """At most one line a minute for each kind of trouble a client can cause."""
        now = time.monotonic()
        if now - self._warned.get(what, -60.0) >= 60.0:
            self._warned[what] = now
            log.warning("%s", message)


def _one_line(exc: BaseException) -> str:
    """``KeyError: 'x' (exposition.py:120)``: the exception and where, never its traceback."""
    where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    at = f" ({Path(where.filename).name}:{where.lineno})" if where else ""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}{at}"


def _try_send(sock: socket.socket, data: bytes) -> None:
    try:
        sock.send(data)
    except OSError:
        pass


# the socket ----------------------------------------------------------------------------------

def _listener(host: str, port: int, backlog: int, listen: str) -> socket.socket:
    try:
        v6 = ipaddress.ip_address(host.split("%")[0]).version == 6
    except ValueError:
        v6 = False  # a name: resolved as IPv4, as before
    sock = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        raise ConfigError(t("cannot listen on {listen}: {error}; choose another address with "
                            "--listen or daemon.listen", listen=listen,
                            error=exc.strerror or exc)) from None
    return sock


def serve(registry: CollectorRegistry, settings: Settings,
          limits: Limits = Limits()) -> tuple[MetricsServer, threading.Thread]:
    """Start the server on a thread; returns (server, thread). Raises ConfigError."""
    host, port = settings.address()
    app = metrics_app(registry, settings)
    tls = tls_context(settings)
    listener = _listener(host, port, limits.backlog, settings.listen)
    try:
        server = MetricsServer(listener, app, tls, limits)
        thread = threading.Thread(target=server.serve_forever, name="metrics http", daemon=True)
        thread.start()
    except RuntimeError as exc:  # "can't start new thread": at start, nothing else to blame
        listener.close()
        raise ConfigError(t("cannot start the metrics server's threads ({error}): the daemon is "
                            "at its thread or address-space limit (ulimit -u, ulimit -v)",
                            error=exc)) from None
    return server, thread
