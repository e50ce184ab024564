"""Serves /metrics: prometheus-client's WSGI app, with optional TLS and HTTP basic auth.

prometheus-client's ``start_http_server`` does TLS but not basic auth, so the daemon builds
the same threaded WSGI server itself and wraps the app in an auth check. The password is
read from a file (never a flag: flags show in ``ps``) and compared in constant time.
"""

from __future__ import annotations

import base64
import hmac
import ipaddress
import socket
import ssl
import threading
from pathlib import Path
from typing import Any, Callable
from wsgiref.simple_server import make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer, _SilentHandler

from doctor.config import ConfigError
from doctor.daemon.settings import Settings


def _basic_auth(app: Callable, user: str, password: str) -> Callable:
    expected = base64.b64encode(f"{user}:{password}".encode()).decode()

    def guarded(environ: dict[str, Any], start_response: Callable) -> Any:
        given = environ.get("HTTP_AUTHORIZATION", "")
        if not (given.startswith("Basic ") and hmac.compare_digest(given[6:].strip(), expected)):
            start_response("401 Unauthorized", [("WWW-Authenticate", 'Basic realm="llm-doctor"'),
                                                ("Content-Type", "text/plain")])
            return [b"authentication required\n"]
        return app(environ, start_response)

    return guarded


def _server_class(host: str) -> type[ThreadingWSGIServer]:
    try:
        v6 = ipaddress.ip_address(host).version == 6
    except ValueError:
        v6 = False

    class Server(ThreadingWSGIServer):
        address_family = socket.AF_INET6 if v6 else socket.AF_INET

    return Server


def serve(registry: CollectorRegistry, settings: Settings) -> tuple[Any, threading.Thread]:
    """Start the server on a thread; returns (server, thread). Raises ConfigError."""
    host, port = settings.address()
    app = make_wsgi_app(registry)
    if bool(settings.basic_auth_user) != bool(settings.basic_auth_password_file):
        raise ConfigError("basic auth needs both daemon.basic_auth_user and "
                          "daemon.basic_auth_password_file")
    if settings.basic_auth_user:
        try:
            password = Path(settings.basic_auth_password_file).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"{settings.basic_auth_password_file}: cannot read the basic-auth "
                              f"password: {exc.strerror}") from None
        app = _basic_auth(app, settings.basic_auth_user, password)
    try:
        server = make_server(host, port, app, _server_class(host), handler_class=_SilentHandler)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {settings.listen}: {exc.strerror}; choose another "
                          "address with --listen or daemon.listen") from None
    if bool(settings.tls_cert_file) != bool(settings.tls_key_file):
        raise ConfigError("TLS needs both daemon.tls_cert_file and daemon.tls_key_file")
    if settings.tls_cert_file:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(settings.tls_cert_file, settings.tls_key_file)
        except (OSError, ssl.SSLError) as exc:
            server.server_close()
            raise ConfigError(f"{settings.tls_cert_file}: cannot load the TLS certificate and "
                              f"key: {exc}") from None
        server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, name="metrics http", daemon=True)
    thread.start()
    return server, thread
