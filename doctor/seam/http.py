"""HTTP GET for probes, bounded in time and size (the live side of ``Host.http_get``).

Engines' pages (``/metrics``, ``/v1/models``, ``/props``...) are read with the standard
library's ``http.client``: HTTP/1.1, no proxy from the environment (an inference host's
``http_proxy`` must not see engine pages). Manual equivalent: ``curl -sS -m 5 URL``.

Redirects are followed only within the origin of the URL asked (its scheme, host and
port), at most ``MAX_REDIRECTS`` hops, with the same headers: an engine behind Starlette
may answer ``/metrics`` with ``307 /metrics/``. A redirect to any other origin is not
followed; it is a failed read that names the origin it pointed to. So a credential
(``Authorization`` from ``--endpoint http://:KEY@host:port``, or ``http://user:pw@host``
as Basic) never leaves the origin it was given for, and a scan never reaches a host the
user did not name.

An answer that echoes the credential sent (a body, a Content-Type, an error's status line)
comes back with it as ``***`` (doctor.endpoints.hide_keys): nothing shown or recorded of
a page carries the key on.

Whatever the server does, the answer is an ``HttpResponse`` (a non-2xx status is an
answer) or a ``HostReadError`` naming the URL, with ``Reason.TIMEOUT`` or
``Reason.FAILED`` and a short detail: a status line that is not HTTP, ``HTTP/2``, more
than 100 headers, a header line over 64 KiB, a body shorter than its Content-Length or
broken chunking, a body over ``max_bytes``. The whole exchange (connecting, TLS, the
status line, headers, body, every redirect) is bounded by ``timeout_s``: each read of the
socket waits only for what is left of it, so a server that drips its headers or its body
a byte at a time is cut at the deadline, and so is a name the resolver never answers for
(the lookup runs on one of four resolver threads and is given up at the deadline).
"""

from __future__ import annotations

import base64
import functools
import http.client
import io
import socket
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass

from doctor.endpoints import header_keys, hide_keys
from doctor.seam.host import HostReadError, HttpResponse, Reason

MAX_REDIRECTS = 5
REDIRECTS = (301, 302, 303, 307, 308)
DEFAULT_PORTS = {"http": 80, "https": 443}
READ_SIZE = 65536
# http.client's own bounds on an answer's head (its _MAXLINE and _MAXHEADERS)
MAX_LINE_BYTES = 65536
MAX_HEADERS = 100


def display_url(url: str) -> str:
    """The URL without credentials in it (``http://user:pw@h/`` → ``http://h/``); a URL
    too broken to parse loses everything before its last ``@``."""
    try:
        parts = urllib.parse.urlsplit(url)
        if parts.username is None and parts.password is None:
            return url
        return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    except ValueError:
        scheme, sep, rest = url.partition("://")
        authority_end = min((rest.find(c) for c in "/?#" if c in rest), default=len(rest))
        authority = rest[:authority_end].rpartition("@")[2]
        return f"{scheme}{sep}{authority}{rest[authority_end:]}" if sep else url.rpartition("@")[2]


