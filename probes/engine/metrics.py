"""engine.metrics: each engine's /metrics page, scraped twice, in one vocabulary.

Source: ``GET <engine>/metrics`` (Prometheus text) twice, SCRAPE_INTERVAL_S apart, each
bounded to PAGE_TIMEOUT_S and PAGE_MAX_BYTES; parsed by prometheus-client's parser and
normalised by probes.helpers.engine_normalise (the scrape: probes/helpers/engine_scrape.py). Units: fractions 0-1, requests, tokens/s, seconds.
No privilege needed. Manual equivalent: ``curl -s :8000/metrics; sleep 2; curl -s :8000/metrics``.

A page that is garbage, truncated, too large, too slow or never answers is an error for
that engine naming its URL; other engines are still read. When no engine could be read,
the probe fails with those errors (or is skipped when a recorded host holds no pages).
"""


from __future__ import annotations

from doctor import display
from doctor.i18n import t
from doctor.inputs import NO_INPUTS, Inputs
from doctor.model import ScanOptions, Skip
from doctor.seam.host import Host, HostReadError
from probes.helpers.engine_discovery import found
from probes.helpers.engine_normalise import EngineMetrics
from probes.helpers.engine_scrape import SCRAPE_INTERVAL_S as SCRAPE_INTERVAL_S
from probes.helpers.engine_scrape import MetricsRecord, ScrapeError, scrape_all, targets


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> MetricsRecord:
    engines = found(host, options, inputs).engines
    if not targets(engines):
        raise Skip(t("no engine with a listening socket or --endpoint to scrape"))
    results = scrape_all(host, options, engines)
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
    return t("; ").join(parts + [t("error: {error}", error=e) for e in record.errors])
