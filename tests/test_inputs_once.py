"""A probe run without the records it builds on (alone, as ``llm-doctor probes --run`` or a
test runs it) reads each once: engine.load asks for its engines' /metrics no more than a scan
does, though it reads each engine's scrape twice (its live load, its window's work)."""

from __future__ import annotations

from collections import Counter

from doctor.model import ScanOptions
from doctor.scan import scan
from doctor.seam.recorded import RecordedHost
from probes.engine import load as engine_load
from probes.registry import by_name
from tests.conftest import FIXTURE_HOSTS

HOST = FIXTURE_HOSTS / "vllm-v1-calm"


class Counting(RecordedHost):
    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.asked: Counter[str] = Counter()

    def http_get(self, url, *args, **kwargs):
        self.asked[url] += 1
        return super().http_get(url, *args, **kwargs)


def test_engine_load_alone_finds_and_scrapes_its_engines_once():
    alone = Counting(str(HOST))
    record = engine_load.probe(alone, ScanOptions())
    assert record.engines and any(e.running is not None for e in record.engines)
    metrics = {u: n for u, n in alone.asked.items() if u.endswith("/metrics")}
    assert metrics and set(metrics.values()) == {2}  # discovery's page, then the second scrape
    specs = by_name()
    in_scan = Counting(str(HOST))
    chosen = tuple(specs[n] for n in ("engine.discovery", "engine.metrics", "engine.load"))
    report = scan(in_scan, ScanOptions(), chosen, [])
    assert [p.status for p in report.probes] == ["ok"] * 3
    assert in_scan.asked == alone.asked  # the same reads as the scan, none twice
