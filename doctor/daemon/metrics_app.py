"""What the daemon's server answers: /metrics (prometheus-client's WSGI app), behind HTTP
basic auth when it is configured, and the TLS context it serves with.

prometheus-client's ``start_http_server`` does TLS but not basic auth, so the daemon wraps
the app in an auth check itself. The password comes from a file (never a flag: flags show
in ``ps``), read through the guarded reader (a FIFO or /dev/zero is refused at once, not
read forever), and is compared in constant time. A header that is not ASCII, not base64 or
not Basic is a 401 like a wrong password, never an exception.
"""

from __future__ import annotations

import base64
import hmac
import re
import ssl
from typing import Any, Callable

from prometheus_client import CollectorRegistry, make_wsgi_app

from doctor.config import ConfigError
from doctor.daemon.settings import Settings, read_setting_file
from doctor.i18n import t

MAX_PASSWORD_BYTES = 4096
MAX_PEM_BYTES = 1 << 20  # a certificate chain is a few KiB


def metrics_app(registry: CollectorRegistry, settings: Settings) -> Callable:
    """The WSGI app to serve; ConfigError when the basic-auth settings are wrong."""
    app = _routes(make_wsgi_app(registry))
    if bool(settings.basic_auth_user) != bool(settings.basic_auth_password_file):
        raise ConfigError(t("basic auth needs both daemon.basic_auth_user and "
                            "daemon.basic_auth_password_file"))
    if not settings.basic_auth_user:
        return app
    password = read_setting_file("basic_auth_password_file", settings.basic_auth_password_file,
                                 t("basic-auth password file"), MAX_PASSWORD_BYTES).strip()
    if not password:
        raise ConfigError(t("daemon.basic_auth_password_file {path}: the file is empty; write "
                            "the password in it", path=settings.basic_auth_password_file))
    return _basic_auth(app, settings.basic_auth_user, password)


def credentials_match(header: str, expected: bytes) -> bool:
    """``Authorization: Basic <base64 of user:password>`` (RFC 7617; the scheme in any case).

    The header arrives as Latin-1 text (PEP 3333): a non-ASCII byte, bad base64 or another
    scheme is a mismatch, never an exception.
    """
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return False
    try:
        given = base64.b64decode(token.strip().encode("ascii"), validate=True)
    except ValueError:  # UnicodeEncodeError and binascii.Error are ValueErrors
        return False
    return hmac.compare_digest(given, expected)


def _basic_auth(app: Callable, user: str, password: str) -> Callable:
    expected = f"{user}:{password}".encode()

    def guarded(environ: dict[str, Any], start_response: Callable) -> Any:
        if not credentials_match(environ.get("HTTP_AUTHORIZATION", ""), expected):
            start_response("401 Unauthorized", [("WWW-Authenticate", 'Basic realm="llm-doctor"'),
                                                ("Content-Type", "text/plain")])
            return [b"authentication required\n"]
        return app(environ, start_response)

    return guarded


_ACCEPT_VERSION = re.compile(r"version=([^;,]*)")


def _routes(metrics: Callable) -> Callable:
    """/metrics to prometheus-client's app, / a pointer to it, anything else 404."""

    def routed(environ: dict[str, Any], start_response: Callable) -> Any:
        path = environ["PATH_INFO"]
        if path == "/metrics":
            accept = environ.get("HTTP_ACCEPT", "")
            # prometheus-client compares a version it cannot parse with a tuple of ints
            # (TypeError): a version that is not numbers gets the default format instead
            if any(not re.fullmatch(r"[0-9]+(\.[0-9]+)*", v.strip())
                   for v in _ACCEPT_VERSION.findall(accept)):
                environ = {**environ, "HTTP_ACCEPT": ""}
            return metrics(environ, start_response)
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"llm-doctor daemon: metrics at /metrics\n"]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found: metrics are at /metrics\n"]

    return routed


def tls_context(settings: Settings) -> ssl.SSLContext | None:
    """The server's TLS context from daemon.tls_cert_file and tls_key_file; None without."""
    if bool(settings.tls_cert_file) != bool(settings.tls_key_file):
        raise ConfigError(t("TLS needs both daemon.tls_cert_file and daemon.tls_key_file"))
    if not settings.tls_cert_file:
        return None
    # Read first through the guarded reader: a FIFO, a device or a huge file is refused at
    # once, and load_cert_chain (which opens the paths itself) then reads what was checked.
    read_setting_file("tls_cert_file", settings.tls_cert_file, t("TLS certificate"), MAX_PEM_BYTES)
    read_setting_file("tls_key_file", settings.tls_key_file, t("TLS key"), MAX_PEM_BYTES)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_RENEGOTIATION  # a renegotiating client is a CPU sink
    try:
        context.load_cert_chain(settings.tls_cert_file, settings.tls_key_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(t("daemon.tls_cert_file {cert}, daemon.tls_key_file {key}: cannot load "
                            "the TLS certificate and key: {error}; give a PEM certificate and "
                            "its unencrypted key", cert=settings.tls_cert_file,
                            key=settings.tls_key_file, error=exc)) from None
    return context
