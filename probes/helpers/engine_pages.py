"""Reading an engine's own pages: what it is and how it is configured, from what it serves.

``GET /metrics`` (``vllm:cache_config_info``), ``/v1/models``, SGLang ``/server_info``, TGI
``/info``, llama.cpp ``/props``, Ollama ``/api/ps`` and vLLM's ``/version`` (the engine's
version, probes/helpers/engine_version.py). Every request is bounded (2 s, 1 MiB; /metrics
3 s, 8 MiB) and an endpoint that stops answering is asked nothing more. What was asked and
what came back is the endpoint's reachability (probes/helpers/engine_reach.py).

The /metrics pages and Ollama's /api/ps answers read here are kept per scan on the host (a
cache of those reads, with the time of each): engine.metrics takes the page as its first
scrape and engine.ollama the answer as its first read, so an engine is not asked again.
Manual equivalent: ``curl -s :8000/v1/models; curl -s :8000/metrics | grep cache_config_info``.
"""

from __future__ import annotations

import time
from dataclasses import replace
from urllib.parse import urlsplit

from doctor.seam.host import Host, HostReadError, Reason
from doctor.values import page_json
from probes.helpers import engine_flags, engine_version
from probes.helpers.engine_flags import Engine
from probes.helpers.engine_names import kind_of_page
from probes.helpers.engine_reach import (METRICS_MAX_BYTES, METRICS_TIMEOUT_S, PAGE_MAX_BYTES,
                                         PAGE_TIMEOUT_S, Reachability, Tries)
from probes.helpers.promtext import Page, PageError, parse


def first_pages(host: Host) -> dict[str, tuple[Page | HostReadError | PageError, float]]:
    """The /metrics pages discovery read (or how reading failed), by base URL, with
    time.monotonic() of the read: engine.metrics takes them as its first scrape, so an
    engine is asked for its page twice and a dead endpoint is not asked again."""
    return host.memo("engine.discovery.pages", dict)


def ollama_ps_pages(host: Host) -> dict[str, tuple[object, float]]:
    """The /api/ps answers discovery read (parsed JSON), by base URL, with time.monotonic()
    of the read: engine.ollama takes them as its first read of the models loaded."""
    return host.memo("engine.discovery.ollama_ps", dict)


def get(host: Host, url: str, headers: dict[str, str], metrics: bool = False):
    return host.http_get(url, timeout_s=METRICS_TIMEOUT_S if metrics else PAGE_TIMEOUT_S,
                         max_bytes=METRICS_MAX_BYTES if metrics else PAGE_MAX_BYTES,
                         headers=headers or None)


def ask_engine(host: Host, engine: Engine, headers: dict[str, str],
               reached: dict[str, Reachability]) -> Engine:
    """Recognise the engine from what it serves and read its live configuration; what was
    asked and what came back goes into ``reached`` under its base URL."""
    base = engine.base_url or ""
    tries = Tries(base)
    try:
        return _read_pages(host, engine, headers, tries)
    finally:
        reached[base] = tries.result(engine)


def _read_pages(host: Host, engine: Engine, headers: dict[str, str], tries: Tries) -> Engine:
    base = engine.base_url or ""
    try:
        metrics = get(host, f"{base}/metrics", headers, metrics=True)
    except HostReadError as exc:
        first_pages(host)[base] = (exc, time.monotonic())
        tries.error("/metrics", exc)
        return replace(engine, error=str(exc))
    kind, found = engine.kind, dict(engine_flags.as_dict(engine))
    sources = list(engine.config_from)
    error = None
    if metrics.status == 200:
        try:
            page = parse(metrics.body, f"{base}/metrics")
        except PageError as exc:
            # not Prometheus text: the pages below still tell an engine from another server
            first_pages(host)[base] = (exc, time.monotonic())
            tries.status("/metrics", metrics, "not Prometheus text")
            error = str(exc)
        else:
            named = kind_of_page(page.names())
            tries.status("/metrics", metrics, f"{named} metrics" if named
                         else "a Prometheus page with no engine's metrics")
            tries.identified = named is not None
            kind = named or kind
            first_pages(host)[base] = (page, time.monotonic())
            info = page.first_labels("vllm:cache_config_info")
            if info:
                engine_flags.merge(found, engine_flags.from_cache_config(info))
                sources.append("/metrics")
    else:
        tries.status("/metrics", metrics)
    asked: dict[str, object] = {}  # path → its JSON, or what came back instead (the version's)
    hung = False
    for path, reader in engine_flags.PAGES.get(kind, engine_flags.PROBE_ORDER):
        try:
            answer = get(host, f"{base}{path}", headers)
        except HostReadError as exc:
            tries.error(path, exc)
            asked[path] = engine_version.Unread(exc.reason.value)
            if exc.reason is Reason.TIMEOUT:
                hung = True
                break  # an endpoint that stops answering is asked nothing more
            continue
        if answer.status in (401, 403):
            tries.status(path, answer)
            asked[path] = engine_version.Unread(f"HTTP {answer.status}")
            found["api_key_set"] = True
            continue
        if answer.status != 200:
            tries.status(path, answer)
            asked[path] = engine_version.Unread(f"HTTP {answer.status}")
            continue
        try:
            data = page_json(answer.body)
        except ValueError:
            tries.status(path, answer, "not JSON")
            asked[path] = engine_version.Unread("not JSON")
            continue
        asked[path] = data
        if path == "/api/ps":
            ollama_ps_pages(host)[base] = (data, time.monotonic())
        figures = reader(data)
        tries.status(path, answer, "an engine's page" if figures else "no engine's fields")
        if figures:
            tries.identified = True
            kind = figures.pop("kind", None) or kind
            engine_flags.merge(found, figures)
            sources.append(path)
            if engine.kind == "unknown" and kind != "unknown":
                break
    if engine.pid is None and not _on_this_host(base):
        # an engine elsewhere names a path on its own machine: nothing here to read there
        found["model_path"] = None
    # not part of reachability (tries): a page that states a version, not one that finds an engine
    version, why = engine_version.read(
        kind, asked, None if hung else lambda path: get(host, f"{base}{path}", headers))
    return replace(engine, kind=kind, config_from=tuple(dict.fromkeys(sources)), error=error,
                   version=version, version_reason=why or None, **found)


def _on_this_host(base_url: str) -> bool:
    host = urlsplit(base_url).hostname or ""
    return host == "localhost" or host == "::1" or host.startswith("127.")
