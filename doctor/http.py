"""HTTP GET for probes, bounded in time and size (the live side of ``Host.http_get``).

Engines' pages (``/metrics``, ``/v1/models``, ``/props``...) are read with the standard
library's client: one request, no redirects followed across hosts, no proxy from the
environment (an inference host's ``http_proxy`` must not see engine pages). The whole
exchange is bounded by ``timeout_s``, including a server that drips its body a byte at a
time, and the body by ``max_bytes``. Manual equivalent: ``curl -sS -m 5 URL``.
"""

from __future__ import annotations

import base64
import socket
import time
import urllib.error
import urllib.parse
import urllib.request

from doctor.host import HostReadError, HttpResponse, Reason

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def display_url(url: str) -> str:
    """The URL without credentials in it (``http://user:pw@h/`` → ``http://h/``)."""
    parts = urllib.parse.urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        if parts.port:
            host += f":{parts.port}"
        parts = parts._replace(netloc=host)
    return urllib.parse.urlunsplit(parts)


def get(url: str, timeout_s: float = 5.0, max_bytes: int = 8 << 20,
        headers: dict[str, str] | None = None) -> HttpResponse:
    shown = display_url(url)
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HostReadError(shown, Reason.FAILED, "not an http(s) URL")
    sent = {"User-Agent": "llm-doctor", **(headers or {})}
    if parts.username is not None:  # http://user:pw@host/ → a Basic header, never the URL
        pair = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
        sent.setdefault("Authorization", "Basic " + base64.b64encode(pair.encode()).decode())
        url = shown
    request = urllib.request.Request(url, headers=sent)
    started = time.monotonic()
    deadline = started + timeout_s
    try:
        with _OPENER.open(request, timeout=timeout_s) as resp:
            status, content_type = resp.status, resp.headers.get("Content-Type", "")
            body = _read(resp, deadline, max_bytes, shown, timeout_s)
    except urllib.error.HTTPError as exc:  # a status is an answer: 401, 404, 503
        status, content_type = exc.code, exc.headers.get("Content-Type", "") if exc.headers else ""
        try:
            body = _read(exc, deadline, max_bytes, shown, timeout_s)
        except HostReadError:
            body = b""
    except (socket.timeout, TimeoutError):
        raise HostReadError(shown, Reason.TIMEOUT, f"no answer in {timeout_s:g} s") from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, (socket.timeout, TimeoutError)):
            raise HostReadError(shown, Reason.TIMEOUT, f"no answer in {timeout_s:g} s") from None
        raise HostReadError(shown, Reason.FAILED, str(getattr(reason, "strerror", None) or reason)) from None
    except (OSError, ValueError) as exc:  # reset mid-body, bad chunking, invalid URL parts
        raise HostReadError(shown, Reason.FAILED, f"{type(exc).__name__}: {exc}") from None
    return HttpResponse(shown, status, content_type, body.decode("utf-8", "replace"),
                        round(time.monotonic() - started, 4))


def _read(resp, deadline: float, max_bytes: int, shown: str, timeout_s: float) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while True:
        if time.monotonic() > deadline:
            raise HostReadError(shown, Reason.TIMEOUT, f"body not complete in {timeout_s:g} s")
        _shorten_timeout(resp, deadline)
        try:
            chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(65536)
        except (socket.timeout, TimeoutError):
            raise HostReadError(shown, Reason.TIMEOUT, f"body not complete in {timeout_s:g} s") from None
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if total > max_bytes:
            raise HostReadError(shown, Reason.FAILED, f"body larger than {max_bytes} bytes")
        chunks.append(chunk)


def _shorten_timeout(resp, deadline: float) -> None:
    """Each read may wait only for what is left of the whole budget (a drip feed)."""
    sock = getattr(getattr(getattr(resp, "fp", None), "raw", None), "_sock", None)
    if sock is not None:
        sock.settimeout(max(deadline - time.monotonic(), 0.01))