@dataclass(frozen=True, slots=True)
class _Target:
    """Where one GET goes: scheme, host, port and the request target (path and query)."""

    scheme: str
    host: str
    port: int
    target: str

    @classmethod
    def of(cls, url: str) -> "_Target":
        """ValueError when ``url`` is not an http(s) URL with a host and a valid port."""
        odd = next((c for c in url if not " " < c < "\x7f"), None)
        if odd is not None:  # urlsplit would drop a tab or newline without a word
            raise ValueError(f"the URL holds {odd!r}: a space, control or non-ASCII character")
        parts = urllib.parse.urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in DEFAULT_PORTS or not parts.hostname:
            raise ValueError("not an http(s) URL")
        port = parts.port or DEFAULT_PORTS[scheme]  # .port raises ValueError out of range
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return cls(scheme, parts.hostname.lower(), port, target)

    @property
    def origin(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


def get(url: str, timeout_s: float = 5.0, max_bytes: int = 8 << 20,
        headers: dict[str, str] | None = None) -> HttpResponse:
    shown = display_url(url)
    try:
        target = _Target.of(url)
        parts = urllib.parse.urlsplit(url)
    except ValueError as exc:
        raise HostReadError(shown, Reason.FAILED, str(exc)) from None
    sent = {"User-Agent": "llm-doctor", **(headers or {})}
    if parts.username is not None:  # http://user:pw@host/ → a Basic header, never the URL
        pair = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
        sent.setdefault("Authorization", "Basic " + base64.b64encode(pair.encode()).decode())
    keys = header_keys(sent)
    started = time.monotonic()
    deadline = started + timeout_s
    try:
        for _ in range(MAX_REDIRECTS + 1):
            status, content_type, location, body = _exchange(target, sent, deadline, max_bytes,
                                                             shown, timeout_s)
            if status not in REDIRECTS or location is None:
                return HttpResponse(shown, status, hide_keys(content_type, keys),
                                    hide_keys(body.decode("utf-8", "replace"), keys),
                                    round(time.monotonic() - started, 4))
            target = _redirected(target, location, shown)
    except HostReadError as exc:  # a status line or a Location may echo the key
        raise HostReadError(exc.path, exc.reason, hide_keys(exc.detail, keys)) from None
    raise HostReadError(shown, Reason.FAILED, f"more than {MAX_REDIRECTS} redirects")


def _redirected(target: _Target, location: str, shown: str) -> _Target:
    """The next hop of a redirect, when it stays within the origin; else a failed read."""
    here = f"{target.origin}{target.target}"
    try:
        new = _Target.of(urllib.parse.urljoin(here, location.strip()))
    except ValueError:
        raise HostReadError(shown, Reason.FAILED, "redirected to a URL that is not http(s) "
                            "with a valid host and port; not followed") from None
    if new.origin != target.origin:
        raise HostReadError(shown, Reason.FAILED,
                            f"redirected to another origin ({new.origin}); only redirects "
                            f"within {target.origin} are followed")
    return new


def _exchange(target: _Target, headers: dict[str, str], deadline: float, max_bytes: int,
              shown: str, timeout_s: float) -> tuple[int, str, str | None, bytes]:
    """One GET on a new connection: (status, Content-Type, Location, body)."""
    conn: http.client.HTTPConnection | None = None
    try:
        try:
            conn = http.client.HTTPConnection(target.host, target.port, timeout=timeout_s)
            conn.sock = _connect(target, deadline)
            # getresponse() calls response_class(sock, method=...): any callable will do
            conn.response_class = functools.partial(_Response, deadline=deadline)  # type: ignore[assignment]
            conn.request("GET", target.target, headers=headers)
            resp = conn.getresponse()
            status = resp.status
            content_type = resp.getheader("Content-Type", "") or ""
            location = resp.getheader("Location")
        except _Unresolved as exc:
            raise HostReadError(shown, Reason.TIMEOUT, f"{exc} in {timeout_s:g} s") from None
        except (socket.timeout, TimeoutError):
            raise HostReadError(shown, Reason.TIMEOUT, f"no answer in {timeout_s:g} s") from None
        except (OSError, http.client.HTTPException, ValueError, UnicodeError) as exc:
            raise HostReadError(shown, Reason.FAILED, _why(exc, header_keys(headers))) from None
        if status in REDIRECTS and location is not None:
            return status, content_type, location, b""
        try:
            body = _read(resp, deadline, max_bytes, shown, timeout_s)
        except HostReadError:
            if status < 400:
                raise
            body = b""  # a 401 or a 503 is the answer, even when its body is broken
        return status, content_type, location, body
    finally:
        if conn is not None:
            conn.close()


def _connect(target: _Target, deadline: float) -> socket.socket:
    """A connected socket (TLS for https) within what is left of the deadline."""
    sock = _tcp(target, deadline)
    if target.scheme == "https":
        try:
            sock.settimeout(_left(deadline))  # the handshake as a whole waits at most this
            sock = _tls().wrap_socket(sock, server_hostname=target.host)
        except BaseException:
            sock.close()
            raise
    return sock


class _Unresolved(TimeoutError):
    """The resolver gave no address before the deadline."""


# getaddrinfo cannot be interrupted, and its own timeouts (resolv.conf's, 5 s a server and
# attempt by default) are not the caller's: a name is looked up on a daemon thread of its
# own, given up at the deadline (the thread ends when the resolver does, and never holds up
# the exit). Four lookups at once at most, so hung ones never pile up threads.
_LOOKUPS = threading.BoundedSemaphore(4)


def _addresses(target: _Target, deadline: float) -> list[tuple]:
    """getaddrinfo for the target, within the deadline (an address literal at once)."""
    try:
        return socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM,
                                  flags=socket.AI_NUMERICHOST)
    except socket.gaierror:
        pass  # a name, not an address: ask the resolver
    unresolved = _Unresolved(f"the name {target.host} did not resolve (the system resolver, "
                             "/etc/resolv.conf)")
    if not _LOOKUPS.acquire(timeout=_left(deadline)):
        raise unresolved
    answer: dict[str, object] = {}
    done = threading.Event()

    def lookup() -> None:
        try:
            answer["addresses"] = socket.getaddrinfo(target.host, target.port,
                                                     type=socket.SOCK_STREAM)
        except OSError as exc:
            answer["error"] = exc
        finally:
            _LOOKUPS.release()
            done.set()

    threading.Thread(target=lookup, name="resolve", daemon=True).start()
    if not done.wait(_left(deadline)):
        raise unresolved
    if "error" in answer:
        raise answer["error"]  # type: ignore[misc]
    return answer["addresses"]  # type: ignore[return-value]


