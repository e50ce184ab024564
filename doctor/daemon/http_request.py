"""HTTP/1.1 requests as the daemon's server takes them (RFC 9112), and its responses.

Strict where leniency has served request smuggling and crashes elsewhere: one request line of
METHOD, an origin-form (or absolute-form) target and HTTP/1.0 or 1.1; header lines of a
token, a colon and a value without control characters; no folded lines; no request body
(the daemon takes none, so a Content-Length or Transfer-Encoding is refused rather than
guessed at). Header values are Latin-1 text, as WSGI (PEP 3333) passes them on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,64}")
_VERSION = re.compile(rb"HTTP/([0-9])\.([0-9])")
_ORIGIN = re.compile(rb"/[\x21-\x7e]*")
_ABSOLUTE = re.compile(rb"https?://[\x21-\x2e\x30-\x7e]+(/[\x21-\x7e]*)?", re.I)
_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
MAX_TARGET_BYTES = 8 << 10


class BadRequest(Exception):
    """A request refused before any handler saw it: the status to answer and why."""

    def __init__(self, status: str, why: str) -> None:
        super().__init__(why)
        self.status, self.why = status, why


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    target: str  # the path and query as sent (ASCII)
    version: str  # "HTTP/1.1"
    headers: tuple[tuple[str, str], ...]  # names in lower case, values Latin-1
    keep_alive: bool

    def environ(self, peer: str, server: tuple, tls: bool) -> dict[str, Any]:
        """The WSGI environ of this request (PEP 3333)."""
        path, _, query = self.target.partition("?")
        environ: dict[str, Any] = {
            "REQUEST_METHOD": self.method, "SCRIPT_NAME": "",
            "PATH_INFO": unquote(path, "latin-1"), "QUERY_STRING": query,
            "SERVER_NAME": str(server[0]), "SERVER_PORT": str(server[1]),
            "SERVER_PROTOCOL": self.version, "REMOTE_ADDR": peer,
            "wsgi.version": (1, 0), "wsgi.url_scheme": "https" if tls else "http",
            "wsgi.input": None, "wsgi.errors": None, "wsgi.multithread": True,
            "wsgi.multiprocess": False, "wsgi.run_once": False,
        }
        for name, value in self.headers:
            key = "HTTP_" + name.upper().replace("-", "_")
            environ[key] = f"{environ[key]}, {value}" if key in environ else value
        return environ


def parse_request(head: bytes, max_headers: int = 100) -> Request:
    """The request line and header lines (without the blank line that ends them)."""
    lines = [line[:-1] if line.endswith(b"\r") else line for line in head.split(b"\n")]
    parts = lines[0].split(b" ")
    if len(parts) != 3:
        raise BadRequest("400 Bad Request", "the request line is not METHOD TARGET HTTP/1.1")
    method, target, version = parts
    if not _TOKEN.fullmatch(method):
        raise BadRequest("400 Bad Request", "the method is not a token")
    match = _VERSION.fullmatch(version)
    if not match:
        raise BadRequest("400 Bad Request", "the request line does not end in HTTP/1.1")
    if match.group(1) != b"1":
        raise BadRequest("505 HTTP Version Not Supported", "HTTP/1.0 and HTTP/1.1 only")
    path = _origin_form(target)
    if len(lines) - 1 > max_headers:
        raise BadRequest("431 Request Header Fields Too Large", f"over {max_headers} headers")
    headers = tuple(_header(line) for line in lines[1:])
    names = [name for name, _ in headers]
    if "transfer-encoding" in names or any(n == "content-length" and v != "0"
                                           for n, v in headers):
        raise BadRequest("413 Content Too Large", "this server takes no request body")
    tokens = {t.strip().lower() for n, v in headers if n == "connection" for t in v.split(",")}
    keep_alive = version == b"HTTP/1.1" and "close" not in tokens
    return Request(method.decode("ascii"), path, version.decode("ascii"), headers, keep_alive)


def _origin_form(target: bytes) -> str:
    if len(target) > MAX_TARGET_BYTES:
        raise BadRequest("414 URI Too Long", f"the target is over {MAX_TARGET_BYTES} bytes")
    if target == b"*":
        return "*"
    if _ORIGIN.fullmatch(target):
        return target.decode("ascii")
    absolute = _ABSOLUTE.fullmatch(target)  # a proxy's form: the path is what counts
    if absolute:
        return (absolute.group(1) or b"/").decode("ascii")
    raise BadRequest("400 Bad Request", "the target is not a path like /metrics")


def _header(line: bytes) -> tuple[str, str]:
    if line[:1] in (b" ", b"\t"):
        raise BadRequest("400 Bad Request", "a folded header line (obsolete, RFC 9112 5.2)")
    name, colon, value = line.partition(b":")
    if not colon or not _TOKEN.fullmatch(name):
        raise BadRequest("400 Bad Request", "a header line is not NAME: VALUE")
    value = value.strip(b" \t")
    if _BAD_VALUE.search(value):
        raise BadRequest("400 Bad Request", "a header value holds a control character")
    return name.decode("ascii").lower(), value.decode("latin-1")


def response(status: str, headers: list[tuple[str, str]], body: bytes, keep_alive: bool) -> bytes:
    """Status line, headers (Content-Length and Connection set here), blank line, body."""
    lines = [f"HTTP/1.1 {status}"]
    lines += [f"{name}: {value}" for name, value in headers
              if name.lower() not in ("content-length", "connection")]
    lines += [f"Content-Length: {len(body)}",
              "Connection: keep-alive" if keep_alive else "Connection: close"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
