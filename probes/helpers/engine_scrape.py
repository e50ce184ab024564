"""Each engine's /metrics page scraped twice and put in one vocabulary: engine.metrics' work.

Source: ``GET <engine>/metrics`` (Prometheus text) twice, SCRAPE_INTERVAL_S apart, each
bounded to PAGE_TIMEOUT_S and PAGE_MAX_BYTES; the first is the page discovery read
(probes/helpers/engine_pages.py), so an engine is asked for it twice in all. Parsed by
prometheus-client's parser and normalised by probes.helpers.engine_normalise.

In a scan, engine.metrics scrapes once and the runner hands its record to the probes that
name it in ``needs`` or ``after`` (``scraped(host, options, inputs)``); the daemon hands it
over the same way. A probe run without it (on its own, or after a metrics probe that did not
end ok) scrapes here itself; the first page of each is discovery's, kept per scan on the host.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from doctor.inputs import Inputs
from doctor.model import Level, ScanOptions
from doctor.redact import safe_display
from doctor.seam.host import Host, HostReadError, MeasurementError
from doctor.values import number
from probes.helpers.engine_discovery import found, with_discovery
from probes.helpers.engine_flags import Engine
from probes.helpers.engine_named import credentials
from probes.helpers.engine_names import kind_of_page
from probes.helpers.engine_normalise import EngineMetrics, normalise
from probes.helpers.engine_pages import first_pages
from probes.helpers.engine_reach import METRICS_MAX_BYTES as PAGE_MAX_BYTES
from probes.helpers.engine_reach import METRICS_TIMEOUT_S as PAGE_TIMEOUT_S
from probes.helpers.promtext import Page, PageError, parse

NAME = "engine.metrics"  # the probe whose record this is, in ProbeSpec.needs and after
SCRAPE_INTERVAL_S = {Level.QUICK: 2.0, Level.STANDARD: 3.0, Level.FULL: 5.0}


@dataclass(frozen=True, slots=True)
class ScrapeError:
    endpoint: str
    reason: str  # "timeout", "failed", "not-found", "not-metrics"
    detail: str  # what went wrong, without the URL

    @property
    def message(self) -> str:
        return f"{self.endpoint}: {self.reason} ({self.detail})"


@dataclass(frozen=True, slots=True)
class MetricsRecord:
    engines: tuple[EngineMetrics, ...]
    errors: tuple[str, ...]  # engines whose page could not be read, each naming its URL


def scraped(host: Host, options: ScanOptions, inputs: Inputs) -> MetricsRecord:
    """The scrapes engine.metrics handed over in ``inputs``, else scraped here."""
    record = inputs.get(NAME, MetricsRecord)
    if record is not None:
        return record
    results = scrape_all(host, options, found(host, options, inputs).engines)
    return MetricsRecord(tuple(r for r in results if isinstance(r, EngineMetrics)),
                         tuple(r.message for r in results if isinstance(r, ScrapeError)))


def with_metrics(host: Host, options: ScanOptions, inputs: Inputs) -> Inputs:
    """``inputs`` holding engine.discovery's and engine.metrics' records: those handed over,
    else read here once; a probe run without them calls this at its start, so that a read
    per engine does not scrape every engine again."""
    inputs = with_discovery(host, options, inputs)
    if inputs.get(NAME, MetricsRecord) is not None:
        return inputs
    return inputs.adding(NAME, scraped(host, options, inputs))


def for_engine(record: MetricsRecord, base_url: str) -> EngineMetrics | str | None:
    """The scrape of the engine at ``base_url``, or why it failed (its error, naming its
    URL); None when it was not scraped."""
    base = base_url.rstrip("/")
    for m in record.engines:
        if m.endpoint.rsplit("/metrics", 1)[0].rstrip("/") == base:
            return m
    for error in record.errors:  # "<url>/metrics: <reason> (<detail>)"
        if error.partition(": ")[0].rsplit("/metrics", 1)[0].rstrip("/") == base:
            return error
    return None


def targets(engines: tuple[Engine, ...]) -> list[Engine]:
    """The engines to scrape: those with a URL (Ollama serves no /metrics)."""
    return [e for e in engines if e.base_url and e.kind != "ollama"]


def scrape_all(host: Host, options: ScanOptions,
               engines: tuple[Engine, ...]) -> tuple[EngineMetrics | ScrapeError, ...]:
    """Both scrapes of every engine discovery found (``engines``): engine.metrics' work (a
    probe that needs it reads its record through ``scraped``)."""
    return _scrape_all(host, options, targets(engines))


def _reason(exc: HostReadError) -> str:
    return getattr(exc.reason, "value", str(exc.reason))


def _fetch(host: Host, url: str, headers: dict[str, str]) -> Page | ScrapeError:
    try:
        answer = host.http_get(url, timeout_s=PAGE_TIMEOUT_S, max_bytes=PAGE_MAX_BYTES,
                               headers=headers or None)
    except HostReadError as exc:
        return _failed(url, exc)
    if answer.status != 200:
        return ScrapeError(url, "failed", f"HTTP {answer.status}" +
                           ("; the engine wants an API key: pass --endpoint http://:KEY@host:port"
                            if answer.status in (401, 403) else ""))
    try:
        return parse(answer.body, url)
    except PageError as exc:
        return _failed(url, exc)


def _failed(url: str, exc: HostReadError | PageError) -> ScrapeError:
    if isinstance(exc, PageError):
        return ScrapeError(url, "not-metrics", safe_display(str(exc).split(": ", 1)[-1]))
    return ScrapeError(url, _reason(exc), exc.detail or "no detail")


def _scrape_all(host: Host, options: ScanOptions,
                engines: list[Engine]) -> tuple[EngineMetrics | ScrapeError, ...]:
    auth = credentials(options)
    known = first_pages(host)
    first: dict[str, tuple[Page | ScrapeError, float]] = {}
    for e in engines:
        base = e.base_url or ""
        url = f"{base}/metrics"
        if base in known:
            page, at = known[base]
            first[base] = (page if isinstance(page, Page) else _failed(url, page), at)
        else:
            first[base] = (_fetch(host, url, auth.get(base, {})), time.monotonic())
    wanted = SCRAPE_INTERVAL_S[options.level]
    if host.kind == "live" and any(isinstance(p, Page) for p, _ in first.values()):
        newest = max(t for p, t in first.values() if isinstance(p, Page))
        time.sleep(min(max(wanted - (time.monotonic() - newest), 0), wanted))
    return tuple(_second(host, e, first[e.base_url or ""], auth, wanted) for e in engines)


def _second(host: Host, e: Engine, first: tuple[Page | ScrapeError, float],
            auth: dict[str, dict[str, str]], wanted: float) -> EngineMetrics | ScrapeError:
    url = f"{e.base_url}/metrics"
    before, at = first
    if isinstance(before, ScrapeError):
        return before
    after = _fetch(host, url, auth.get(e.base_url or "", {}))
    if isinstance(after, ScrapeError):
        return after
    kind = kind_of_page(after.names())
    if kind is None:
        return ScrapeError(url, "not-metrics", "a Prometheus page, but with no vLLM, SGLang, "
                           "TGI, llama.cpp or Triton metrics")
    interval = _interval(host, url, at, wanted)
    if e.kind not in ("unknown", "triton"):
        kind = e.kind if e.kind != "tensorrt-llm" or kind == "tensorrt-llm" else kind
    return normalise(kind, url, before, after, interval)


def _interval(host: Host, url: str, at: float, wanted: float) -> float:
    """Seconds between the scrapes, recorded with a capture so its replay gives the same
    rates; a recording made without it replays at the level's nominal interval."""
    try:
        measured = host.measure(f"engine.metrics interval {url}",
                                lambda: {"interval_s": round(time.monotonic() - at, 3)})
    except MeasurementError:
        return wanted
    value = number(measured.get("interval_s")) if isinstance(measured, dict) else None
    return value if value is not None and value > 0 else wanted
