"""engine.discovery: serving engines on this host (and at --endpoint URLs), with their config.

Sources: the process table (``/proc/<pid>/cmdline`` and the listening sockets matched from
``/proc/net/tcp{,6}``, through probes.helpers.processes), then the engine's own pages over HTTP:
``/metrics`` (``vllm:cache_config_info``), ``/v1/models``, SGLang ``/server_info``, TGI
``/info``, llama.cpp ``/props``, Ollama ``/api/ps``. Every request is bounded (2 s, 1 MiB)
and an endpoint that does not answer is asked nothing more. No privilege is needed, but
another user's sockets are only matched to its process when run as that user or root.
An API key is reported as set or not, never its value. A model path an engine reports is
kept only for an engine on this host (a process here, or a loopback endpoint): other
probes read files under it, and an engine elsewhere names paths on its own machine.
Manual equivalent:
``ss -ltnp; curl -s :8000/v1/models; curl -s :8000/metrics | grep cache_config_info``.

``discover(host, options)`` is memoized per scan: the probes that read it name engine.discovery
in their registry ``needs``, so it has run, under its own timeout, before they start.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

from doctor.endpoints import EndpointError
from doctor.endpoints import parse as parse_endpoint
from doctor.seam.host import Host, HostReadError, Reason
from doctor.model import ScanOptions, Skip
from probes.helpers.promtext import Page, PageError, parse
from doctor.values import page_json
from probes.helpers import engine_flags
from probes.helpers.engine_flags import Engine
from probes.helpers.engine_names import kind_of_page
from probes.helpers.processes import engine_processes

PAGE_TIMEOUT_S = 2.0  # JSON pages
PAGE_MAX_BYTES = 1 << 20
METRICS_TIMEOUT_S = 3.0  # /metrics: engine.metrics takes this read as its first scrape
METRICS_MAX_BYTES = 8 << 20  # real pages are 50-200 KB; 8 MiB leaves room for many LoRAs


@dataclass(frozen=True, slots=True)
class DiscoveryRecord:
    engines: tuple[Engine, ...]
    engine_count: int


def discover(host: Host, options: ScanOptions) -> tuple[Engine, ...]:
    """Every engine found, once per scan (memoized on the host)."""
    return host.memo("engine.discovery", lambda: _discover(host, options))


def first_pages(host: Host) -> dict[str, tuple[Page | HostReadError | PageError, float]]:
    """The /metrics pages discovery read (or how reading failed), by base URL, with
    time.monotonic() of the read: engine.metrics takes them as its first scrape, so an
    engine is asked for its page twice and a dead endpoint is not asked again."""
    return host.memo("engine.discovery.pages", dict)


def credentials(host: Host, options: ScanOptions) -> dict[str, dict[str, str]]:
    """Headers per base URL for --endpoint URLs that carry a key (http://:KEY@host:port)."""
    return host.memo("engine.credentials", lambda: _credentials(options))


def _discover(host: Host, options: ScanOptions) -> tuple[Engine, ...]:
    engines: dict[str, Engine] = {}
    unbound: list[Engine] = []
    for proc in engine_processes(host):
        engine = engine_flags.from_process(proc)
        if engine.base_url is None:
            unbound.append(engine)
        elif engine.base_url not in engines or _richer(engine, engines[engine.base_url]):
            # a worker (VLLM::EngineCore, sglang::scheduler) guessed at the server's port
            # yields to the process that holds the socket and carries the flags
            engines[engine.base_url] = engine
    auth = credentials(host, options)
    for url in options_endpoints(options):
        try:
            base = public_base(url)
        except EndpointError as exc:  # the command line refuses these; other callers may not
            unbound.append(replace(engine_flags.blank(None), error=str(exc)))
            continue
        known = engines.get(base) or _same_port(engines, base)
        if known is not None:
            engines.pop(known.base_url or "")
            engines[base] = replace(known, base_url=base, source="process+endpoint")
        else:
            engines[base] = engine_flags.blank(base)
    found = [_ask_engine(host, e, auth.get(e.base_url or "", {})) for e in engines.values()]
    return tuple(found + unbound)


def _richer(new: Engine, old: Engine) -> bool:
    def score(e: Engine) -> tuple[bool, int]:
        return bool(e.listen), sum(v is not None for v in engine_flags.as_dict(e).values())
    return score(new) > score(old)


def options_endpoints(options: ScanOptions) -> tuple[str, ...]:
    return tuple(getattr(options, "endpoints", ()) or ())


def _same_port(engines: dict[str, Engine], base: str) -> Engine | None:
    """An --endpoint at 127.0.0.1:P is the local process listening on 0.0.0.0:P."""
    parts = urlsplit(base)
    if parts.hostname not in ("127.0.0.1", "localhost", "::1"):
        return None
    for engine in engines.values():
        if engine.source == "process" and engine.base_url and not parts.path.strip("/") \
                and urlsplit(engine.base_url).port == parts.port:
            return engine
    return None


def public_base(url: str) -> str:
    """scheme://host:port of an endpoint, without credentials or a known page path
    (doctor/endpoints.py); EndpointError when ``url`` is not an endpoint."""
    return parse_endpoint(url).base_url


def _credentials(options: ScanOptions) -> dict[str, dict[str, str]]:
    out = {}
    for url in options_endpoints(options):
        try:
            named = parse_endpoint(url)
        except EndpointError:
            continue
        if named.key:
            out[named.base_url] = named.headers
    return out


def _get(host: Host, url: str, headers: dict[str, str], metrics: bool = False):
    return host.http_get(url, timeout_s=METRICS_TIMEOUT_S if metrics else PAGE_TIMEOUT_S,
                         max_bytes=METRICS_MAX_BYTES if metrics else PAGE_MAX_BYTES,
                         headers=headers or None)


def _ask_engine(host: Host, engine: Engine, headers: dict[str, str]) -> Engine:
    """Recognise the engine from what it serves and read its live configuration."""
    base = engine.base_url or ""
    try:
        metrics = _get(host, f"{base}/metrics", headers, metrics=True)
    except HostReadError as exc:
        first_pages(host)[base] = (exc, time.monotonic())
        return replace(engine, error=str(exc))
    kind, found = engine.kind, dict(engine_flags.as_dict(engine))
    sources = list(engine.config_from)
    if metrics.status == 200:
        try:
            page = parse(metrics.body, f"{base}/metrics")
        except PageError as exc:
            first_pages(host)[base] = (exc, time.monotonic())
            return replace(engine, error=str(exc))
        kind = kind_of_page(page.names()) or kind
        first_pages(host)[base] = (page, time.monotonic())
        info = page.first_labels("vllm:cache_config_info")
        if info:
            engine_flags.merge(found, engine_flags.from_cache_config(info))
            sources.append("/metrics")
    for path, reader in engine_flags.PAGES.get(kind, engine_flags.PROBE_ORDER):
        try:
            answer = _get(host, f"{base}{path}", headers)
        except HostReadError as exc:
            if exc.reason is Reason.TIMEOUT:
                break  # an endpoint that stops answering is asked nothing more
            continue
        if answer.status in (401, 403):
            found["api_key_set"] = True
            continue
        if answer.status != 200:
            continue
        try:
            data = page_json(answer.body)
        except ValueError:
            continue
        figures = reader(data)
        if figures:
            kind = figures.pop("kind", None) or kind
            engine_flags.merge(found, figures)
            sources.append(path)
            if engine.kind == "unknown" and kind != "unknown":
                break
    if engine.pid is None and not _on_this_host(base):
        # an engine elsewhere names a path on its own machine: nothing here to read there
        found["model_path"] = None
    return replace(engine, kind=kind, config_from=tuple(dict.fromkeys(sources)), **found)


def _on_this_host(base_url: str) -> bool:
    host = urlsplit(base_url).hostname or ""
    return host == "localhost" or host == "::1" or host.startswith("127.")


def probe(host: Host, options: ScanOptions) -> DiscoveryRecord:
    engines = discover(host, options)
    if not engines:
        raise Skip("no serving engine in the process table and no --endpoint given")
    return DiscoveryRecord(engines, len(engines))


def summary(record: DiscoveryRecord) -> str:
    return "; ".join(f"{e.kind} at {e.base_url or 'no socket'}" + (f" (pid {e.pid})" if e.pid else "")
                     for e in record.engines)
