"""The engine endpoints the user named (``--endpoint``, ``[scan] endpoints``) as probes read them.

Each is an ``Endpoint`` of doctor/endpoints.py: its base URL (what reports show) and the key
it carries (``http://:KEY@host:port``), sent as a header to that endpoint only and never
shown or recorded.
"""

from __future__ import annotations

from doctor.endpoints import Endpoint, EndpointError
from doctor.endpoints import parse as parse_endpoint
from doctor.model import ScanOptions


def named(options: ScanOptions) -> tuple[Endpoint | EndpointError, ...]:
    """Each named endpoint as its value (parsed once where it came in), or why it is none: a
    text only a caller that builds its options itself passes (the command line, the config,
    the daemon's settings and a recording refuse those), parsed here."""
    out: list[Endpoint | EndpointError] = []
    for url in options.endpoints:
        if isinstance(url, Endpoint):
            out.append(url)
            continue
        try:
            out.append(parse_endpoint(url))
        except EndpointError as exc:
            out.append(exc)
    return tuple(out)


def public_base(url: str) -> str:
    """scheme://host:port of an endpoint, without credentials or a known page path
    (doctor/endpoints.py); EndpointError when ``url`` is not an endpoint."""
    return parse_endpoint(url).base_url


def credentials(options: ScanOptions) -> dict[str, dict[str, str]]:
    """Headers per base URL for the named endpoints that carry a key (http://:KEY@host:port)."""
    return {e.base_url: e.headers for e in named(options)
            if isinstance(e, Endpoint) and e.key}


def named_bases(options: ScanOptions) -> frozenset[str]:
    """The base URLs of the endpoints the user named (--endpoint, [scan] endpoints)."""
    return frozenset(e.base_url for e in named(options) if isinstance(e, Endpoint))