def _tcp(target: _Target, deadline: float) -> socket.socket:
    """Each address of the host in turn (``localhost``: ::1, then 127.0.0.1)."""
    error: OSError = ConnectionError("the host name has no address")
    for family, kind, proto, _, address in _addresses(target, deadline):
        try:
            sock = socket.socket(family, kind, proto)
        except OSError as exc:  # an address family this host does not have
            error = exc
            continue
        try:
            sock.settimeout(_left(deadline))
            sock.connect(address)
            return sock
        except OSError as exc:
            sock.close()
            error = exc
    raise error


@functools.cache
def _tls() -> ssl.SSLContext:
    """The system's trusted certificates, loaded once (an engine's certificate is checked)."""
    return ssl.create_default_context()


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("deadline passed")
    return left


class _DeadlineReader(io.RawIOBase):
    """The socket as http.client reads it, each read waiting only until the deadline.

    It holds the plain ``makefile()`` http.client opened until it is closed itself: that
    file keeps the socket open after the connection hands a close-delimited body over
    to its response (``HTTPConnection.close`` then only drops its own reference).
    """

    def __init__(self, sock: socket.socket, deadline: float, plain: io.IOBase) -> None:
        super().__init__()
        self.sock, self.deadline, self.plain = sock, deadline, plain

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        self.sock.settimeout(_left(self.deadline))
        return self.sock.recv_into(buffer)

    def close(self) -> None:
        self.plain.close()
        super().close()


class _Response(http.client.HTTPResponse):
    """http.client's response, reading the socket through a _DeadlineReader."""

    def __init__(self, sock: socket.socket, *args, deadline: float, **kwargs) -> None:
        super().__init__(sock, *args, **kwargs)
        self.fp = io.BufferedReader(_DeadlineReader(sock, deadline, self.fp), READ_SIZE)


def _why(exc: BaseException, keys: tuple[str, ...] = ()) -> str:
    """What went wrong, in a few words, for a failed exchange (a quoted status line with
    the key it may echo masked before it is cut short)."""
    if isinstance(exc, http.client.RemoteDisconnected):
        return "the server closed the connection without answering"
    if isinstance(exc, http.client.UnknownProtocol):
        return (f"the server answered in {_quote(exc, keys)}, "
                "not HTTP/1.x (llm-doctor speaks HTTP/1.1)")
    if isinstance(exc, http.client.BadStatusLine):
        return f"status line is not HTTP: {_quote(exc, keys)}"
    if isinstance(exc, http.client.LineTooLong):  # its argument says which line
        what = str(exc).rpartition("reading ")[2] or "header line"
        return f"a line longer than {MAX_LINE_BYTES} bytes ({what})"
    if isinstance(exc, http.client.IncompleteRead):
        return "body cut short, or its chunked encoding broken"
    if isinstance(exc, http.client.HTTPException) and "headers" in str(exc):
        return f"more than {MAX_HEADERS} headers"
    if isinstance(exc, ssl.SSLError):
        return f"TLS: {exc.reason or exc}"
    if isinstance(exc, socket.gaierror):
        return f"host name not resolved ({exc.strerror})"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, UnicodeError):
        return "the URL or a header is not ASCII"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return f"{type(exc).__name__}: {hide_keys(str(exc), keys)[:120]}"


def _quote(exc: BaseException, keys: tuple[str, ...]) -> str:
    line = str(exc.args[0]) if exc.args else ""
    return repr(hide_keys(line, keys).strip()[:40])


def _read(resp: http.client.HTTPResponse, deadline: float, max_bytes: int, shown: str,
          timeout_s: float) -> bytes:
    if resp.length is not None and resp.length > max_bytes:
        raise HostReadError(shown, Reason.FAILED,
                            f"body larger than {max_bytes} bytes (Content-Length {resp.length})")
    chunks: list[bytes] = []
    total = 0
    while True:
        try:
            chunk = resp.read1(READ_SIZE)
        except (socket.timeout, TimeoutError):
            raise HostReadError(shown, Reason.TIMEOUT,
                                f"body not complete in {timeout_s:g} s") from None
        except (OSError, http.client.HTTPException, ValueError) as exc:
            detail = (f"body cut short, or its chunked encoding broken, after {total} bytes"
                      if isinstance(exc, (ValueError, http.client.IncompleteRead)) else _why(exc))
            raise HostReadError(shown, Reason.FAILED, detail) from None
        if not chunk:
            if resp.length:  # closed before the Content-Length promised was sent
                raise HostReadError(shown, Reason.FAILED,
                                    f"body shorter than its Content-Length: {total} bytes "
                                    f"read, {resp.length} more promised")
            return b"".join(chunks)
        total += len(chunk)
        if total > max_bytes:
            raise HostReadError(shown, Reason.FAILED, f"body larger than {max_bytes} bytes")
        chunks.append(chunk)
