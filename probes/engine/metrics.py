"""engine.metrics: each engine's /metrics page, scraped twice, in one vocabulary.

Source: ``GET <engine>/metrics`` (Prometheus text) twice, SCRAPE_INTERVAL_S apart, each
bounded to PAGE_TIMEOUT_S and PAGE_MAX_BYTES; parsed by prometheus-client's parser and
normalised by probes.helpers.engine_normalise. Units: fractions 0-1, requests, tokens/s, seconds.
No privilege needed. Manual equivalent: ``curl -s :8000/metrics; sleep 2; curl -s :8000/metrics``.

A page that is garbage, truncated, too large, too slow or never answers is an error for
that engine naming its URL; other engines are still read. When no engine could be read,
the probe fails with those errors (or is skipped when a recorded host holds no pages).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from doctor.i18n import t
from doctor.seam.host import Host, HostReadError, MeasurementError
from doctor.model import Level, ScanOptions, Skip
from doctor.inputs import NO_INPUTS, Inputs
from probes.helpers.promtext import Page, PageError, parse
from doctor.redact import safe_display
from doctor.values import number
from doctor import display
from probes.engine.discovery import METRICS_MAX_BYTES as PAGE_MAX_BYTES
from probes.engine.discovery import METRICS_TIMEOUT_S as PAGE_TIMEOUT_S
from probes.engine.discovery import credentials, discover, first_pages
from probes.helpers.engine_flags import Engine
from probes.helpers.engine_names import kind_of_page
from probes.helpers.engine_normalise import EngineMetrics, normalise
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


def scrape_all(host: Host, options: ScanOptions) -> tuple[EngineMetrics | ScrapeError, ...]:
    """Both scrapes of every engine, once per scan (memoized on the host)."""
    return host.memo("engine.metrics", lambda: _scrape_all(host, options))


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


def _targets(host: Host, options: ScanOptions) -> list[Engine]:
    return [e for e in discover(host, options)
            if e.base_url and e.kind != "ollama"]  # Ollama serves no /metrics


def _scrape_all(host: Host, options: ScanOptions) -> tuple[EngineMetrics | ScrapeError, ...]:
    engines = _targets(host, options)
    auth = credentials(host, options)
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


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> MetricsRecord:
    if not _targets(host, options):
        raise Skip(t("no engine with a listening socket or --endpoint to scrape"))
    results = scrape_all(host, options)
    good = tuple(r for r in results if isinstance(r, EngineMetrics))
    errors = tuple(r for r in results if isinstance(r, ScrapeError))
    if good:
        return MetricsRecord(good, tuple(e.message for e in errors))
    if host.kind != "live" and all("not recorded" in e.detail for e in errors):
        raise Skip(t("the recorded host holds no /metrics page for its engines"))
    worst = next((e for e in errors if e.reason == "timeout"), errors[0])
    reason = worst.reason if worst.reason in ("timeout", "not-found") else "failed"
    others = [e.message for e in errors if e is not worst]
    raise HostReadError(worst.endpoint, reason, "; ".join([worst.detail] + others))


def summary(record: MetricsRecord) -> str:
    parts = []
    for m in record.engines:
        na = t("n/a")
        use = na if m.kv_cache_use is None else display.number(m.kv_cache_use, ".0%")
        ttft = na if m.ttft_p95_s is None else f"{display.number(m.ttft_p95_s * 1000, '.0f')} ms"
        parts.append(t("{kind}: KV {use}, running {running}, waiting {waiting}, TTFT p95 {ttft}",
                       kind=m.kind, use=use, running=display.text(m.requests_running, na, 'g'),
                       waiting=display.text(m.requests_waiting, na, 'g'), ttft=ttft))
    return "; ".join(parts + [t("error: {error}", error=e) for e in record.errors])
